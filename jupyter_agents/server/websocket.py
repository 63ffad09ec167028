"""``/terminals/websocket/<name>``: the terminado protocol JupyterLab speaks.

Client -> server frames: ``["stdin", text]``, ``["set_size", rows, cols, height_px,
width_px]``; anything else is ignored. Server -> client: see :mod:`.streams`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.identity import User
from jupyter_server.auth.utils import warn_disabled_authorization
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from jupyter_agents.core.errors import AgentsError, http_error
from jupyter_agents.core.records import Session
from jupyter_agents.server.streams import LiveTerminal, Streams
from jupyter_agents.sessions.service import SessionService

AUTH_RESOURCE = "terminals"
MAX_ROWS, MAX_COLS = 1000, 2000
#: below this many unflushed bytes a viewer that fell behind is caught up again
#: (:meth:`~jupyter_agents.server.streams.LiveTerminal.caught_up`)
RESUME_BYTES = 1 << 20
#: unflushed characters past which a viewer's output is held and coalesced
#: (:meth:`TermSocket.send_output`)
COALESCE_BYTES = 64 << 10


def parse_message(raw: str | bytes) -> tuple[str, Any, Any] | None:
    """Validate one client frame -> ``("stdin", text, None)`` or ``("set_size", rows,
    cols)``; None for anything malformed or unknown (which the socket ignores).

    >>> parse_message('["set_size", 24, 80, 400, 600]'), parse_message('["x"]')
    (('set_size', 24, 80), None)
    """
    if not isinstance(raw, str):
        return None
    try:
        msg = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
        return None
    if msg[0] == "stdin" and len(msg) >= 2 and isinstance(msg[1], str):
        return ("stdin", msg[1], None)
    if msg[0] == "set_size" and len(msg) >= 3:
        rows, cols = msg[1], msg[2]
        if (
            type(rows) is int
            and type(cols) is int
            and 0 < rows <= MAX_ROWS
            and 0 < cols <= MAX_COLS
        ):
            return ("set_size", rows, cols)
    return None


async def allowed(handler: JupyterHandler, action: str, resource: str) -> User:
    """The request's user, if they may do ``action`` on ``resource``; 403 otherwise (also
    without a user: a websocket cannot be redirected to log in)."""
    user = handler.current_user
    if not user:
        raise web.HTTPError(403)
    if handler.authorizer is None:
        warn_disabled_authorization()
    elif not await ensure_async(handler.authorizer.is_authorized(handler, user, action, resource)):
        raise web.HTTPError(403)
    return user  # type: ignore[no-any-return]


class TermSocket(WebSocketMixin, JupyterHandler, WebSocketHandler):  # type: ignore[misc]
    """One viewer of one running terminal (authorized ``execute`` on ``terminals``)."""

    auth_resource = AUTH_RESOURCE
    auth_action = "execute"
    watch_only = False

    def initialize(self, service: SessionService, streams: Streams) -> None:
        self.service = service
        self.streams = streams
        self.session: Session | None = None
        self.terminal: LiveTerminal | None = None
        #: characters written and not yet flushed to the socket
        self.pending = 0
        #: output held while a write is unflushed (:meth:`send_output`), and its length
        self._unsent: list[str] = []
        self._held_size = 0
        #: characters of all the messages written to it
        self.sent = 0

    async def get(self, *args: Any, **kwargs: Any) -> None:
        user = await allowed(self, self.auth_action, self.auth_resource)
        try:
            self.session = await asyncio.to_thread(self.find_session, user, args[0])
        except AgentsError as e:
            raise http_error(e) from e
        await super().get(*args, **kwargs)

    def find_session(self, user: User, name: str) -> Session:
        """The running session this socket shows (blocking; 404 for unknown names: a
        websocket never creates a terminal)."""
        return self.service.terminal(name)

    def open(self, name: str) -> None:  # type: ignore[override]
        super().open(name)
        assert self.session is not None
        try:
            self.terminal = self.streams.connect(self.session, self)
        except AgentsError:
            self.close(1011, "terminal is gone")

    def on_message(self, message: str | bytes) -> None:
        msg = parse_message(message)
        if msg is None or self.terminal is None:
            if msg is None:
                self.log.debug("jupyter_agents: ignored malformed terminal frame")
            return
        if msg[0] == "stdin":
            self.terminal.write(msg[1], self)
        else:
            self.terminal.set_size(self, msg[1], msg[2])

    def on_close(self) -> None:
        if self.terminal is not None:
            self.terminal.remove_viewer(self)
            self.terminal = None

    @property
    def backlog(self) -> int:
        """Characters sent to this viewer or held for it, not yet flushed to its socket."""
        return self.pending + self._held_size

    def send(self, message: str) -> None:
        """Write one message, after the output held for it (the order stays)."""
        self._release()
        self._write(message)

    def send_output(self, text: str) -> None:
        """Write terminal output. While more than :data:`COALESCE_BYTES` are unflushed
        the text is held, and goes out with the output after it, as one message, once
        the writes before it have flushed below that: a viewer that reads slowly has a
        few writes in flight, not one per chunk of output. (Each write is a future and
        a task; thousands of them pending made the garbage collector stop the server
        for 50-120 ms at a time under a flood.)"""
        self._unsent.append(text)
        self._held_size += len(text)
        if self.pending <= COALESCE_BYTES:
            self._release()

    def drop_output(self) -> None:
        """Forget the output held for it (it is about to be redrawn from a snapshot)."""
        self._unsent.clear()
        self._held_size = 0

    def _release(self) -> None:
        if self._unsent:
            text = "".join(self._unsent)
            self.drop_output()
            self._write(json.dumps(["stdout", text]))

    def _write(self, message: str) -> None:
        try:
            flushed = self.write_message(message)
        except WebSocketClosedError:
            return
        size = len(message)
        self.pending += size
        self.sent += size
        flushed.add_done_callback(lambda f: self._flushed(size, f))

    def _flushed(self, size: int, future: Any) -> None:
        self.pending -= size
        if not future.cancelled():
            future.exception()  # a closed stream: seen here, not logged as unretrieved
        if self.pending <= COALESCE_BYTES:
            self._release()
        if self.terminal is not None and self.pending <= RESUME_BYTES:
            self.terminal.caught_up(self)


class NoSuchTerminal(JupyterHandler):
    """``/terminals/websocket/<anything that is not a name>``: no terminal has it (names
    are letters, digits and underscores), so 404 here, as :class:`TermSocket` says for an
    unknown name (403 first for whom the socket would refuse), rather than whatever
    another extension serves for ``/terminals/<path>`` (Notebook 7's terminal page
    answers 200)."""

    async def get(self, name: str) -> None:
        await allowed(self, TermSocket.auth_action, AUTH_RESOURCE)
        raise web.HTTPError(404, f"no terminal is named {name[:64]!r}")
