"""TmuxStream: one tmux control-mode client attached to one viewed session.

Output normally comes from the session's transcript, which tmux's ``pipe-pane`` writes
with the pane's raw bytes in order: read the moment it grows (:mod:`.tail`), it reaches
viewers at a pty's speed, where control mode's ``%output`` (every byte escaped, one by
one, before tmux 3.7) caps a busy terminal at about 0.4x. So the control client keeps
its pane paused (no ``%output``); it carries input (``send-keys -H``: hex, so no byte is
parsed as tmux syntax), sizes, and the pane's death. A snapshot is placed in the
transcript by an exact cut (:mod:`.cut`): the stream delivers the transcript up to the
cut, then calls back with the snapshot, then delivers the rest.

When the transcript cannot be written (a full disk: its writer leaves a gap marker and
drops output until there is space), the stream switches to ``%output`` for the rest of
its life, so viewers keep seeing the session; snapshots are then command replies, which
tmux orders exactly against that output.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ...errors import OutOfRange
from ...transcripts import Transcript
from ..base import QueuedStream, StreamListener
from . import tail
from .cut import ANCHOR, QUIET, SETTLE_LIMIT, locate, settle
from .formats import (
    DEAD_FORMAT,
    META_FORMAT,
    SEND_CHUNK,
    compose_replay,
    parse_dead,
    unescape_output,
)

if TYPE_CHECKING:
    from .backend import TmuxBackend

_Reply = Callable[[bool, list[bytes]], None]

#: the most transcript bytes delivered in one turn of the IO loop
PUMP_BYTES = 256 * 1024


class TmuxStream(QueuedStream[_Reply]):
    """One control-mode client attached to one session (see module docstring)."""

    def __init__(self, backend: TmuxBackend, session_id: str, listener: StreamListener) -> None:
        super().__init__(listener)
        self._backend = backend
        self._session_id = session_id
        self._target = f"={session_id}:"
        self._proc: asyncio.subprocess.Process | None = None
        self._transcript = Transcript(session_id, backend.transcript_path(session_id))
        #: output from ``%output`` instead of the transcript (it cannot be written)
        self._live = self._transcript_stuck()
        #: transcript offset of the next byte to deliver; None until the first snapshot
        self._offset: int | None = None
        self._unwatch: Callable[[], None] | None = None
        self._pane: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Future[None]] = set()
        #: held while a cut is taken: output is not delivered past its start meanwhile
        self._cutting = asyncio.Lock()
        #: the pane's ``%output`` after the capture of the cut being taken (else None)
        self._after: bytearray | None = None
        self._more = asyncio.Event()
        argv = backend._argv("-C", "attach-session", "-f", "ignore-size", "-t", f"={session_id}")
        # subscribe to pane death first thing: reported within a second by tmux
        self._command(f"refresh-client -B 'dead:%*:{DEAD_FORMAT}'")
        self._command(f"display-message -p -t {self._target} '#{{pane_id}}'", self._located)
        self._start(self._connect(argv, backend._env))

    # -- Stream API ------------------------------------------------------------------

    def snapshot(self, callback: Callable[[str], None], screen_rows: int | None = None) -> None:
        if not self._live:
            self._spawn(self._cut_snapshot(callback, screen_rows))
            return
        parts: list[list[bytes] | None] = []

        def collect(ok: bool, lines: list[bytes]) -> None:
            parts.append(lines if ok else None)
            if len(parts) == 4:
                self._replay(parts, callback, screen_rows)

        self._command(self._capture(), collect, replies=4)

    def _capture(self) -> str:
        """The commands of a snapshot (four replies: see :func:`compose_replay`); the
        alternate screen's capture is last, as it fails when there is none and a failed
        command ends its line."""
        t = self._target
        return (
            f"display-message -p -t {t} '{META_FORMAT}' ; "
            f"capture-pane -p -e -J -S - -E -1 -t {t} ; "
            f"capture-pane -p -e -J -S 0 -E - -t {t} ; "
            f"capture-pane -a -p -e -J -t {t}"
        )

    async def _cut_snapshot(self, callback: Callable[[str], None], rows: int | None) -> None:
        """Take a snapshot at an exact cut of the transcript (:mod:`.cut`) and deliver
        it there: the transcript up to the cut, the callback, then the rest."""
        pane = await self._pane
        if pane is None:
            return  # the session is gone: its end is reported
        async with self._cutting:
            if self._live:  # the transcript stopped meanwhile: the replies are in order
                self.snapshot(callback, rows)
                return
            replies: list[list[bytes] | None] = []
            captured = asyncio.get_running_loop().create_future()

            def collect(ok: bool, lines: list[bytes]) -> None:
                replies.append(lines if ok else None)
                if len(replies) == 5 and not captured.done():
                    self._after = bytearray()  # the pane's next %output is after the cut
                    captured.set_result(None)

            floor = self._transcript.size()  # the cut is at or past it
            self._command(f"refresh-client -A '{pane}:continue' ; {self._capture()}", collect, 5)
            try:
                await captured
                await self._anchor()
                after = bytes(self._after or b"")[:ANCHOR]
            finally:
                self._after = None
                self._command(f"refresh-client -A '{pane}:pause'")
            cut = await (
                locate(self._transcript, floor, after) if after else settle(self._transcript)
            )
            if self._closed or self._live:
                return
            if cut is None:  # not in the transcript: its writer is dropping output
                self._go_live()
                self.snapshot(callback, rows)
                return
            if self._offset is None:
                self._offset = cut
                self._unwatch = tail.watch(self._transcript.path, self._wake)
            self._pump(cut)
            self._replay(replies[1:], callback, rows)
        self._pump()  # what came during the cut

    async def _anchor(self) -> None:
        """Collect the pane's output after a cut's capture until it anchors the cut
        (:data:`~.cut.ANCHOR` bytes), or the pane is quiet for :data:`~.cut.QUIET`."""
        assert self._after is not None
        deadline = asyncio.get_running_loop().time() + SETTLE_LIMIT
        while len(self._after) < ANCHOR and asyncio.get_running_loop().time() < deadline:
            self._more.clear()
            try:
                await asyncio.wait_for(self._more.wait(), QUIET)
            except asyncio.TimeoutError:
                return

    def _replay(
        self, parts: list[list[bytes] | None], callback: Callable[[str], None], rows: int | None
    ) -> None:
        meta, history, screen, saved = (
            [line.decode("utf-8", "replace") for line in p or []] for p in parts
        )
        fields = meta[0].split(" ") if meta else []
        if len(fields) != META_FORMAT.count("#{"):
            return  # session vanished between request and reply; on_exit follows
        if rows is not None:
            history = []
        callback(compose_replay(fields, history, screen, saved if parts[3] else None))

    def write(self, data: str) -> None:
        raw = data.encode("utf-8", "surrogateescape")
        for i in range(0, len(raw), SEND_CHUNK):
            chunk = raw[i : i + SEND_CHUNK]
            self._command(f"send-keys -t {self._target} -H {chunk.hex(' ')}")

    def resize(self, rows: int, cols: int) -> None:
        self._command(f"resize-window -t {self._target} -x {int(cols)} -y {int(rows)}")

    def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        super().close()

    async def aclose(self, timeout: float = 2.0) -> None:
        """:meth:`close`, and wait (bounded) until its cut clients are gone too."""
        await super().aclose(timeout)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    # -- output from the transcript --------------------------------------------------

    def _wake(self) -> None:
        """The transcript's directory changed: deliver what is new; with nothing new,
        look whether its writer has just stopped writing (a full disk)."""
        if not self._pump() and self._transcript_stuck() and not self._live:
            self._go_live()

    def _pump(self, until: int | None = None) -> bool:
        """Deliver transcript bytes from the stream's offset up to ``until`` (all of
        them), or else at most :data:`PUMP_BYTES` of what there is, the rest on the
        loop's next turn (a flood never holds the IO loop); whether there were any."""
        if self._offset is None or self._closed or self._live:
            return False
        if until is None and self._cutting.locked():
            return True  # held at or before the cut being taken
        budget = PUMP_BYTES
        delivered = False
        while (until is not None and self._offset < until) or (until is None and budget > 0):
            want = PUMP_BYTES if until is None else min(PUMP_BYTES, until - self._offset)
            try:
                data, size = self._transcript.read(self._offset, want)
            except OutOfRange:  # dropped by the cap before we read it: skip ahead
                self._offset = self._transcript.start()
                continue
            if not data:
                return delivered
            self._offset += len(data)
            self._deliver(data)
            delivered = True
            budget -= len(data)
            if until is None and budget <= 0 and self._offset < size:
                asyncio.get_running_loop().call_soon(self._pump)
        return delivered

    def _transcript_stuck(self) -> bool:
        """Its writer is dropping output: the newest gap is at its end."""
        gaps = self._transcript.gaps()
        return bool(gaps) and gaps[-1][0] >= self._transcript.size()

    def _go_live(self) -> None:
        """Switch to ``%output`` for the rest of the stream (module docstring)."""
        self._live = True
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        pane = self._pane.result() if self._pane.done() else None
        if pane is not None:
            self._command(f"refresh-client -A '{pane}:continue'")

    # -- internals -------------------------------------------------------------------

    def _located(self, ok: bool, lines: list[bytes]) -> None:
        """The pane's id (``%N``): pause it unless the stream is live (module docstring)."""
        pane = lines[0].decode().strip() if ok and lines else ""
        if not re.fullmatch(r"%[0-9]+", pane):
            self._pane.set_result(None)
            return
        if not self._live:
            self._command(f"refresh-client -A '{pane}:pause'")
        self._pane.set_result(pane)

    def _command(self, line: str, reply: _Reply | None = None, replies: int = 1) -> None:
        # commands sent before the attach completes would run before it: the skeleton
        # holds them until %session-changed
        self._send(line.encode() + b"\n", *([reply or _ignore_reply] * replies))

    def _transmit(self, data: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(data)

    def _hang_up(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()  # EOF detaches the control client

    def _abort(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, argv: list[str], env: dict[str, str]) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            if self._closed:
                self._proc.stdin.close()
            await self._read(self._proc.stdout)
        finally:
            if self._proc.stdin is not None and not self._proc.stdin.is_closing():
                self._proc.stdin.close()
            await self._proc.wait()
            if not self._pane.done():
                self._pane.set_result(None)
            for task in list(self._tasks):
                task.cancel()

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        """Parse control-mode lines as they come, in big reads: the ``%output`` lines of
        one read (only after :meth:`_go_live`) go to the listener as one piece, and any
        other line first flushes the output before it, so replies stay ordered."""
        block: list[bytes] | None = None
        head: list[bytes] = []
        ours = False
        rest = b""
        output: list[bytes] = []

        def flush() -> None:
            if output:
                self._deliver(unescape_output(b"".join(output)))
                output.clear()

        while True:
            chunk = await stdout.read(1 << 16)
            if not chunk:
                flush()
                return
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if block is None and line.startswith(b"%output "):
                    if self._live:
                        output.append(line[8:].partition(b" ")[2])
                    elif self._after is not None and len(self._after) < ANCHOR:
                        # a cut's anchor (one pane per session)
                        self._after += unescape_output(line[8:].partition(b" ")[2])
                        self._more.set()
                    continue
                flush()
                if block is not None:
                    if line.startswith((b"%end ", b"%error ")) and line.split(b" ")[1:] == head:
                        if ours and self._pending:
                            self._pending.popleft()(line.startswith(b"%end"), block)
                        block = None
                    else:
                        block.append(line)
                elif line.startswith(b"%begin "):
                    head = line.split(b" ")[1:]
                    ours = head[-1:] == [b"1"]
                    block = []
                elif line.startswith(b"%subscription-changed dead "):
                    dead, exit_code = parse_dead(line.rpartition(b" : ")[2].decode())
                    if dead and exit_code is not None:
                        self._spawn(self._end(exit_code))
                    elif dead:  # no status yet: tmux may have missed the SIGCHLD
                        self._command("display-message -p '#{pid}'", self._nudge_later)
                elif line.startswith(b"%session-changed") and not self._ready:
                    self._flush_outbox()  # attached: commands from here on run after it
                elif line.startswith(b"%exit"):
                    return
            flush()

    async def _end(self, exit_code: int) -> None:
        """The process ended: deliver the rest of its output from the transcript (once
        the writer has it all), then report the end."""
        if not self._live and self._offset is not None:
            self._pump(await settle(self._transcript))
        self._report_exit(exit_code)

    def _nudge_later(self, ok: bool, lines: list[bytes]) -> None:
        """Reply to ``display-message -p '#{pid}'`` after a death without a status: if
        none has come a second later, nudge the tmux server (:meth:`TmuxBackend.nudge`)."""
        if ok and lines and lines[0].strip().isdigit():
            pid = int(lines[0])
            asyncio.get_running_loop().call_later(
                1.0, lambda: None if self._exit_reported else self._backend.nudge(pid)
            )


def _ignore_reply(ok: bool, lines: list[bytes]) -> None:
    """Replies to input and resize commands carry nothing we need."""
