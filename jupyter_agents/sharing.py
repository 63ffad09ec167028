"""Read-only shares of sessions: grants the owner makes (stored, so they survive
restarts), their expiry and revocation, the viewers watching through each, and the
audit log.

A grant lets one user (or, without ``viewer``, any user the hub lets reach this server)
watch one running session until it expires (at most :data:`MAX_EXPIRES_IN`) or is
revoked. Revoking or expiring closes that grant's viewer sockets at once; every
:data:`REVALIDATE_S` seconds each viewer's hub token is asked of the hub again, so a
share revoked on the hub ends the watch too. Audit lines (logger
``<server log>.audit``) say who did what, never codes, tokens or terminal content.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from .errors import Conflict, Forbidden, InvalidRequest, NotFound
from .sessions import SessionService
from .store import Share, utcnow_iso

#: the longest a grant may last (seconds)
MAX_EXPIRES_IN = 8 * 3600
#: seconds between re-validations of each viewer's identity with the hub
REVALIDATE_S = 60.0


def check_grant(data: Mapping[str, Any]) -> tuple[str, str | None, int]:
    """``(session id, viewer or None, expires_in)`` from a grant request; 400 for
    anything else.

    >>> check_grant({"session": "a1", "expires_in": 3600})
    ('a1', None, 3600)
    >>> check_grant({"session": "a1", "viewer": "bob"})
    Traceback (most recent call last):
    ...
    jupyter_agents.errors.InvalidRequest: expires_in is required: whole seconds, 1 to 28800
    """
    unknown = set(data) - {"session", "viewer", "expires_in"}
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}")
    session, viewer, expires = data.get("session"), data.get("viewer"), data.get("expires_in")
    if not isinstance(session, str) or not session:
        raise InvalidRequest("session (a session id) is required")
    if viewer is not None and (not isinstance(viewer, str) or not 0 < len(viewer) <= 255):
        raise InvalidRequest("viewer must be a user name")
    if type(expires) is not int or not 0 < expires <= MAX_EXPIRES_IN:
        raise InvalidRequest(f"expires_in is required: whole seconds, 1 to {MAX_EXPIRES_IN}")
    return session, viewer, expires


def grants(share: Share, user: str, now: str) -> bool:
    """Whether ``share`` lets ``user`` watch at ``now``.

    >>> s = Share("x", "a1", "bob", "2026-12-01T00:00:00Z", "2026-12-01T01:00:00Z")
    >>> grants(s, "bob", "2026-12-01T00:30:00Z"), grants(s, "carol", "2026-12-01T00:30:00Z")
    (True, False)
    >>> grants(s, "bob", "2026-12-01T01:00:00Z")
    False
    """
    return share.active(now) and (share.viewer is None or share.viewer == user)


def hub_share_code(expires_in: int, next_path: str) -> dict[str, str]:
    """On JupyterHub, a share code of this server, made with the server's own token:
    ``{"accept_url": ...}`` (the hub's accept page, then ``next_path``), or
    ``{"hub_error": why not}``; ``{}`` off JupyterHub. The code gives access to this
    server on the hub (a hub share never expires); what it may do here is the grant's.
    Blocking. Needs ``shares!server`` in ``c.Spawner.server_token_scopes`` and
    ``shares!user`` for users (README, "Sharing a session read-only")."""
    api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    user = os.environ.get("JUPYTERHUB_USER")
    if not (api and token and user):
        return {}
    server = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
    url = f"{api.rstrip('/')}/share-codes/{urllib.parse.quote(user)}/{urllib.parse.quote(server)}"
    if not url.startswith(("http://", "https://")):
        return {"hub_error": f"JUPYTERHUB_API_URL is not an http(s) URL: {api[:80]!r}"}
    request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
        url,
        data=json.dumps({"expires_in": max(60, expires_in)}).encode(),
        method="POST",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            model = json.load(response)
    except urllib.error.HTTPError as e:
        e.close()
        return {
            "hub_error": f"the hub refused a share code ({e.code}); servers need the scope "
            "shares!server (c.Spawner.server_token_scopes) and users shares!user"
        }
    except (OSError, ValueError) as e:
        return {"hub_error": f"the hub could not make a share code: {e}"}
    accept = model.get("full_accept_url") or model.get("accept_url")
    if not isinstance(accept, str):
        return {"hub_error": "the hub's answer had no accept_url"}
    joiner = "&" if "?" in accept else "?"
    return {"accept_url": accept + joiner + urllib.parse.urlencode({"next": next_path})}


class Viewer(Protocol):
    """An open viewer socket (:class:`~jupyter_agents.viewer.ViewerSocket`)."""

    user: str

    def end(self, reason: str) -> None:
        """Close the socket (from the IO loop)."""

    def revalidate(self) -> Awaitable[bool]:
        """Whether its user would still be let in."""


class Shares:
    """The grants of one server and the viewers watching through them.

    :meth:`create`, :meth:`list` and :meth:`revoke` block (the store): call them in a
    worker thread, :meth:`revoke` returning a callable to run on the IO loop (closing
    sockets). :meth:`watch`, :meth:`schedule` (each new grant's expiry) and :meth:`run`
    belong to the IO loop.
    """

    def __init__(
        self,
        service: SessionService,
        refused: Callable[[], str | None],
        revalidate_interval: float = REVALIDATE_S,
        log: logging.Logger | None = None,
    ) -> None:
        self.service = service
        self.audit = (log or logging.getLogger("jupyter_agents")).getChild("audit")
        self.refused = refused
        self.revalidate_interval = revalidate_interval
        self.viewers: dict[str, set[Viewer]] = {}
        #: grants revoked by this process (their expiry is not news)
        self._revoked: set[str] = set()

    def _ready(self) -> None:
        reason = self.refused()
        if reason is not None:
            raise Conflict(reason)

    def create(self, data: Mapping[str, Any], owner: str) -> Share:
        """A new grant (:func:`check_grant`) on a running session; 409 when this server
        cannot share (:func:`~jupyter_agents.auth.sharing_refused`) or the session is
        not running."""
        self._ready()
        sid, viewer, expires_in = check_grant(data)
        session = self.service.get(sid)
        if session.status != "running":
            raise Conflict(f"session {sid} is {session.status}: only a running one can be watched")
        now = datetime.now(timezone.utc)
        share = Share(
            secrets.token_hex(12),
            sid,
            viewer,
            utcnow_iso(),
            (now + timedelta(seconds=expires_in)).isoformat().replace("+00:00", "Z"),
        )
        self.service.store.add_share(share)
        self._changed(sid)
        self.audit.info(
            "share %s created by %s: session %s, viewer %s, expires %s",
            share.id,
            owner,
            sid,
            viewer or "(any hub user with access)",
            share.expires,
        )
        return share

    def list(self) -> list[dict[str, Any]]:
        """The active grants, each with the users watching through it now."""
        return [
            {**s.to_model(), "watchers": sorted(v.user for v in self.viewers.get(s.id, ()))}
            for s in self.service.store.shares(active_at=utcnow_iso())
        ]

    def revoke(self, share_id: str, owner: str) -> Callable[[], None]:
        """Revoke a grant (404 if unknown or no longer active); returns what closes its
        viewer sockets, to run on the IO loop."""
        if not self.service.store.revoke_share(share_id, utcnow_iso()):
            self.service.store.share(share_id)  # 404 when unknown
            raise NotFound(f"share {share_id} is no longer active")
        self._revoked.add(share_id)
        self._changed(self.service.store.share(share_id).session_id)
        self.audit.info("share %s revoked by %s", share_id, owner)
        return lambda: self._end(share_id, "revoked")

    def admit(self, share_id: str, user: str) -> Share:
        """The grant ``user`` watches through; :class:`Forbidden` when there is no such
        live grant for them (the same answer whatever the reason) or this server
        cannot share."""
        if self.refused() is not None:
            raise Forbidden("this server does not share sessions read-only")
        try:
            share = self.service.store.share(share_id)
        except NotFound:
            share = None
        if share is None or not grants(share, user, utcnow_iso()):
            raise Forbidden("no live read-only share of yours by that id")
        return share

    def watch(self, share: Share, viewer: Viewer) -> Callable[[int, int], None]:
        """Register an open viewer; returns what to call when it closes (with the bytes
        it was sent and the input frames dropped, for the audit line)."""
        self.viewers.setdefault(share.id, set()).add(viewer)
        self._offload_changed(share.session_id)
        self.audit.info(
            "viewer %s connected to share %s (session %s)", viewer.user, share.id, share.session_id
        )

        def closed(sent: int, dropped: int) -> None:
            self.viewers.get(share.id, set()).discard(viewer)
            self._offload_changed(share.session_id)
            self.audit.info(
                "viewer %s disconnected from share %s: %d bytes sent, %d input frames dropped",
                viewer.user,
                share.id,
                sent,
                dropped,
            )

        return closed

    def _end(self, share_id: str, reason: str) -> None:
        for viewer in list(self.viewers.pop(share_id, ())):
            viewer.end(reason)

    def schedule(self, share: Share) -> None:
        """On the IO loop: end ``share``'s watches when it expires."""
        expires = datetime.fromisoformat(share.expires.replace("Z", "+00:00"))
        delay = (expires - datetime.now(timezone.utc)).total_seconds()
        asyncio.get_running_loop().call_later(max(0.0, delay), self._expire, share.id)

    def _expire(self, share_id: str) -> None:
        if share_id not in self._revoked:
            self.audit.info("share %s expired", share_id)
            self._end(share_id, "expired")
            asyncio.get_running_loop().run_in_executor(
                None, lambda: self._changed(self.service.store.share(share_id).session_id)
            )

    def _changed(self, session_id: str) -> None:
        """Publish a ``shared`` event of the session (blocking: reads the store)."""
        with contextlib.suppress(NotFound):
            self.service.publish("shared", self.service.get(session_id))

    def _offload_changed(self, session_id: str) -> None:
        asyncio.get_running_loop().run_in_executor(None, self._changed, session_id)

    async def run(self) -> None:
        """Forever, on the IO loop: schedule the expiry of the stored grants, then every
        ``revalidate_interval`` s re-validate each viewer with the hub."""
        for share in await asyncio.to_thread(self.service.store.shares, utcnow_iso()):
            self.schedule(share)
        while True:
            await asyncio.sleep(self.revalidate_interval)
            for share_id, viewers in list(self.viewers.items()):
                for viewer in list(viewers):
                    try:
                        valid = await viewer.revalidate()
                    except Exception as e:  # e.g. the hub unreachable: fail closed
                        self.audit.warning(
                            "viewer %s of share %s: could not re-validate (%s)",
                            viewer.user,
                            share_id,
                            type(e).__name__,
                        )
                        valid = False
                    if not valid:
                        self.audit.info(
                            "viewer %s of share %s: no longer let in by the hub",
                            viewer.user,
                            share_id,
                        )
                        viewers.discard(viewer)
                        viewer.end("no longer authorized")
