"""TmuxControl: the one tmux control-mode client through which this process drives the
sessions it streams.

Viewed sessions do not need a client each: output comes from their transcripts
(:mod:`.stream`), and input (``send-keys -t``), sizes (``resize-window -t``), snapshots
(``capture-pane -t``) and pane facts (``display-message -t``) take a target and work from
any client. So one control client per tmux server serves every stream of an IO loop
(:meth:`TmuxBackend.control`); it is started by the first stream and detaches
:data:`LINGER` seconds after the last one left, unless a stream joins meanwhile (a page
reload reconnects every tab, and starting a client costs a first viewer 3-5 ms). Only a
pane's ``%output`` depends on the session the client is attached to, which a cut picks
with ``switch-client`` (:class:`~.cut.Cut`).
Whenever the client lands in a session (attaching, a cut, its session closing), the
panes there are paused (``refresh-client -A %N:pause``): no ``%output`` is formatted for
them, and tmux reads them at full speed for their ``pipe-pane`` all the same.

Commands sent on one line run back to back, each with its own ``%begin``/``%end`` (or
``%error``) block, and a failed command ends its line: the commands after it send no
block at all, so their replies are failed here. If the client goes away (its tmux
server ended, or tmux detached it: a user's ``attach -d``), the next command starts a new
client, and the lines the old one was sent and answered nothing of go to it first: tmux
writes a control client's replies before it lets the client go, and stops reading its
commands, so those never ran (tmux 3.3a, ``server_client_check_exit``; only a client
process killed outright can take replies with it). The rest of a line it answered in
part fails (with no lines). Members are told when no client can be started.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from jupyter_agents.backends.tmux.formats import (
    Buffer,
    Commands,
    Replies,
    TmuxCommand,
    format_of,
    parse_format,
    tmux_quote_path,
    unescape_output,
)
from jupyter_agents.core.paths import socket_not_ours

#: the reply to one command: whether it succeeded, and its output lines
Reply = Callable[[bool, list[bytes]], None]
#: seconds a client with no member left stays attached, for the next stream
LINGER = 5.0
#: the longest a starting client keeps the handshake gate (a tmux that never answers
#: must not hold up spawns for good)
HANDSHAKE_GATE = 5.0
#: how many clients in a row may fail to attach while commands keep coming for them
#: before the members are told that none can (:meth:`TmuxControl._run`)
ATTACH_TRIES = 3


def ignore_reply(ok: bool, lines: list[bytes]) -> None:
    """Replies to input and resize commands carry nothing we need."""


def resolve(future: asyncio.Future[Replies]) -> Callable[[Replies], None]:
    """A ``done`` of :meth:`TmuxControl.ask` that resolves ``future``, unless it is done
    already (cancelled with the task that waited for it)."""

    def done(replies: Replies) -> None:
        if not future.done():
            future.set_result(replies)

    return done


class Member(Protocol):
    """A stream using the control client."""

    def on_pane_output(self, data: bytes) -> None:
        """``%output`` of the member's pane (only while it has it on)."""

    def on_sessions_changed(self) -> None:
        """A session was created or closed (the member's may be gone)."""

    def on_control_lost(self) -> None:
        """No control client can be started: the tmux server is gone."""

    def on_output_missed(self) -> None:
        """The client attached again after it went away (tmux detached it: a user's
        ``attach -d``): the ``%output`` of the member's routed panes in between reached
        no one."""


