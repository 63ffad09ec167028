"""The read-only viewer path: ``/agents/view/<share>`` (a page), its assets and its
websocket. Apart from terminals on purpose: a viewer is never a terminado client.

Every route here says ``viewer_route = True`` (the only routes where
:class:`~jupyter_agents.sharing.auth.OwnerOnlyIdentity` authenticates a non-owner), asks the
authorizer for ``read`` on :data:`~jupyter_agents.sharing.auth.VIEW_RESOURCE`, and admits only
the user of a live grant (:meth:`~jupyter_agents.sharing.shares.Shares.admit`); the page and
the socket also ask the hub afresh (:func:`still_let_in`: its cached answer could be
minutes old). Any failure is 403, the same whatever the reason. The socket is then
registered with :class:`~jupyter_agents.sharing.shares.Shares` and the grant read again from the
store before any output is sent, so a revoke or an expiry that landed meanwhile closes it.

The socket sends output only (``setup``, ``stdout``, ``disconnect``): on connect the
visible screen, never the history. Every inbound frame is dropped and counted; frames
over :data:`MAX_FRAME` bytes or more than :data:`MAX_FRAMES_PER_S` a second close it.
A viewer that falls :data:`~jupyter_agents.server.streams.WATCH_LAG_BYTES` behind is
disconnected, so the owner's terminal never waits for it. The page uses xterm.js with
stdin disabled and no clipboard addon, under a CSP that allows scripts and connections
to this origin only.
"""

from __future__ import annotations

import asyncio
import html
import time
from pathlib import Path
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_agents.core.errors import AgentsError, NotFound, http_error
from jupyter_agents.core.records import Session, Share
from jupyter_agents.server.streams import Streams
from jupyter_agents.server.websocket import TermSocket
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sharing.auth import VIEW_RESOURCE, OwnerOnlyIdentity
from jupyter_agents.sharing.shares import Shares

#: the largest inbound frame a viewer socket accepts (anything is dropped anyway)
MAX_FRAME = 4096
#: inbound frames a second beyond which a viewer socket is closed
MAX_FRAMES_PER_S = 50
STATIC = Path(__file__).parents[1] / "viewer_static"
ASSETS = {
    "xterm.js": "application/javascript",
    "xterm.css": "text/css",
    "viewer.js": "application/javascript",
    "viewer.css": "text/css",
}
#: no inline script, no other origin, no framing; xterm.js sets inline styles
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'none'; font-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)


class ViewerRoute(JupyterHandler):
    """Base of the page and its assets: authenticated, ``read`` on the view resource."""

    viewer_route = True

    def initialize(self, shares: Shares, service: SessionService) -> None:
        self.shares = shares
        self.service = service

    @property
    def content_security_policy(self) -> str:
        return CSP

    async def authorized_user(self, fresh: bool = False) -> User:
        """The requester, if they may ``read`` the view resource (and with ``fresh``, if
        the hub still lets them in when asked now: :func:`still_let_in`); else 403."""
        user: User | None = self.current_user
        if not user or self.authorizer is None:
            raise web.HTTPError(403)
        if not await ensure_async(self.authorizer.is_authorized(self, user, "read", VIEW_RESOURCE)):
            raise web.HTTPError(403)
        if fresh and not await still_let_in(self):
            raise web.HTTPError(403)
        return user


async def still_let_in(handler: JupyterHandler) -> bool:
    """Whether the identity provider would let ``handler``'s user in if asked now (on
    JupyterHub: the hub, bypassing the answer HubAuth caches for up to
    ``cache_max_age`` = 300 s, so a share revoked on the hub cannot be re-opened)."""
    provider = handler.identity_provider
    return isinstance(provider, OwnerOnlyIdentity) and await provider.still_valid(handler)


