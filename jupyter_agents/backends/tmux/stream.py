"""TmuxStream: one tmux control-mode client attached to one session.

Input goes in as ``send-keys -H`` (hex, so no byte is ever parsed as tmux syntax),
output comes back as ``%output`` lines, and snapshots are command replies that tmux
orders exactly against that output: commands sent on one control-mode line run back to
back, each with its own ``%begin``/``%end`` block, with no pane output processed in
between.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..base import QueuedStream, StreamListener
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


class TmuxStream(QueuedStream[_Reply]):
    """One control-mode client attached to one session (see module docstring)."""

    def __init__(self, backend: TmuxBackend, session_id: str, listener: StreamListener) -> None:
        super().__init__(listener)
        self._backend = backend
        self._target = f"={session_id}:"
        self._proc: asyncio.subprocess.Process | None = None
        argv = backend._argv("-C", "attach-session", "-f", "ignore-size", "-t", f"={session_id}")
        # subscribe to pane death first thing: reported within a second by tmux
        self._command(f"refresh-client -B 'dead:%*:{DEAD_FORMAT}'")
        self._start(self._connect(argv, backend._env))

    # -- Stream API ------------------------------------------------------------------

    def snapshot(self, callback: Callable[[str], None], screen_rows: int | None = None) -> None:
        parts: list[list[bytes]] = []

        def collect(ok: bool, lines: list[bytes]) -> None:
            parts.append(lines if ok else [])
            if len(parts) < 4:
                return
            meta, history, screen, saved = (
                [line.decode("utf-8", "replace") for line in p] for p in parts
            )
            fields = meta[0].split(" ") if meta else []
            if len(fields) != META_FORMAT.count("#{"):
                return  # session vanished between request and reply; on_exit follows
            if screen_rows is not None:
                history = []
            callback(compose_replay(fields, history, screen, saved if parts[3] else None))

        t = self._target
        self._command(
            f"display-message -p -t {t} '{META_FORMAT}' ; "
            f"capture-pane -p -e -J -S - -E -1 -t {t} ; "
            f"capture-pane -p -e -J -S 0 -E - -t {t} ; "
            f"capture-pane -a -p -e -J -t {t}",
            collect,
            replies=4,
        )

    def write(self, data: str) -> None:
        raw = data.encode("utf-8", "surrogateescape")
        for i in range(0, len(raw), SEND_CHUNK):
            chunk = raw[i : i + SEND_CHUNK]
            self._command(f"send-keys -t {self._target} -H {chunk.hex(' ')}")

    def resize(self, rows: int, cols: int) -> None:
        self._command(f"resize-window -t {self._target} -x {int(cols)} -y {int(rows)}")

    # -- internals -------------------------------------------------------------------

    def _command(self, line: str, reply: _Reply | None = None, replies: int = 1) -> None:
        # commands sent before the attach completes would run before it, and output
        # between a snapshot and the attach would reach nobody: the skeleton holds them
        # until %session-changed
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

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        """Parse control-mode lines as they come, in big reads: the ``%output`` lines of
        one read go to the listener as one piece (fewer websocket frames), and any other
        line first flushes the output before it, so replies stay ordered against it."""
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
                    output.append(line[8:].partition(b" ")[2])
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
                        self._report_exit(exit_code)
                    elif dead:  # no status yet: tmux may have missed the SIGCHLD
                        self._command("display-message -p '#{pid}'", self._nudge_later)
                elif line.startswith(b"%session-changed") and not self._ready:
                    self._flush_outbox()  # attached: output from here on reaches us
                elif line.startswith(b"%exit"):
                    return
            flush()

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
