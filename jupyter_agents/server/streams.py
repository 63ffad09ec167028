"""Live terminals in this server process: backend streams, their viewers, sizes, activity.

A :class:`LiveTerminal` exists while at least one viewer (a websocket) watches a running
session. :class:`Streams` keeps them and runs on the IO loop; it never decides a
session's fate. It subscribes to the session service's events and closes the terminal
of a session that stopped running (``disconnect``: the process ended, so JupyterLab
closes the tab; an orphaned one is only dropped). Blocking work (recording an exit,
activity, sizes) goes to worker threads. Viewers' frames and the output sent to them
are the server's terminal activity (:mod:`jupyter_agents.server.activity`); a viewer's input
is a person's.

Protocol, in one place: JSON text frames ``[type, ...]``. Server -> client:
``["setup", {}]`` first, then ``["stdout", text]`` (the first one a replay that redraws
the screen from a reset), ``["disconnect", 1]`` when the process ended. A viewer whose
own size is not the terminal's (another viewer typed last) is told the terminal's size,
``["agents_size", {"rows": r, "cols": c}]`` (then the screen is replayed to it again, to
be drawn at that size), and ``["agents_size", null]`` once its
own size applies again; never sent to a viewer whose size is the terminal's, so a lone
client (and the stock protocol) sees nothing new. JupyterLab ignores types it does not
know; our extension shows such a terminal at that size and says why.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_agents.backends import Backends
from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.events import SessionEvent
from jupyter_agents.core.records import Session
from jupyter_agents.server.activity import ServerActivity
from jupyter_agents.sessions.service import SessionService

if TYPE_CHECKING:
    from jupyter_agents.server.activity import Attendance

#: unflushed bytes at which a viewer stops getting live output; once it has drained it
#: gets a fresh replay (screen and history) and live output again. One slow browser
#: never makes the server buffer a flood, and never slows the other viewers.
LAG_BYTES = 8 << 20
#: unflushed bytes at which a read-only watcher is disconnected (it may reconnect)
WATCH_LAG_BYTES = 1 << 20
#: seconds after a told viewer's last ``set_size`` before it is told and redrawn again
#: (a tab being dragged to a new size sends one a frame: one replay, not sixty)
RETELL_DELAY = 0.25
#: seconds a viewer may wait for its screen before the wait is logged, with where its
#: stream stands (the screen normally comes in milliseconds)
SCREEN_LATE = 10.0
#: a person who typed into a terminal within this many seconds, its tab still open, is
#: at it: an agent there that shows no dialog while asking elsewhere (Codex) is told to
#: show its own at once
PRESENT = 120.0


class Viewer(Protocol):
    """A connected client (the websocket handler)."""

    #: a read-only watcher (:mod:`jupyter_agents.server.viewer`): it gets the visible screen
    #: (no history) on connect, never sizes the terminal, and is disconnected rather
    #: than caught up when it falls :data:`WATCH_LAG_BYTES` behind
    watch_only: bool

    @property
    def backlog(self) -> int:
        """Characters sent to it or held for it, not yet flushed to its socket."""

    def send(self, message: str) -> None:
        """Write a message (after any output held for it)."""

    def send_output(self, text: str) -> None:
        """Write output; held and sent with later output as one message while the
        viewer is behind (:meth:`~jupyter_agents.server.websocket.TermSocket.send_output`)."""

    def drop_output(self) -> None:
        """Forget output held for it."""

    def close(self) -> None: ...


class LiveTerminal:
    """The streaming side of one session here: its backend stream and its viewers."""

    def __init__(self, streams: Streams, session: Session) -> None:
        self.streams = streams
        self.session = session
        self.viewers: dict[Viewer, tuple[int, int] | None] = {}
        self._active: list[Viewer] = []
        #: viewers that fell :data:`LAG_BYTES` behind: no live output until caught up
        self._lagging: set[Viewer] = set()
        self._size: tuple[int, int] | None = None
        #: the viewer that typed last: its size is the session's (None: nobody typed)
        self._typist: Viewer | None = None
        #: viewers told that the terminal has a size not theirs (``agents_size``)
        self._told: dict[Viewer, tuple[int, int]] = {}
        #: told viewers that resized: when they are told (and redrawn) again
        self._retell: dict[Viewer, asyncio.TimerHandle] = {}
        self.stream = streams.backends.get(session.backend).attach(session.id, self)

    def add_viewer(self, viewer: Viewer) -> None:
        """Send ``setup``, then the replay in stream order, then live output."""
        self.viewers[viewer] = None
        self.streams.note_viewers(self)
        viewer.send(json.dumps(["setup", {}]))

        self._replay(viewer)

    def _replay(self, viewer: Viewer) -> None:
        """Send ``viewer`` the screen and history (a watcher: the screen only), then
        live output (in stream order)."""

        late = asyncio.get_running_loop().call_later(SCREEN_LATE, self._late, viewer)

        def replay(text: str) -> None:
            late.cancel()
            if viewer in self.viewers:
                viewer.send(json.dumps(["stdout", text]))
                self._active.append(viewer)

        rows = (self._size or (self.session.rows or 24, 0))[0] if viewer.watch_only else None
        self.stream.snapshot(replay, screen_rows=rows)

    def _late(self, viewer: Viewer) -> None:
        """A viewer still waits for its screen after :data:`SCREEN_LATE` seconds: say so,
        with where the stream stands (a tab that shows nothing is otherwise silent)."""
        if viewer in self.viewers and viewer not in self._active:
            self.streams.log.warning(
                "jupyter_agents: a viewer of terminal %s (session %s) has had no screen for"
                " %g s; its stream: %s",
                self.session.name,
                self.session.id,
                SCREEN_LATE,
                self.stream.describe(),
            )

    def caught_up(self, viewer: Viewer) -> None:
        """A viewer that fell behind has drained: redraw its screen, then go live."""
        if viewer in self._lagging:
            self._lagging.discard(viewer)
            self._replay(viewer)

    def remove_viewer(self, viewer: Viewer) -> None:
        """A viewer left; the last one leaving stops the stream (not the session)."""
        if viewer not in self.viewers:
            return
        del self.viewers[viewer]
        if viewer is self._typist:
            self._typist = None
        self._told.pop(viewer, None)
        if (handle := self._retell.pop(viewer, None)) is not None:
            handle.cancel()
        if viewer in self._active:
            self._active.remove(viewer)
        self._lagging.discard(viewer)
        self.streams.note_viewers(self)
        if self.viewers:
            self._apply_size()
        else:
            self.streams.drop(self, disconnect=False)

    def set_size(self, viewer: Viewer, rows: int, cols: int) -> None:
        """Remember this viewer's size; the session takes it if this viewer sets the
        size (:meth:`_apply_size`)."""
        if viewer in self.viewers:
            self.viewers[viewer] = (rows, cols)
            if viewer in self._told:
                # a viewer told the terminal's size that sends one again has redrawn at
                # its own (JupyterLab refits a tab on every resize): tell it again, once
                # its resizing settles
                if (handle := self._retell.pop(viewer, None)) is not None:
                    handle.cancel()
                loop = asyncio.get_running_loop()
                self._retell[viewer] = loop.call_later(RETELL_DELAY, self._tell_again, viewer)
            self._apply_size()
            self.streams.touch(self.session.id)

    def _apply_size(self) -> None:
        """The session gets the size of the viewer that typed last (tmux's
        ``window-size latest``): the person at the keyboard, so a phone that opens the
        session only to look never reflows the desktop's work. Until someone typed
        here (or once the one who did left), the size of the viewer that gave one
        first. Watchers never size it (their frames are dropped)."""
        sized = [s for s in self.viewers.values() if s is not None]
        if not sized:
            return
        typed = self.viewers.get(self._typist) if self._typist is not None else None
        size = typed or sized[0]
        if size != self._size:
            self._size = size
            self.stream.resize(*size)
            rows, cols = size  # re-applied when the session is reattached
            remember = functools.partial(
                self.streams.service.change, self.session.id, rows=rows, cols=cols
            )
            self.streams.offload(remember)
        self._tell_sizes(size)

    def _tell_again(self, viewer: Viewer) -> None:
        """Tell ``viewer`` the terminal's size again, and redraw it (:meth:`set_size`)."""
        self._retell.pop(viewer, None)
        if viewer in self.viewers and self._size is not None:
            self._told.pop(viewer, None)
            self._tell_sizes(self._size)

    def _tell_sizes(self, size: tuple[int, int]) -> None:
        """Tell each viewer whose own size is not ``size`` the terminal's size, and
        each one told before whose size now applies that it does (module docstring)."""
        for viewer, own in self.viewers.items():
            if viewer.watch_only or own is None:
                continue
            if own != size and self._told.get(viewer) != size:
                self._told[viewer] = size
                rows, cols = size
                viewer.send(json.dumps(["agents_size", {"rows": rows, "cols": cols}]))
                if viewer in self._active:
                    # redrawn at that size (the replay starts with a reset): what it
                    # got so far was drawn at its own
                    self._active.remove(viewer)
                    self._replay(viewer)
            elif own == size and viewer in self._told:
                del self._told[viewer]
                viewer.send(json.dumps(["agents_size", None]))

    def write(self, data: str, viewer: Viewer | None = None) -> None:
        """Input from ``viewer``: a person's (it restarts an agent's keep-alive); from
        now on the session takes that viewer's size (:meth:`_apply_size`)."""
        if viewer is not None and viewer is not self._typist and viewer in self.viewers:
            self._typist = viewer
            self._apply_size()
        self.stream.write(data)
        self.streams.touch(self.session.id, human=True)

    def close(self, disconnect: bool) -> None:
        """Stop streaming; tell viewers the process ended (``disconnect``) or just drop
        them (they reconnect by themselves)."""
        viewers = list(self.viewers)
        self.viewers.clear()
        for handle in self._retell.values():
            handle.cancel()
        self._retell.clear()
        self.streams.note_viewers(self)
        self._active.clear()
        self._lagging.clear()
        self.stream.close()
        for viewer in viewers:
            if disconnect:
                viewer.send(json.dumps(["disconnect", 1]))
            viewer.close()

    # StreamListener
    def on_output(self, data: str) -> None:
        for viewer in list(self._active):
            if viewer.watch_only and viewer.backlog > WATCH_LAG_BYTES:
                self.remove_viewer(viewer)  # a watcher never slows anyone: cut off
                viewer.close()
            elif viewer.backlog > LAG_BYTES:  # too slow: catch it up later instead
                self._active.remove(viewer)
                self._lagging.add(viewer)
                viewer.drop_output()  # a snapshot redraws it then
            else:
                viewer.send_output(data)
        self.streams.touch(self.session.id)

    def on_output_lost(self) -> None:
        """Redraw every viewer that gets live output (a lagging one is redrawn once it
        drained): output it did not get is on the screen a snapshot taken now shows."""
        for viewer in list(self._active):
            self._active.remove(viewer)
            self._replay(viewer)

    def on_exit(self, exit_code: int | None) -> None:
        self.streams.stream_ended(self, exit_code)