class ViewerPage(ViewerRoute):
    """``GET /agents/view/<share>``: the watch page."""

    @web.authenticated
    async def get(self, share_id: str) -> None:
        user = await self.authorized_user(fresh=True)
        try:
            share = await asyncio.to_thread(self.shares.admit, share_id, user.username)
            session = await asyncio.to_thread(self.service.get, share.session_id)
        except AgentsError as e:
            raise http_error(e) from e
        base = url_path_join(self.base_url, "agents", "view")
        name = html.escape(f"{session.name} ({session.kind})")
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Watching {name} (read-only)</title>
<link rel="stylesheet" href="{base}/static/xterm.css">
<link rel="stylesheet" href="{base}/static/viewer.css"></head>
<body data-socket="{url_path_join(base, share_id, "socket")}"
 data-rows="{session.rows or 24}" data-cols="{session.cols or 80}">
<header>Read-only view of session <b>{name}</b> until {html.escape(share.expires)}</header>
<div id="terminal"></div><div id="status">connecting...</div>
<script src="{base}/static/xterm.js"></script>
<script src="{base}/static/viewer.js"></script>
</body></html>
"""
        )


class ViewerAsset(ViewerRoute):
    """``GET /agents/view/static/<file>``: xterm.js and the page's own script and style
    (for the owner too; nothing here is secret, but nothing is served unauthenticated)."""

    @web.authenticated
    async def get(self, name: str) -> None:
        await self.authorized_user()
        if name not in ASSETS:
            raise web.HTTPError(404)
        try:
            data = await asyncio.to_thread((STATIC / name).read_bytes)
        except OSError as e:
            raise web.HTTPError(404, f"{name} is missing: build the package (npm)") from e
        self.set_header("Content-Type", ASSETS[name])
        self.finish(data)


class ViewerSocket(TermSocket):
    """``/agents/view/<share>/socket``: one read-only watcher (module docstring)."""

    auth_resource = VIEW_RESOURCE
    auth_action = "read"
    watch_only = True
    viewer_route = True

    def initialize(  # type: ignore[override]
        self, service: SessionService, streams: Streams, shares: Shares
    ) -> None:
        super().initialize(service, streams)
        self.shares = shares
        self.share: Share | None = None
        self.user = ""
        self.dropped = 0
        self._window = (0.0, 0)
        self._closed: Any = None

    @property
    def max_message_size(self) -> int:
        return MAX_FRAME

    @property
    def content_security_policy(self) -> str:
        return CSP

    async def get(self, *args: Any, **kwargs: Any) -> None:
        # the hub is asked afresh on connect, not only every revalidate interval after
        if self.current_user and not await self.revalidate():
            raise web.HTTPError(403)
        await super().get(*args, **kwargs)

    def find_session(self, user: User, share_id: str) -> Session:
        self.share = self.shares.admit(share_id, user.username)
        self.user = user.username
        session = self.service.get(self.share.session_id)
        if session.status != "running":
            raise NotFound(f"session {session.id} is not running")
        return session

    async def open(self, share_id: str) -> None:  # type: ignore[override]
        """Registered as a viewer first, then the grant read again from the store
        (:meth:`~jupyter_agents.sharing.shares.Shares.confirm`), then connected to the
        terminal: a revoke or an expiry since :meth:`find_session` closes the socket
        before any output is sent."""
        assert self.share is not None
        self._closed = self.shares.watch(self.share, self)
        if not await self.shares.confirm(self.share, self) or self.ws_connection is None:
            return  # ended, or closed meanwhile
        super().open(share_id)

    def on_message(self, message: str | bytes) -> None:
        """Dropped, always; counted, and a flood closes the socket."""
        self.dropped += 1
        now = time.monotonic()
        start, count = self._window
        self._window = (start, count + 1) if now - start < 1.0 else (now, 1)
        if self._window[1] > MAX_FRAMES_PER_S:
            self.close(1008, "read-only: input is not accepted")

    def on_close(self) -> None:
        super().on_close()
        if self._closed is not None:
            self._closed(self.sent, self.dropped)
            self._closed = None

    def end(self, reason: str) -> None:
        """The grant ended (revoked, expired) or the hub no longer lets its user in."""
        self.close(4003, f"share {reason}")

    async def revalidate(self) -> bool:
        return await still_let_in(self)
