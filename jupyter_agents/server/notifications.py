"""REST of notifications (:mod:`jupyter_agents.notify`), the owner's only: what is set
up (``GET /api/agents/notify``) and the presence signal of the owner's Lab tabs
(``POST /api/agents/presence``), by which "notify only while no Lab tab is visible"
works. Thin, as :mod:`.handlers`."""

from __future__ import annotations

import json
import re
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_agents.core.errors import AgentsError, http_error
from jupyter_agents.notify.notifier import Notifier
from jupyter_agents.server import params
from jupyter_agents.server.websocket import AUTH_RESOURCE
from jupyter_agents.sharing.auth import is_owner

_TAB = re.compile(r"[\w-]{1,64}")


class OwnerHandler(APIHandler):
    """Base: authorized like terminals (``read`` to GET, ``write`` to change), and the
    server's owner only (403 for anyone else, e.g. a share's watcher)."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, notifier: Notifier | None) -> None:
        self._notifier = notifier

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
        self.reply({"visible_tabs": n.presence.visible(), "ttl": n.presence.ttl})