class Streams:
    """The live terminals of this server process, by session id (module docstring).

    Call from the IO loop, except :meth:`on_event`, which any thread may call.
    """

    def __init__(
        self,
        service: SessionService,
        backends: Backends,
        activity_interval: float = 10.0,
        log: logging.Logger | None = None,
        activity: ServerActivity | None = None,
    ) -> None:
        self.service = service
        self.backends = backends
        self.activity_interval = activity_interval
        #: where terminal activity and human input are noted for idle culling (None: not)
        self.activity = activity
        self.log = log or logging.getLogger("jupyter_agents")
        self.terminals: dict[str, LiveTerminal] = {}
        #: told who can type into each session and when a person did (the unattended
        #: limit's evidence, :class:`~jupyter_agents.server.activity.Attendance`; None: nobody)
        self.attendance: Attendance | None = None
        #: the IO loop, known once a viewer connected (before that nothing streams)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._touched: dict[str, float] = {}
        #: when a person last typed into each session (monotonic seconds)
        self._typed: dict[str, float] = {}
        #: sessions with a permission request waiting elsewhere that the CLI shows no
        #: dialog for meanwhile (handed over to the dialog once a person is at the tab)
        self._asking: set[str] = set()
        self._unsubscribe = service.events.subscribe(self.on_event)

    def connect(self, session: Session, viewer: Viewer) -> LiveTerminal:
        """Add a viewer to the running ``session`` (setup, replay, then live output)."""
        self._loop = asyncio.get_running_loop()
        term = self.terminals.get(session.id)
        if term is None:
            term = self.terminals[session.id] = LiveTerminal(self, session)
        term.add_viewer(viewer)
        return term

    def note_viewers(self, term: LiveTerminal) -> None:
        """Tell :attr:`attendance` how many viewers that can type ``term`` has now."""
        if self.attendance is not None:
            typing = sum(not v.watch_only for v in term.viewers)
            self.attendance.viewers(term.session.id, typing)

    def drop(self, term: LiveTerminal, disconnect: bool) -> None:
        """Stop streaming ``term`` (the session itself is not touched)."""
        if self.terminals.get(term.session.id) is term:
            del self.terminals[term.session.id]
        term.close(disconnect)

    def offload(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run blocking ``fn(*args)`` in a worker thread; failures are logged."""
        future = asyncio.get_running_loop().run_in_executor(None, fn, *args)

        def logged(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and isinstance(f.exception(), AgentsError):
                self.log.warning("jupyter_agents: %s", f.exception())
            elif not f.cancelled() and f.exception() is not None:
                self.log.error("jupyter_agents: %r failed", fn, exc_info=f.exception())

        future.add_done_callback(logged)
        return future

    def touch(self, session_id: str, human: bool = False) -> None:
        """Note terminal activity (``human``: a person's input, noted every time). The
        session's ``last_activity`` is written (and published), and the server's
        terminal activity set, at most every ``activity_interval`` per session."""
        now = time.monotonic()
        activity = self.activity
        if human:  # one route for a person's input: the keep-alive and the allowance
            self._typed[session_id] = now
            if session_id in self._asking:
                self._hand_over(session_id)
            if activity is not None:
                activity.human_input(session_id)
            if self.attendance is not None:
                self.attendance.human_input(session_id)
        if now - self._touched.get(session_id, 0.0) >= self.activity_interval:
            self._touched[session_id] = now
            now_iso = clock.now_iso()
            self.offload(
                functools.partial(
                    self.service.change, session_id, "activity", last_activity=now_iso
                )
            )
            if activity is not None:
                activity.terminal()

    def stream_ended(self, term: LiveTerminal, exit_code: int | None) -> None:
        """The backend stream of ``term`` ended: the process exited, or we lost it."""
        sid = term.session.id

        def settle() -> bool:
            """Record what happened (blocking); whether the session still runs."""
            if exit_code is not None:
                self.service.record_exit(sid, exit_code)
                return False
            self.service.reconcile()
            return self.service.get(sid).status == "running"

        def done(future: asyncio.Future[Any]) -> None:
            # only a process known to have ended closes its tabs; when that could not be
            # found out (a failed reconcile, logged), the viewers reconnect and see
            ended = not future.cancelled() and future.exception() is None and not future.result()
            if not ended:
                self.log.warning(
                    "jupyter_agents: lost the stream of terminal %s, which may still run; "
                    "its viewers are dropped and reconnect",
                    term.session.name,
                )
            if self.terminals.get(sid) is term:
                self.drop(term, disconnect=ended)

        self.offload(settle).add_done_callback(done)

    def on_event(self, event: SessionEvent) -> None:
        """A session changed (any thread): a terminal whose session stopped running
        closes (``disconnect`` unless it was only orphaned)."""
        loop = self._loop
        if loop is not None and event.action == "status" and event.session.status != "running":
            loop.call_soon_threadsafe(self._ended, event.session)
        if loop is not None and event.action == "request":
            loop.call_soon_threadsafe(self._requests_changed, event.session.id)

    def present(self, session_id: str) -> bool:
        """Whether a person is at the session's terminal: a viewer that can type is
        connected, and a person typed into it within :data:`PRESENT` seconds."""
        term = self.terminals.get(session_id)
        typed = self._typed.get(session_id)
        return (
            term is not None
            and any(not v.watch_only for v in term.viewers)
            and typed is not None
            and time.monotonic() - typed < PRESENT
        )

    def _requests_changed(self, session_id: str) -> None:
        """Its pending requests changed: follow whether one waits elsewhere with no
        dialog on screen, and hand it to the dialog if a person is at the tab."""

        def asking(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None or not future.result():
                self._asking.discard(session_id)
                return
            self._asking.add(session_id)
            if self.present(session_id):
                self._hand_over(session_id)

        self.offload(self.service.permissions.asks_elsewhere, session_id).add_done_callback(asking)

    def _hand_over(self, session_id: str) -> None:
        self._asking.discard(session_id)
        self.offload(self.service.permissions.hand_over, session_id, "somebody is at the terminal")

    def _ended(self, session: Session) -> None:
        term = self.terminals.get(session.id)
        if term is not None:
            self.drop(term, disconnect=session.status != "orphaned")

    async def shutdown(self) -> None:
        """Server shutdown: drop every viewer (they reconnect to the next server) and
        close every stream, waiting until their connections are gone."""
        self._unsubscribe()
        terms = list(self.terminals.values())
        self.terminals.clear()
        for term in terms:
            term.close(disconnect=False)
        await asyncio.gather(*(t.stream.aclose() for t in terms))
        await asyncio.gather(*(b.detach_streams() for b in self.backends.opened()))
