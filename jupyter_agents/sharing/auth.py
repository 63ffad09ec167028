"""Who may do what on a shared server: the owner everything, anyone else only watch.

JupyterHub lets a user share their server, and a shared user passes JupyterHub's
identity provider with the owner's power (its authorizer ignores action and resource:
docs/sharing.md). Read-only watching therefore needs both classes here, configured
on the single-user server (docs/sharing.md):

- :class:`ViewerAuthorizer`, ``c.ServerApp.authorizer_class``: the owner (``
  $JUPYTERHUB_USER``) may do everything; anyone else only ``read`` on
  :data:`VIEW_RESOURCE`, which only the viewer routes ask for.
- :class:`ViewerIdentityProvider`, ``c.ServerApp.identity_provider_class``: anyone but
  the owner is not even authenticated outside the viewer routes, so a handler that only
  uses ``@web.authenticated`` (and never asks the authorizer) refuses them too.

Both subclass JupyterHub's where it is installed (its scope checks still apply). Sharing
fails closed: :func:`sharing_refused` says why a server cannot share, and then no grant
is made and no viewer route serves.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web

try:  # on a JupyterHub single-user server
    from jupyterhub.singleuser.extension import (  # type: ignore[import-not-found]
        JupyterHubAuthorizer as _Authorizer,
    )
    from jupyterhub.singleuser.extension import (
        JupyterHubIdentityProvider as _IdentityProvider,
    )
except ImportError:  # pragma: no cover - exercised without JupyterHub
    _Authorizer = AllowAllAuthorizer
    _IdentityProvider = IdentityProvider

#: the one resource a non-owner may touch, with action ``read``
VIEW_RESOURCE = "jupyter_agents:view"


def server_owner() -> str | None:
    """The user this server belongs to (``$JUPYTERHUB_USER``), None off JupyterHub."""
    return os.environ.get("JUPYTERHUB_USER") or None


def is_owner(user: User | None) -> bool:
    """Whether ``user`` owns this server (everyone does on a server without an owner)."""
    owner = server_owner()
    return user is not None and (owner is None or user.username == owner)


def may(user: User | None, action: str, resource: str) -> bool:
    """The rule of :class:`ViewerAuthorizer`, on its own.

    >>> os.environ["JUPYTERHUB_USER"] = "alice"
    >>> bob = User("bob")
    >>> may(User("alice"), "write", "terminals"), may(bob, "read", VIEW_RESOURCE)
    (True, True)
    >>> may(bob, "read", "terminals"), may(bob, "execute", VIEW_RESOURCE)
    (False, False)
    >>> may(None, "read", VIEW_RESOURCE)
    False
    >>> del os.environ["JUPYTERHUB_USER"]
    """
    if user is None:
        return False
    return is_owner(user) or (action == "read" and resource == VIEW_RESOURCE)


class ViewerAuthorizer(_Authorizer):  # type: ignore[misc,valid-type]
    """The owner may do everything, anyone else only ``read`` :data:`VIEW_RESOURCE`
    (after JupyterHub's own access check, where it applies)."""

    def is_authorized(
        self, handler: web.RequestHandler, user: User, action: str, resource: str
    ) -> bool:
        return bool(super().is_authorized(handler, user, action, resource)) and may(
            user, action, resource
        )


class OwnerOnlyIdentity:
    """Mixin for an identity provider: a user other than the owner is authenticated
    only on handlers that say ``viewer_route = True``; elsewhere they are refused with
    403 (never redirected to a login, which would loop)."""

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        user: User | None = await ensure_async(super().get_user(handler))  # type: ignore[misc]
        if user is None or is_owner(user) or getattr(handler, "viewer_route", False):
            return user

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise web.HTTPError(403, "this server is shared with you read-only")

        handler.redirect = refuse  # type: ignore[method-assign]
        return None

    async def still_valid(self, handler: web.RequestHandler) -> bool:
        """Whether the user of a long-lived request (a viewer's websocket) would still
        be let in now: on JupyterHub, its token asked of the hub again, bypassing the
        cache (so a share revoked on the hub ends the watch)."""
        hub_auth = getattr(self, "hub_auth", None)
        if hub_auth is None:
            return await ensure_async(super().get_user(handler)) is not None  # type: ignore[misc]
        token = hub_auth.get_token(handler)
        user = token and await hub_auth.user_for_token(token, use_cache=False, sync=False)
        return bool(user) and bool(hub_auth.check_scopes(hub_auth.access_scopes, user))


class ViewerIdentityProvider(OwnerOnlyIdentity, _IdentityProvider):  # type: ignore[misc,valid-type]
    """JupyterHub's identity provider (where installed), narrowed by
    :class:`OwnerOnlyIdentity`."""


def narrow_hub_identity(serverapp: Any) -> bool:
    """Make JupyterHub's identity provider ours where the admin asked for sharing.

    jupyterhub-singleuser sets ``ServerApp.identity_provider_class`` over every config
    file, so ``c.ServerApp.identity_provider_class`` in one never applies (only on the
    command line). With :class:`ViewerAuthorizer` active and JupyterHub's own provider in
    place, the provider is narrowed in place to :class:`ViewerIdentityProvider` (it adds
    methods, no state), so every holder of it (the authorizer, the web app's settings,
    its cookie hooks) applies the owner-only rule: the config file form of sharing works
    as the command-line one does. Narrowing only ever refuses more. Returns whether it
    narrowed."""
    provider = getattr(serverapp, "identity_provider", None)
    if _IdentityProvider is IdentityProvider or type(provider) is not _IdentityProvider:
        return False
    if not isinstance(getattr(serverapp, "authorizer", None), ViewerAuthorizer):
        return False
    provider.__class__ = ViewerIdentityProvider
    return True


def sharing_refused(settings: dict[str, Any]) -> str | None:
    """Why this server cannot share sessions read-only (None: it can): it needs an
    owner and both classes of this module active."""
    if server_owner() is None:
        return "read-only sharing needs JupyterHub ($JUPYTERHUB_USER names the owner)"
    if not isinstance(settings.get("authorizer"), ViewerAuthorizer):
        return (
            "read-only sharing needs c.ServerApp.authorizer_class = "
            "'jupyter_agents.auth.ViewerAuthorizer' (with the default authorizer a "
            "viewer could do everything the owner can)"
        )
    if not isinstance(settings.get("identity_provider"), OwnerOnlyIdentity):
        return (
            "read-only sharing needs c.ServerApp.identity_provider_class = "
            "'jupyter_agents.auth.ViewerIdentityProvider'"
        )
    return None
