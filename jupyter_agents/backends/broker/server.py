"""The pty broker daemon: owns the ptys of one state dir, outside any Jupyter server.

Run as ``python -m jupyter_agents.backends.broker.server --state-dir DIR`` (foreground)
or, as :class:`~jupyter_agents.backends.broker.client.BrokerBackend` starts it, with
``--daemon``: it listens on ``DIR/broker/socket`` (0600, in a 0700 dir), then forks; the
parent exits 0 once the socket accepts connections, the daemon child runs on. One asyncio
loop serves every client and reads every pty; the protocol is in :mod:`.protocol`.

Per session the broker writes the raw transcript (``DIR/transcripts/<id>/``, segments
capped at the spawn's ``transcript_max_bytes``: :mod:`.recorder`) itself, so it stays
complete while no Jupyter server runs, and keeps a bounded raw replay
(:mod:`.replay`: chosen over pyte by measurement). A session's environment is exactly
the one it was spawned with, except ``TERM`` (the broker's: ``xterm-256color``, what
xterm.js is) and ``COLUMNS``/``LINES`` (dropped: the pty has the size).

Flow control:

- Reading: each readable pty gets one read of at most 64 KiB per loop turn, so a
  flooding session shares the loop round-robin with every other session and client.
  A pty is never paused for a slow client: the transcript must stay complete.
- Sending: each client has its own bounded queue; a client that falls behind catches
  up from the transcript, losslessly (:mod:`.fanout`). So the broker's memory is
  bounded by the replays (:data:`~.replay.REPLAY_BYTES` x 2 per session) plus the
  queues, whatever the sessions print and however slowly clients read.

Exit: ``SIGCHLD`` reaps ended processes; the session stays held (``dead``, exit code,
time of death) until ``remove``. ``shutdown``, SIGTERM and SIGINT hang up every session
(SIGHUP, then SIGKILL for what is left after :data:`HANGUP_GRACE` s) and stop the
broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from jupyter_agents.backends.base import SESSION_ID
from jupyter_agents.backends.broker import protocol
from jupyter_agents.backends.broker.fanout import Client, HeldPty
from jupyter_agents.backends.broker.protocol import (
    FrameReader,
    ProtocolError,
    broker_paths,
    encode,
    peer_not_ours,
)
from jupyter_agents.backends.broker.ptys import Pty, open_pty
from jupyter_agents.backends.broker.recorder import Recorder
from jupyter_agents.core.paths import create_private_file, ensure_private_dir
from jupyter_agents.core.procs import identify

log = logging.getLogger("jupyter_agents.broker")

#: seconds between SIGHUP and SIGKILL when sessions are hung up at shutdown
HANGUP_GRACE = 2.0
MAX_ROWS, MAX_COLS = 1000, 2000
TERM = "xterm-256color"
_BROKER_OWNED = frozenset({"TERM", "COLUMNS", "LINES"})


class Broker:
    """The daemon's state: sessions by id, connected clients, the listening socket."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.transcript_dir = state_dir / "transcripts"
        self.socket_path, self.pid_path, _ = broker_paths(state_dir)
        self.sessions: dict[str, HeldPty] = {}
        self.clients: set[Client] = set()
        #: each open connection's end (waited for at stop)
        self._connections: set[asyncio.Future[None]] = set()
        #: hung-up processes not reaped yet
        self._hung_up: list[Pty] = []
        self._stopped = asyncio.Event()
        self._stop_task: asyncio.Future[None] | None = None

    # -- sessions ----------------------------------------------------------------------

    def spawn(self, header: dict[str, Any]) -> HeldPty:
        sid, argv, env = header["sid"], header["argv"], header["env"]
        rows, cols = header["rows"], header["cols"]
        if not SESSION_ID.fullmatch(sid):  # the daemon answers ValueError as an error reply
            raise ValueError(f"invalid session id {sid[:80]!r}")
        if sid in self.sessions:
            raise ValueError(f"session {sid} exists")
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError("env must map strings to strings")
        _check_size(rows, cols)
        env = {k: v for k, v in env.items() if k not in _BROKER_OWNED}
        env["TERM"] = TERM
        recorder = Recorder(sid, self.transcript_dir / sid, header["transcript_max_bytes"])
        try:
            pty = open_pty(argv, header["cwd"], env, rows, cols)
        except BaseException:
            recorder.close()
            raise
        session = self.sessions[sid] = HeldPty(sid, pty, recorder)
        loop = asyncio.get_running_loop()
        pty.start_reading(
            loop, lambda data: self._output(session, data), lambda: self._check_exits()
        )
        log.info("spawned session %s (pid %d): %s", sid, pty.pid, argv[0])
        return session

    def _output(self, session: HeldPty, data: bytes) -> None:
        """Record output, then send it to the attached clients: a client never has
        bytes the transcript lacks, whenever the broker is killed (the write is a few
        microseconds of an echo's hundreds). The offset each client would lag from is
        where it was written (a failed write leaves a gap there and the stream goes on:
        :class:`.Recorder`)."""
        offset = session.recorder.write(data)
        if session.clients:
            frame = encode({"op": "output"}, data)
            for client in list(session.clients):
                client.send_output(session.sid, frame, offset)
        session.replay.feed(data)

    def _check_exits(self) -> None:
        """Reap ended processes (SIGCHLD, or a pty reached EOF)."""
        for session in list(self.sessions.values()):
            if session.dead:
                continue
            exited, code = session.pty.poll()
            if not exited:
                continue
            rest = session.pty.drain()
            if rest:
                self._output(session, rest)
            session.dead, session.exit_code, session.dead_since = True, code, time.time()
            log.info("session %s (pid %d) exited (code %s)", session.sid, session.pty.pid, code)
            for client in list(session.clients):
                client.send(session.exit_frame())
        self._hung_up = [p for p in self._hung_up if not p.poll()[0]]

    def remove(self, sid: str) -> None:
        session = self.sessions.pop(sid, None)
        if session is None:
            return
        session.pty.hangup()
        if not session.dead:
            self._hung_up.append(session.pty)
        session.recorder.close()
        for client in list(session.clients):
            client.send(session.exit_frame())
            client.attached.discard(sid)
        log.info("removed session %s", sid)

    # -- clients -----------------------------------------------------------------------

    def connect(self, transport: asyncio.WriteTransport, gone: asyncio.Future[None]) -> Client:
        """A new client connection (of our own user: :class:`_Connection` checked);
        ``gone`` is done once it is closed."""
        client = Client(self.sessions, transport)
        self.clients.add(client)
        self._connections.add(gone)
        gone.add_done_callback(self._connections.discard)
        return client

    def disconnect(self, client: Client) -> None:
        """A client connection is gone."""
        client.close()
        self.clients.discard(client)

    def handle(self, client: Client, header: dict[str, Any], payload: bytes) -> None:
        """Carry out one well-formed request (:func:`.protocol.check_request`)."""
        op, sid = header["op"], header.get("sid")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if op == "write":
            if session is not None and not session.dead:
                session.pty.write(payload)
            return
        if op == "resize":
            if session is not None and _valid_size(header["rows"], header["cols"]):
                session.pty.resize(header["rows"], header["cols"])
            return
        if op == "snapshot" and session is not None and session.sid in client.lagging:
            # answered once caught up (fanout.Client._catch_up), in stream order
            client.held_snapshots[session.sid] = client.held_snapshots.get(session.sid, 0) + 1
            return
        try:
            reply, body = self._reply(client, op, header, session)
        except (OSError, ValueError, TypeError) as e:
            client.send(encode({"op": "error", "error": str(e)}))
            return
        client.send(encode({"op": "ok", **reply}, body))
        if op == "attach" and session is not None and session.dead:
            client.send(session.exit_frame())
        if op == "shutdown":
            self.request_stop()

    def _reply(
        self, client: Client, op: str, header: dict[str, Any], session: HeldPty | None
    ) -> tuple[dict[str, Any], bytes]:
        """The ok-reply of a request (fields, payload); ValueError/OSError -> error."""
        if op == "ping":
            return {"pid": os.getpid(), "version": protocol.VERSION}, b""
        if op == "list":
            return {"sessions": [s.model() for s in self.sessions.values()]}, b""
        if op == "spawn":
            return {"session": self.spawn(header).model()}, b""
        if op == "remove":
            self.remove(header["sid"])
            return {}, b""
        if op == "shutdown":
            return {}, b""
        if session is None:
            raise ValueError(f"no session {header['sid'][:80]!r}")
        if op == "attach":
            session.clients.add(client)
            client.attached.add(session.sid)
            return {}, b""
        # snapshot: on an attached connection it is ordered with the output sent so far
        return {}, session.replay.snapshot()

    # -- life cycle --------------------------------------------------------------------

    async def serve(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGCHLD, self._check_exits)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)
        server = await loop.create_unix_server(lambda: _Connection(self), sock=listener)
        log.info("broker %d serving %s", os.getpid(), self.socket_path)
        async with server:
            await self._stopped.wait()
        self._cleanup_files()

    def request_stop(self) -> None:
        """Start :meth:`stop` (from a signal handler or a request)."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self.stop())

    async def stop(self) -> None:
        """Hang up every session (SIGKILL what outlives :data:`HANGUP_GRACE`), then stop."""
        log.info("stopping: hanging up %d sessions", len(self.sessions))
        pids = [s.pty.pid for s in self.sessions.values() if not s.dead]
        for sid in list(self.sessions):
            self.remove(sid)
        deadline = time.monotonic() + HANGUP_GRACE
        while self._hung_up and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            self._check_exits()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self._check_exits()
        for client in list(self.clients):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(client.flushed(), 1)
            client.close()
        if self._connections:
            await asyncio.wait(self._connections, timeout=2)
        self._stopped.set()

    def _cleanup_files(self) -> None:
        with contextlib.suppress(OSError):
            if _read_pid(self.pid_path) == os.getpid():
                self.pid_path.unlink()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()


class _Connection(FrameReader):
    """The broker's end of one connection: each request goes to :meth:`Broker.handle`
    in the callback that read it; the transport's flow control goes to the
    :class:`Client`. A peer of another user is hung up on at once."""

    def __init__(self, broker: Broker) -> None:
        gone = asyncio.get_running_loop().create_future()
        super().__init__(self._request, gone)
        self.broker = broker
        self.client: Client | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert isinstance(transport, asyncio.WriteTransport)
        if _same_user(transport):
            self.client = self.broker.connect(transport, self._gone)
        else:
            transport.close()

    def _request(self, header: dict[str, Any], payload: bytes) -> bool:
        protocol.check_request(header)
        if self.client is None or self.client.closed:
            return False
        self.broker.handle(self.client, header, payload)
        return True

    def refuse(self, error: ProtocolError) -> None:
        """Answer a malformed frame with an error, read nothing more, and hang up once
        the answer has gone out."""
        if self.client is None:
            super().refuse(error)
            return
        assert isinstance(self._transport, asyncio.ReadTransport)
        self._transport.pause_reading()
        self.client.send(encode({"op": "error", "error": str(error)}))
        self.client.finish()

    def eof_received(self) -> bool:
        """The peer sends no more: answer what it sent, then hang up."""
        if self.client is None:
            return False
        self.client.finish()
        return True

    def pause_writing(self) -> None:
        if self.client is not None:
            self.client.pause()

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.client is not None:
            self.broker.disconnect(self.client)


def _check_size(rows: object, cols: object) -> None:
    if not _valid_size(rows, cols):
        raise ValueError(f"bad size {rows}x{cols}")


def _valid_size(rows: object, cols: object) -> bool:
    return (
        isinstance(rows, int)
        and isinstance(cols, int)
        and 0 < rows <= MAX_ROWS
        and 0 < cols <= MAX_COLS
    )


def _same_user(transport: asyncio.BaseTransport) -> bool:
    """The peer runs as us (:func:`~.protocol.peer_not_ours`)."""
    sock = transport.get_extra_info("socket")
    why = None if sock is None else peer_not_ours(sock)
    if why is not None:
        log.warning("refused a connection: %s", why)
    return why is None


def _read_pid(path: Path) -> int | None:
    """The pid in a broker pid file (``"<pid> <create time>"``), if readable."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def listen(state_dir: Path) -> socket.socket:
    """Bind ``broker/socket`` of ``state_dir`` (mode 0600 from the start; a stale socket
    is replaced) and write the pid file. ``SystemExit`` if a broker already answers."""
    ensure_private_dir(state_dir)
    ensure_private_dir(state_dir / "broker")
    ensure_private_dir(state_dir / "transcripts")
    path = broker_paths(state_dir)[0]
    if path.exists():
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(2)
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()
            else:
                raise SystemExit(f"a broker already listens on {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


def write_pid_file(pid_path: Path, pid: int) -> None:
    """Record the broker as ``"<pid> <create time>"`` (see :mod:`jupyter_agents.core.procs`)."""
    ident = identify(pid)
    create_private_file(pid_path)
    pid_path.write_text(f"{pid} {ident.created if ident else 0}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_agents.backends.broker.server",
        description="The jupyter_agents pty broker daemon of one state dir.",
    )
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="fork once listening; the parent exits 0 (what BrokerBackend does)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s broker[%(process)d] %(levelname)s %(message)s"
    )
    state_dir = args.state_dir.expanduser().absolute()
    listener = listen(state_dir)
    pid_path = broker_paths(state_dir)[1]
    if args.daemon:
        child = os.fork()
        if child:
            # the socket listens and the pid file names the daemon: the starter may go on
            write_pid_file(pid_path, child)
            os._exit(0)
    else:
        write_pid_file(pid_path, os.getpid())
    asyncio.run(Broker(state_dir).serve(listener))


if __name__ == "__main__":
    main()
