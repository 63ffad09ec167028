"""TmuxStream: one viewed tmux session, through the shared control client.

Output comes from the session's transcript, which tmux's ``pipe-pane`` writes with the
pane's raw bytes in order: read the moment it grows (:mod:`.tail`), it reaches viewers
at a pty's speed, where control mode's ``%output`` (every byte escaped, one by one,
before tmux 3.7) caps a busy terminal at about 0.4x. Input (``send-keys -H``: hex, so no
byte is parsed as tmux syntax), sizes and snapshots go through the one control client
of the IO loop (:mod:`.control`), which keeps the pane paused. A snapshot is placed in
the transcript by an exact cut (:mod:`.cut`): the stream delivers the transcript up to
the cut, then calls back with the snapshot, then delivers the rest. Its history, most of
its bytes, is captured into tmux buffers that tmux then saves into files of its state
dir: replies would bring it through the control client line by line, twice as slow.

The pane's end is told by the kernel (:func:`~jupyter_agents.core.procs.on_exit` on the
pane's process) and by tmux (``%sessions-changed`` when a session closes); then the
pane's exit status is asked for. Nothing runs while the session is idle.

When the transcript cannot be written (a full disk: its writer leaves a gap marker and
drops output until there is space), or a snapshot's history cannot be saved, the stream
switches to ``%output`` of a control client of its own, attached to its session, for the
rest of its life, so viewers keep seeing the session; snapshots are then command
replies, which tmux orders exactly against that output. What the pane printed between
the last byte delivered from the transcript and that client's first ``%output`` is in
neither (all the rest of a command's output, on a busy machine): the listener is told
that output was lost (:meth:`~.StreamListener.on_output_lost`), and redraws its viewers
from snapshots. So is it when tmux detaches that client (a user's ``attach -d``): what
the pane printed until the client is back reached no one. The shared client does not
route the pane then: attached to the session, it had the output too until it paused the
pane there, and viewers got it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_agents.backends.base import ListenedStream, StreamListener
from jupyter_agents.backends.tmux import tail
from jupyter_agents.backends.tmux.control import TmuxControl
from jupyter_agents.backends.tmux.cut import Changed, Cut, Lost, Outcome, Unplaced, settle
from jupyter_agents.backends.tmux.formats import (
    SEND_CHUNK,
    PaneInfo,
    PaneStatus,
    TmuxCommand,
    format_of,
    parse_reply,
)
from jupyter_agents.backends.tmux.history import HistoryCache
from jupyter_agents.backends.tmux.snapshot import Snapshot, SnapshotRequest
from jupyter_agents.core.errors import AgentsError, OutOfRange
from jupyter_agents.core.procs import on_exit
from jupyter_agents.terminal.transcripts import Follower, Transcript

if TYPE_CHECKING:
    from jupyter_agents.terminal.state import Followed


class StreamHost(Protocol):
    """What a :class:`TmuxStream` uses of its backend
    (:class:`~jupyter_agents.backends.tmux.backend.TmuxBackend`), which makes it."""

    log: logging.Logger
    modes_at: Callable[[str, int], Followed] | None
    #: the older history of replays (shared by the backend's streams)
    history: HistoryCache
    #: the backend's folder of tmux files (sockets, config, cut files)
    tmux_dir: Path
    #: held while a control client identifies itself (tmux 3.3a crashes on a session
    #: made or ended meanwhile)
    handshake_gate: threading.Lock

    @property
    def replay_color_lines(self) -> int: ...

    @property
    def tmux(self) -> TmuxCommand: ...

    def transcript_path(self, session_id: str) -> Path: ...

    def control(self) -> TmuxControl: ...

    def nudge(self, server_pid: int | None = None) -> None: ...


#: the most transcript bytes delivered in one turn of the IO loop
PUMP_BYTES = 64 * 1024
#: how often, and how many times, a pane whose process ended is asked for its status
STATUS_RETRY = 0.05
STATUS_TRIES = 40
#: how many more times a cut is taken when its control client went away in the middle
#: of it (tmux detached it: a user's ``attach -d``)
LOST_TRIES = 3


class TmuxStream(ListenedStream):
    """One viewed session (see module docstring)."""

    def __init__(self, backend: StreamHost, session_id: str, listener: StreamListener) -> None:
        super().__init__(listener)
        self._backend = backend
        self._session_id = session_id
        self._target = f"={session_id}:"
        self._transcript = Transcript(session_id, backend.transcript_path(session_id))
        self._follower = Follower(self._transcript)
        self._control = backend.control()
        self._control.join(self)
        #: a control client of its own, for ``%output``, once the transcript is stuck
        self._live: TmuxControl | None = None
        #: transcript offset of the next byte to deliver; None until the first snapshot
        self._offset: int | None = None
        self._unsubscribe_tail: Callable[[], None] | None = None
        self._unsubscribe_exit: Callable[[], None] | None = None
        self._pane: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._server_pid: int | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        #: a gap marker appeared since the transcript was last checked for being stuck
        self._gap_made = self._transcript_stuck()
        #: held while a cut is taken: output is not delivered past its start meanwhile
        self._cutting = asyncio.Lock()
        #: the cut being taken (it gets the pane's ``%output`` meanwhile)
        self._cut: Cut | None = None
        #: input held until the first snapshot's cut is on its way, so that input typed
        #: before the replay is never captured in it (None once released)
        self._early_input: list[str] | None = []
        #: a snapshot was asked for (input is then released by its cut)
        self._snapshot_asked = False
        #: the pane's process has ended (its status is being asked for)
        self._ended = False
        self._status_tries = 0
        self._control.command(
            f"display-message -p -t {self._target} '{format_of(PaneInfo)}'", self._located
        )

    # -- Stream API ------------------------------------------------------------------

    def snapshot(self, callback: Callable[[str], None], screen_rows: int | None = None) -> None:
        self._snapshot_asked = True
        if self._live is None:
            self._spawn(self._cut_snapshot(callback, screen_rows))
            return
        request = SnapshotRequest(self._target, self._backend.replay_color_lines)
        self._live.ask(
            request.commands(),
            lambda replies: self._replay(Snapshot.read(request, replies), callback, screen_rows),
        )

    def write(self, data: str) -> None:
        if self._closed:
            return
        if self._early_input is not None:
            self._early_input.append(data)
            return
        raw = data.encode("utf-8", "surrogateescape")
        for i in range(0, len(raw), SEND_CHUNK):
            chunk = raw[i : i + SEND_CHUNK]
            self._control.command(f"send-keys -t {self._target} -H {chunk.hex(' ')}")

    def resize(self, rows: int, cols: int) -> None:
        if not self._closed:
            self._control.command(f"resize-window -t {self._target} -x {int(cols)} -y {int(rows)}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for stop in (self._unsubscribe_tail, self._unsubscribe_exit):
            if stop is not None:
                stop()
        self._unsubscribe_tail = self._unsubscribe_exit = None
        for task in list(self._tasks):
            task.cancel()
        self._control.leave(self)
        self._follower.close()
        if self._live is not None:
            self._live.close()

    async def aclose(self, timeout: float = 2.0) -> None:
        """:meth:`close`, and wait (bounded) until its own control client is gone (the
        shared one: :meth:`TmuxBackend.detach_streams`)."""
        self.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        if self._live is not None:
            await self._live.aclose(timeout)

    def describe(self) -> str:
        if not self._pane.done():
            pane = "its pane not found yet"
        else:
            pane = f"pane {self._pane.result() or 'gone'}"
        parts = [super().describe(), pane]
        if self._offset is None:
            parts.append("no snapshot placed yet")
        else:
            with contextlib.suppress(OSError, AgentsError):
                parts.append(f"delivered to {self._offset} of {self._transcript.size()} bytes")
        if self._cutting.locked():
            parts.append("a cut being taken")
        if self._early_input:
            parts.append(f"{len(self._early_input)} inputs held")
        parts.append(f"shared control client {self._control.describe()}")
        if self._live is not None:
            parts.append(f"own control client {self._live.describe()}")
        return "; ".join(parts)

    # -- control client members ------------------------------------------------------

    def on_pane_output(self, data: bytes) -> None:
        if self._live is not None:
            self._deliver(data)
        elif self._cut is not None:
            self._cut.on_output(data)

    def on_sessions_changed(self) -> None:
        if self._pane.done() and self._pane.result() is not None:
            self._ask_status()

    def on_control_lost(self) -> None:
        self._report_exit(None)  # the tmux server is gone

    def on_output_missed(self) -> None:
        # only the live client routes a live stream's pane (the shared one's routes are
        # for cuts, which tell a client's going away themselves)
        if self._live is not None and not self._closed:
            self._listener.on_output_lost()

    # -- snapshots at a cut ----------------------------------------------------------

    async def _cut_snapshot(
        self, callback: Callable[[str], None], rows: int | None, tries: int = LOST_TRIES
    ) -> None:
        """Take a snapshot at an exact cut of the transcript (:class:`~.cut.Cut`) and
        deliver it there: the transcript up to the cut, the callback, then the rest. A
        cut that got no answer is taken again (``tries`` more times), one the pane
        changed under in full; one the transcript cannot place makes the stream go on
        through control mode."""
        # shielded: this task is cancelled when the stream closes, and the future, which
        # the pane's reply resolves, must not be cancelled with it
        pane = await asyncio.shield(self._pane)
        if pane is None:
            return  # the session is gone: its end is reported
        async with self._cutting:
            if self._live is not None:  # went live meanwhile: replies are in order
                self.snapshot(callback, rows)
                self._release_input()
                return
            backend = self._backend
            self._cut = Cut(
                self._control,
                self._transcript,
                self._session_id,
                pane,
                backend.replay_color_lines,
                backend.history,
                backend.tmux_dir,
                self._transcript_stuck,
            )
            try:
                outcome: Outcome | None = await self._cut.take(self._release_input)
            finally:
                self._cut = None
            if self._closed or self._live is not None:
                return
            if isinstance(outcome, Lost):
                if tries > 0 and not self._exit_reported:
                    # the session went away (its end follows), or the client did: again
                    self._spawn(self._cut_snapshot(callback, rows, tries - 1))
                    return
                outcome = outcome.otherwise
                if outcome is None and not self._exit_reported:
                    # no answer, every time: say so, and let the viewers reconnect,
                    # rather than leave them with no screen and no output
                    self._backend.log.warning(
                        "jupyter_agents: no replay of tmux session %s could be taken",
                        self._session_id,
                    )
                    self._report_exit(None)
                    return
            if isinstance(outcome, Changed):
                self._spawn(self._cut_snapshot(callback, rows, tries))
                return
            if isinstance(outcome, Unplaced):
                if outcome.why is not None:
                    self._backend.log.warning(
                        "jupyter_agents: tmux could not save a replay of session %s (%s); "
                        "it is streamed through control mode from now on",
                        self._session_id,
                        outcome.why,
                    )
                self._go_live(pane)
                self.snapshot(callback, rows)
                return
            if outcome is None:
                return
            if self._offset is None:
                self._offset = outcome.offset
                self._unsubscribe_tail = tail.subscribe(self._transcript.path, self._wake)
            self._pump(outcome.offset)
            followed = None
            if outcome.snapshot is not None and self._backend.modes_at is not None:
                with contextlib.suppress(AgentsError):  # not followed: tmux's flags alone
                    followed = await asyncio.to_thread(
                        self._backend.modes_at, self._session_id, outcome.offset
                    )
            self._replay(outcome.snapshot, callback, rows, followed)
        self._wake()  # what came during the cut (and whether the transcript is stuck)

    def _replay(
        self,
        snapshot: Snapshot | None,
        callback: Callable[[str], None],
        rows: int | None,
        followed: Followed | None = None,
    ) -> None:
        if snapshot is not None:  # else the session vanished meanwhile: on_exit follows
            callback(snapshot.replay(rows is None, followed))

    # -- output from the transcript --------------------------------------------------

    def _wake(self, created: AbstractSet[str] = frozenset()) -> None:
        """The transcript's directory changed (``created``: files new in it): deliver
        what is new; once a gap marker was made (a write failed: a full disk) and all
        that was written is delivered, look whether its writer is still failing."""
        if created:  # a segment may have been added (or dropped): look again
            self._follower.close()
        if any(name.startswith(("gap-", "*")) for name in created):
            self._gap_made = True
        self._pump()
        if not self._gap_made or self._offset is None or self._live is not None:
            return
        if self._cutting.locked() or self._offset < self._transcript.size():
            return
        self._gap_made = False
        if self._transcript_stuck():
            self._go_live(self._pane.result() or "")

    def _pump(self, until: int | None = None) -> bool:
        """Deliver transcript bytes from the stream's offset up to ``until`` (all of
        them), or else at most :data:`PUMP_BYTES` of what there is, the rest on the
        loop's next turn (a flood never holds the IO loop); whether there were any."""
        if self._offset is None or self._closed or self._live is not None:
            return False
        if until is None and self._cutting.locked():
            return True  # held at or before the cut being taken
        budget = PUMP_BYTES
        delivered = False
        while (until is not None and self._offset < until) or (until is None and budget > 0):
            want = PUMP_BYTES if until is None else min(PUMP_BYTES, until - self._offset)
            try:
                data = self._follower.read(self._offset, want)
                if not data and until is not None:  # there is more: in a new segment
                    self._follower.close()
                    data = self._follower.read(self._offset, want)
            except OutOfRange:  # dropped by the cap before we read it: skip ahead
                self._offset = self._transcript.start()
                continue
            if not data:
                return delivered
            self._offset += len(data)
            self._deliver(data)
            delivered = True
            budget -= len(data)
            if until is None and budget <= 0:  # there may be more: the next turn
                asyncio.get_running_loop().call_soon(self._wake)
        return delivered

    def _transcript_stuck(self) -> bool:
        """Its writer is dropping output: the newest gap is at its end."""
        gaps = self._transcript.gaps()
        return bool(gaps) and gaps[-1][0] >= self._transcript.size()

    def _go_live(self, pane: str) -> None:
        """Switch to ``%output`` of a control client of its own for the rest of the
        stream (module docstring)."""
        if self._unsubscribe_tail is not None:
            self._unsubscribe_tail()
            self._unsubscribe_tail = None
        self._live = TmuxControl(
            self._backend.tmux,
            self._backend.log,
            self._session_id,
            gate=self._backend.handshake_gate,
        )
        self._live.join(self)
        self._live.on_panes.add(pane)
        self._live.route(pane, self)
        # its output comes from that client alone: one the shared client got while it was
        # attached to this session and not yet paused there was a second copy
        self._control.unroute(pane)
        self._live.command(f"refresh-client -A '{pane}:continue'")  # attaches it
        if self._offset is not None:  # output was delivered from the transcript
            self._listener.on_output_lost()

    # -- the pane and its end --------------------------------------------------------

    def _located(self, ok: bool, lines: list[bytes]) -> None:
        """:class:`~.formats.PaneInfo`: watch the pane's process, then ask for its
        status once (it may have ended before the watch began). A pane without a
        transcript writer (a session made outside jupyter_agents, adopted) is streamed
        live."""
        if self._closed:  # it left before its pane was found: nothing to watch for it
            if not self._pane.done():
                self._pane.set_result(None)
            return
        found = PaneInfo.of(lines if ok else None, self._session_id)
        if found is None:
            self._backend.log.info(
                "jupyter_agents: tmux session %s not found (%r)", self._session_id, lines[:1]
            )
            self._pane.set_result(None)
            self._report_exit(None)  # no such session (any more)
            return
        pane, self._server_pid = found.pane_id, found.pid
        self._pane.set_result(pane)
        self._control.route(pane, self)
        if not found.pane_pipe:
            self._go_live(pane)
        if found.pane_pid is not None and not self._closed:
            self._unsubscribe_exit = on_exit(found.pane_pid, self._process_ended)
        self._ask_status()
        if not self._snapshot_asked:
            self._release_input()

    def _release_input(self) -> None:
        early, self._early_input = self._early_input, None
        for data in early or ():
            self.write(data)

    def _process_ended(self) -> None:
        self._ended = True
        self._ask_status()

    def _ask_status(self) -> None:
        if not self._closed:
            self._control.command(
                f"display-message -p -t {self._target} '{format_of(PaneStatus)}'",
                self._status,
            )

    def _status(self, ok: bool, lines: list[bytes]) -> None:
        """The pane's state after its process may have ended: report the end with its
        status; if tmux has no status yet (it missed the SIGCHLD, or has not handled it
        yet), nudge it and ask again a little later."""
        if self._closed or self._exit_reported:
            return
        status = parse_reply(PaneStatus, lines if ok else None)
        if status is None or status.pane_id != self._pane.result():
            self._backend.log.info(
                "jupyter_agents: tmux session %s gone (%r)", self._session_id, lines[:1]
            )
            self._spawn(self._end(None))
            return
        dead, exit_code = status.pane_dead, status.exit_code
        if dead and exit_code is not None:
            self._spawn(self._end(exit_code))
        elif self._ended or dead:
            self._status_tries += 1
            if self._status_tries > STATUS_TRIES:
                if dead:
                    self._spawn(self._end(None))
                return
            if dead:
                self._backend.nudge(self._server_pid)
            asyncio.get_running_loop().call_later(STATUS_RETRY, self._ask_status)

    async def _end(self, exit_code: int | None) -> None:
        """The process ended: deliver the rest of its output from the transcript (once
        the writer has it all), then report the end."""
        if self._live is None and self._offset is not None:
            self._pump(await settle(self._transcript))
        self._report_exit(exit_code)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._failed)

    def _failed(self, task: asyncio.Future[None]) -> None:
        """A snapshot or end that raised: logged (it would be said only when the task is
        collected, if ever), and the stream reported lost, so that its viewers, which
        get output only once their replay came, reconnect instead of staying blank."""
        if task.cancelled() or task.exception() is None:
            return
        self._backend.log.error(
            "jupyter_agents: the stream of tmux session %s failed",
            self._session_id,
            exc_info=task.exception(),
        )
        if not self._closed:
            self._report_exit(None)