class TmuxControl:
    """One control-mode client of a tmux server, run by ``tmux`` (the backend's own
    :attr:`~.TmuxBackend.tmux`), shared by its members; what happens to it goes to
    ``log``."""

    def __init__(
        self,
        tmux: TmuxCommand,
        log: logging.Logger | logging.LoggerAdapter[Any],
        session_id: str | None = None,
        gate: threading.Lock | None = None,
    ) -> None:
        """A client attached to ``session_id`` for good, or (None) to whatever session
        tmux picks, switched by cuts. ``gate`` (the backend's
        :attr:`~.TmuxBackend.handshake_gate`) is held from the client's start until it
        is attached: tmux 3.3a to 3.6 crashes, ending every session, when a session is
        made or ends while a control client is still identifying itself."""
        self._tmux = tmux
        self._gate = gate
        self._gated = False
        self._log = log
        self._session_id = session_id
        self._members: set[Member] = set()
        #: pane id (``b"%3"``) -> the member its ``%output`` goes to
        self._routes: dict[bytes, Member] = {}
        #: (line number, reply, the line on its first command's entry) for each command
        #: sent and not yet answered
        self._pending: deque[tuple[int, Reply, bytes | None]] = deque()
        #: (line number, line) of the commands not sent to a client yet
        self._outbox: list[tuple[int, bytes]] = []
        self._lines = itertools.count()
        self._ready = False
        #: a client of this object attached before (the next one to attach missed output)
        self._attached_before = False
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Future[None] | None = None
        #: held by a cut: the client's attached session and a pane's output are its own
        self.cut_lock = asyncio.Lock()
        #: panes whose ``%output`` is wanted now (a cut's, a live stream's); every other
        #: pane of the session the client is attached to is paused (module docstring)
        self.on_panes: set[str] = set()
        self.closed = False
        self._linger: asyncio.TimerHandle | None = None

    # -- members and routing ---------------------------------------------------------

    def join(self, member: Member) -> None:
        self._members.add(member)
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def leave(self, member: Member) -> None:
        """``member`` is done; the client detaches :data:`LINGER` seconds after no
        member is left (module docstring)."""
        self._members.discard(member)
        for pane in [p for p, m in self._routes.items() if m is member]:
            del self._routes[pane]
        if not self._members and not self.closed and self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(LINGER, self.close)

    def route(self, pane: str, member: Member) -> None:
        """Send ``pane``'s ``%output`` (when it is on) to ``member``."""
        self._routes[pane.encode()] = member

    def unroute(self, pane: str) -> None:
        """Send ``pane``'s ``%output`` to no one (its member gets it from elsewhere)."""
        self._routes.pop(pane.encode(), None)

    # -- commands --------------------------------------------------------------------

    def command(self, line: str, reply: Reply = ignore_reply, count: int = 1) -> None:
        """Send one command line of ``count`` commands; ``reply`` gets each reply."""
        if self.closed:
            for _ in range(count):
                reply(False, [])
            return
        number = next(self._lines)
        data = line.encode() + b"\n"
        self._pending.extend((number, reply, None if i else data) for i in range(count))
        if self._ready and self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.write(data)
        else:
            self._outbox.append((number, data))
            if self._task is None:
                self._task = asyncio.ensure_future(self._run())

    def ask(self, commands: Commands, done: Callable[[Replies], None]) -> None:
        """Send ``commands`` on one line; ``done`` gets their replies by name once the
        last one came (from the reader, before any output after them is handled)."""
        replies = Replies()
        names = iter(commands.names)

        def collect(ok: bool, lines: list[bytes]) -> None:
            replies.add(next(names), ok, lines)
            if len(replies) == len(commands):
                done(replies)

        self.command(commands.line, collect, len(commands))

    async def save_buffers(
        self, names: Sequence[str], directory: Path
    ) -> tuple[dict[str, str] | None, str]:
        """The text of the tmux buffers ``names`` (plain tokens) by name; they are then
        deleted.
        tmux saves them into files of ``directory``, read and removed here: a reply
        would bring a big one through this client line by line, twice as slow (18,000
        lines of history: 17-24 ms, against 8). None and why if tmux could not save
        one whole (a full disk: tmux does not check that a file it wrote was closed, so
        sizes are compared), or there is no such buffer; None and ``""`` if the client
        went away before it answered."""
        paths = [directory / name for name in names]
        saved: asyncio.Future[Replies] = asyncio.get_running_loop().create_future()
        listing = Commands.of(listing=f"list-buffers -F '{format_of(Buffer)}'")
        saves = Commands(
            tuple(
                (n, f"save-buffer -b {n} {tmux_quote_path(p)}")
                for n, p in zip(names, paths, strict=True)
            )
        )
        self.ask(listing + saves, resolve(saved))
        self.command(" ; ".join(f"delete-buffer -b {n}" for n in names), ignore_reply, len(names))
        try:
            replies = await saved
            if any(replies[name] is None for name in ("listing", *names)):
                return None, b" ".join(replies.errors).decode(errors="replace")
            buffers = (parse_format(Buffer, line) for line in replies["listing"] or [])
            sizes = {b.buffer_name: b.buffer_size for b in buffers if b is not None}
            data = {name: path.read_bytes() for name, path in zip(names, paths, strict=True)}
            if any(len(d) != sizes.get(name) for name, d in data.items()):
                return None, "a file was not written whole"
            return {name: d.decode("utf-8", "replace") for name, d in data.items()}, ""
        except OSError as e:
            return None, str(e)
        finally:
            for path in paths:
                path.unlink(missing_ok=True)

    def describe(self) -> str:
        """The client's state in a few words (for a log line)."""
        state = "attached" if self._ready else "starting" if self._task else "not running"
        if self.closed:
            state = "closed"
        return f"{state}, {len(self._pending)} replies awaited, {len(self._outbox)} lines unsent"

    def close(self) -> None:
        """Detach the client (EOF); its pending replies fail."""
        if self.closed:
            return
        self.closed = True
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
        elif self._task is not None:
            self._task.cancel()

    async def aclose(self, timeout: float = 2.0) -> None:
        """:meth:`close`, and wait (bounded) until the client process is gone."""
        self.close()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    # -- the client ------------------------------------------------------------------

    async def _run(self) -> None:
        """Start clients while there are commands for them, or (a client attached to one
        session) panes whose ``%output`` is wanted; tell members if none can be
        started."""
        try:
            failed = 0
            while not self.closed and (
                self._outbox or self._pending or (self._session_id and self._routes)
            ):
                # lines numbered past ``since`` were asked for during this try
                since = next(self._lines)
                attached = await self._attach()
                if attached:
                    failed = 0
                    continue
                failed += 1
                if failed < ATTACH_TRIES and any(n > since for n, _ in self._outbox):
                    # asked for while the client was failing to attach (a viewer of a
                    # session of a tmux server started meanwhile): a try of their own
                    continue
                self._log.warning(
                    "jupyter_agents: no tmux control client could attach to %s", self._target()
                )
                for member in list(self._members):
                    member.on_control_lost()
                break
        finally:
            self._task = None
            self._fail_pending()

    async def _attach(self) -> bool:
        """One client's life; whether it attached."""
        target = () if self._session_id is None else ("-t", f"={self._session_id}")
        # -N: attach-session would start a tmux server where there is none (one killed
        # while streams were open), with no session for anyone
        argv = self._tmux.argv("-N", "-C", "attach-session", "-f", "ignore-size", *target)
        why = socket_not_ours(self._tmux.socket)
        if why is not None:  # whoever listens there gets nothing from us
            self._log.warning("jupyter_agents: not connecting to tmux: %s", why)
            return False
        await self._close_gate()
        try:
            proc = self._proc = await asyncio.create_subprocess_exec(
                *argv,
                env=self._tmux.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            self._open_gate()
            return False
        except BaseException:  # cancelled as it started: the gate opens all the same
            self._open_gate()
            raise
        assert proc.stdin is not None and proc.stdout is not None
        attached = False
        try:
            attached = await self._read(proc.stdout)
        except (OSError, ConnectionError, ValueError) as e:
            self._log.warning("jupyter_agents: tmux control client of %s: %r", self._target(), e)
        finally:
            self._open_gate()
            self._ready = False
            if not proc.stdin.is_closing():
                proc.stdin.close()
            # to EOF: the pipe (and the process transport) closes only once EOF is read,
            # and a reader that stopped at %exit or an error, then paused by a full
            # buffer or left to a closing loop, would never read it
            with contextlib.suppress(OSError, ConnectionError, ValueError):
                while await proc.stdout.read(1 << 16):
                    pass
            status = await proc.wait()
            self._proc = None
            if not self.closed:
                self._log.info(
                    "jupyter_agents: tmux control client of %s ended (status %s)",
                    self._target(),
                    status,
                )
            self._resend_unanswered()
        return attached

    def _resend_unanswered(self) -> None:
        """The client went away: the lines it was sent and answered nothing of go first
        to the next one; the rest of a line answered in part fails (module docstring)."""
        unsent = self._outbox[0][0] if self._outbox else next(self._lines)
        pending: deque[tuple[int, Reply, bytes | None]] = deque()
        again: list[tuple[int, bytes]] = []
        failed: list[Reply] = []
        for number, reply, data in self._pending:
            if data is not None and number < unsent:
                again.append((number, data))
            if number >= unsent or (again and again[-1][0] == number):
                pending.append((number, reply, data))
            else:
                failed.append(reply)
        self._pending = pending
        self._outbox = again + self._outbox
        for reply in failed:
            reply(False, [])

    def _target(self) -> str:
        """What the client attaches to, for log messages."""
        where = f"tmux server {self._tmux.socket}"
        return where if self._session_id is None else f"session {self._session_id} of {where}"

    def _fail_pending(self) -> None:
        """No client will answer: every reply fails, and the unsent lines are dropped."""
        self._outbox = []
        pending, self._pending = self._pending, deque()
        for _, reply, _ in pending:
            reply(False, [])

    async def _close_gate(self) -> None:
        """Take the handshake gate (off the loop: a spawn may hold it for one tmux
        command), waiting at most :data:`HANDSHAKE_GATE` seconds. Cancelled while
        waiting, the gate is opened again as soon as the wait took it."""
        gate = self._gate
        if gate is None:
            return
        taking = asyncio.ensure_future(asyncio.to_thread(gate.acquire, True, HANDSHAKE_GATE))
        try:
            self._gated = await asyncio.shield(taking)
        except asyncio.CancelledError:

            def give_back(done: asyncio.Future[bool]) -> None:
                if not done.cancelled() and done.exception() is None and done.result():
                    gate.release()

            taking.add_done_callback(give_back)
            raise

    def _open_gate(self) -> None:
        """The client is attached (tmux has its control state) or gone: sessions may be
        made and ended again."""
        if self._gated and self._gate is not None:
            self._gated = False
            self._gate.release()

    def _on_attached(self) -> None:
        """Attached: the queue goes out; if a client attached before, the members whose
        panes are routed here are told that their output in between reached no one."""
        self._open_gate()
        assert self._proc is not None and self._proc.stdin is not None
        queued, self._outbox = self._outbox, []
        self._ready = True
        for _, data in queued:
            self._proc.stdin.write(data)
        if self._attached_before:
            for member in set(self._routes.values()):
                member.on_output_missed()
        self._attached_before = True

    def _pause_session(self, session: bytes) -> None:
        """Pause the panes of ``session`` (``$N``) but :attr:`on_panes`."""

        def pause(ok: bool, lines: list[bytes]) -> None:
            panes = [p.decode() for p in lines if ok and re.fullmatch(rb"%[0-9]+", p)]
            for pane in panes:
                if pane not in self.on_panes:
                    self.command(f"refresh-client -A '{pane}:pause'")

        if re.fullmatch(rb"\$[0-9]+", session):
            self.command(f"list-panes -s -t '{session.decode()}' -F '#{{pane_id}}'", pause)

    async def _read(self, stdout: asyncio.StreamReader) -> bool:
        """Parse control-mode lines as they come, in big reads: a pane's ``%output``
        lines of one read go to its member as one piece, and any other line first
        flushes them, so replies stay ordered against output. Whether it attached."""
        attached = False
        block: list[bytes] | None = None
        head: list[bytes] = []
        rest = b""
        output: dict[bytes, list[bytes]] = {}

        def flush() -> None:
            if not output:
                return
            for pane, parts in output.items():
                member = self._routes.get(pane)
                if member is not None:
                    member.on_pane_output(unescape_output(b"".join(parts)))
            output.clear()

        while True:
            chunk = await stdout.read(1 << 16)
            if not chunk:
                flush()
                return attached
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if block is None and line.startswith(b"%output "):
                    pane, _, data = line[8:].partition(b" ")
                    if pane in self._routes:
                        output.setdefault(pane, []).append(data)
                    continue
                flush()
                if block is not None:
                    if line.startswith((b"%end ", b"%error ")) and line.split(b" ")[1:] == head:
                        if head[-1:] == [b"1"]:
                            self._answer(line.startswith(b"%end"), block)
                        block = None
                    else:
                        block.append(line)
                elif line.startswith(b"%begin "):
                    head = line.split(b" ")[1:]
                    block = []
                elif line.startswith(b"%session-changed "):
                    if not attached:
                        attached = True
                        self._on_attached()
                    self._pause_session(line.split(b" ")[1])
                elif line.startswith(b"%sessions-changed"):
                    for member in list(self._members):
                        member.on_sessions_changed()
                elif line.startswith(b"%exit"):
                    flush()
                    return attached
            flush()

    def _answer(self, ok: bool, lines: list[bytes]) -> None:
        """The reply to the oldest pending command; a failed one also fails the rest of
        its line, which tmux does not run."""
        if not self._pending:
            return
        number, reply, _ = self._pending.popleft()
        reply(ok, lines)
        if not ok:
            while self._pending and self._pending[0][0] == number:
                self._pending.popleft()[1](False, [])
