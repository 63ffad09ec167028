"""REST of notifications (:mod:`jupyter_agents.notify`), the owner's only: what is set
up (``GET /api/agents/notify``), the presence signal of the owner's Lab tabs
(``POST /api/agents/presence``), by which "notify only while no Lab tab is visible"
works, and Web Push: the server's public key and the owner's devices
(``/api/agents/push/...``); and the service worker, ``{base_url}agents/sw.js``, served
to anyone (it holds nothing but code). Thin, as :mod:`.handlers`."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_agents.core.errors import AgentsError, http_error
from jupyter_agents.notify.notifier import Notifier
from jupyter_agents.notify.webpush import WebPushChannel, public_key
from jupyter_agents.server import params
from jupyter_agents.server.websocket import AUTH_RESOURCE
from jupyter_agents.sharing.auth import is_owner

_TAB = re.compile(r"[\w-]{1,64}")
SERVICE_WORKER = Path(__file__).parents[1] / "push_static" / "sw.js"
T = TypeVar("T")


class OwnerHandler(APIHandler):
    """Base: authorized like terminals (``read`` to GET, ``write`` to change), and the
    server's owner only (403 for anyone else, e.g. a share's watcher)."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, notifier: Notifier | None, push: WebPushChannel | None = None) -> None:
        self._notifier = notifier
        self._push = push

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; an AgentsError becomes its HTTP error."""
        try:
            return await asyncio.to_thread(fn, *args)
        except AgentsError as e:
            raise http_error(e) from e

    def push(self) -> WebPushChannel:
        """The Web Push channel, for the owner; 404 when it is not on."""
        self.owner()
        if self._push is None:
            raise web.HTTPError(404, "Web Push is off on this server (notify_channels)")
        return self._push

    def body(self, allowed: set[str]) -> dict[str, Any]:
        """The JSON object body; 400 for anything else or a field not in ``allowed``."""
        try:
            return params.json_object(self.request.body, allowed)
        except AgentsError as e:
            raise http_error(e) from e

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))

    def owner(self) -> Notifier:
        """The notifier, for the owner (403 for anyone else); the base URL this call
        came to is where the owner's devices reach the server
        (:class:`~jupyter_agents.notify.notifier.Links`)."""
        if not is_owner(self.current_user):
            raise web.HTTPError(403, "only the server's owner gets its notifications")
        if self._notifier is None:
            raise web.HTTPError(404, "notifications are off on this server")
        if self.request.method != "GET":
            request = self.request
            self._notifier.links.learn(f"{request.protocol}://{request.host}{self.base_url}")
        return self._notifier


class NotifyHandler(OwnerHandler):
    """``GET /api/agents/notify``: what notifications are set up: each channel with
    whether it can send (``reason`` when not), the policy, the presence TTL and how many
    Lab tabs say they are visible now, and what was sent since the server started."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        n = self.owner()
        self.reply(
            {
                "channels": [
                    {"name": c.name, "ready": c.refused() is None, "reason": c.refused()}
                    for c in n.channels
                ],
                "when": n.policy.when,
                "quiet_hours": n.policy.quiet_hours(),
                "presence_ttl": n.presence.ttl,
                "visible_tabs": n.presence.visible(),
                "counts": n.counts,
            }
        )


class PresenceHandler(OwnerHandler):
    """``POST /api/agents/presence`` ``{visible: bool, tab: str}``: Lab tab ``tab`` (an
    id the page picks, 1-64 letters, digits, ``_`` or ``-``) is visible (for
    ``presence_ttl`` seconds: repeat it while visible) or no longer. Returns
    ``{visible_tabs, ttl}``."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        n = self.owner()
        data = self.body({"visible", "tab"})
        visible, tab = data.get("visible"), data.get("tab")
        if not isinstance(visible, bool):
            raise web.HTTPError(400, '"visible" must be true or false')
        if not isinstance(tab, str) or not _TAB.fullmatch(tab):
            raise web.HTTPError(400, '"tab" must be 1-64 letters, digits, "_" or "-"')
        n.presence.report(tab, visible)
        n.presence_changed()
        self.reply({"visible_tabs": n.presence.visible(), "ttl": n.presence.ttl})


class PushKeyHandler(OwnerHandler):
    """``GET /api/agents/push/key``: ``{public_key, available, reason}``: the server's
    VAPID public key (``applicationServerKey`` for ``pushManager.subscribe``), and
    whether pushes can be sent (``reason`` says why not, e.g. no ``push_subject``)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        push = self.push()
        reason = push.refused()
        self.reply(
            {"public_key": public_key(push.vapid), "available": reason is None, "reason": reason}
        )


class PushSubscriptionsHandler(OwnerHandler):
    """``GET /api/agents/push/subscriptions``: the owner's devices (``{id, name,
    endpoint, created}``, no keys). ``POST`` ``{endpoint, keys: {p256dh, auth}, name?}``
    (``PushSubscription.toJSON()`` and a name): turn a device on (201; the same endpoint
    again replaces its keys and name, 200)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        push = self.push()
        self.reply([s.to_model() for s in await self.call(push.subscriptions.list)])

    @web.authenticated
    @authorized
    async def post(self) -> None:
        push = self.push()
        body = self.body({"endpoint", "keys", "name", "expirationTime"})
        before = {s.id for s in await self.call(push.subscriptions.list)}
        kept = await self.call(push.subscriptions.add, body)
        self.reply(kept.to_model(), 200 if kept.id in before else 201)


class PushSubscriptionHandler(OwnerHandler):
    """``DELETE /api/agents/push/subscriptions/<id>``: turn a device off (204; 404 for
    none of the owner's). The browser should also ``unsubscribe()``."""

    @web.authenticated
    @authorized
    async def delete(self, subscription_id: str) -> None:
        push = self.push()
        await self.call(push.subscriptions.remove, subscription_id)
        self.set_status(204)
        self.finish()


class ServiceWorkerHandler(web.RequestHandler):
    """``GET {base_url}agents/sw.js``: the service worker (``push_static/sw.js``), to
    anyone: it is the same code for everyone and holds no secret, and a browser fetches
    its updates without the page's credentials. Registered by the Lab page with the
    scope ``{base_url}agents/``, its own folder, so no ``Service-Worker-Allowed``."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/javascript; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(SERVICE_WORKER.read_bytes())
