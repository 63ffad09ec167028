"""The broker backend as the Jupyter server (and the CLI, and kernels) use it.

:class:`BrokerBackend` starts the broker daemon of its state dir on demand, fully
detached (its own session, stdio to ``broker/broker.log``, no inherited fds, reparented
to init: it is not a child that dies with the Jupyter server), and talks to it over
``broker/socket`` (:mod:`.protocol`). Control-plane calls (spawn, list, remove, ping)
are one short blocking connection each; each streamed session is one asyncio
connection (:class:`BrokerStream`).

Liveness (:meth:`BrokerBackend.monitor`): a ping every ``heartbeat_interval`` seconds
from a worker thread. A refused or missing socket means the broker is dead; two pings
in a row without an answer within ``ping_timeout`` mean it is hung (it is then ended,
sessions and all: they cannot be reached any more). Either way a new broker is started
and the caller's ``on_lost`` runs in the event loop, so reconcile marks the lost
sessions ``interrupted`` (their transcripts stay on disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from traitlets import Float

from jupyter_agents.backends.base import (
    Backend,
    LiveSession,
    QueuedStream,
    SpawnRequest,
    Stream,
    StreamListener,
    check_session_id,
)
from jupyter_agents.backends.broker.protocol import (
    FrameReader,
    NotOurs,
    ProtocolError,
    broker_paths,
    connect_checked,
    encode,
    read_frame_sync,
)
from jupyter_agents.backends.broker.replay import screen_only
from jupyter_agents.core.errors import AgentsError, BackendUnavailable, InvalidRequest
from jupyter_agents.core.launch import python_module_argv
from jupyter_agents.core.paths import (
    MOUNTINFO_ENV,
    create_private_file,
    ensure_private_dir,
    safe_short_dir,
    state_lock,
)
from jupyter_agents.core.procs import ProcessIdentity, matches, terminate_tree

#: unix socket paths are limited to ~108 bytes by the kernel
_MAX_SOCKET_PATH = 100
#: input bytes per write frame
_WRITE_CHUNK = 256 * 1024
#: the broker's own environment (sessions get theirs over the socket; the mount table
#: it reads, where one is named, decides where its socket is: the same as ours)
_BROKER_ENV = (
    *("PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "VIRTUAL_ENV"),
    MOUNTINFO_ENV,
)
#: where this package is imported from, so the daemon runs the same code
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class _BrokerDown(Exception):
    """No broker listens (missing socket, connection refused)."""


class BrokerBackend(Backend):
    """Sessions owned by the pty broker daemon of ``<state_dir>/broker``."""

    name = "broker"

    heartbeat_interval = Float(
        5.0, config=True, help="Seconds between pings of the pty broker (0: no heartbeat)."
    )
    ping_timeout = Float(
        5.0,
        config=True,
        help="Seconds a ping may take; two late pings in a row mean the broker is hung.",
    )
    start_timeout = Float(15.0, config=True, help="Seconds the broker may take to start.")

    def __init__(self, state_dir: Path, **kwargs: object) -> None:
        super().__init__(state_dir, **kwargs)
        self.broker_dir = state_dir / "broker"
        self.socket_path, self.pid_path, self.log_path = broker_paths(state_dir)

    # -- talking to the broker ---------------------------------------------------------

    def _request(
        self, header: dict[str, Any], payload: bytes = b"", timeout: float = 30.0
    ) -> tuple[dict[str, Any], bytes]:
        """One request, one reply. :class:`_BrokerDown` if no broker listens;
        ``TimeoutError`` if it does not answer; an ``error`` reply raises
        :class:`InvalidRequest` with the broker's message."""
        try:
            sock = connect_checked(self.socket_path, timeout)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise _BrokerDown(str(e)) from e
        except NotOurs as e:
            self.log.warning("jupyter_agents: not connecting to the pty broker: %s", e)
            raise BackendUnavailable(f"refusing the pty broker's socket: {e}") from e
        with sock:
            sock.sendall(encode(header, payload))
            reply, body = read_frame_sync(sock)
        if reply["op"] == "error":
            raise InvalidRequest(f"pty broker: {reply.get('error')}")
        return reply, body

    def _call(self, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """:meth:`_request`, with every failure to reach the broker as
        :class:`BackendUnavailable`."""
        try:
            return self._request(header, payload)
        except _BrokerDown as e:
            raise BackendUnavailable(f"the pty broker is not running ({e})") from e
        except (OSError, ProtocolError) as e:
            raise BackendUnavailable(f"the pty broker does not answer: {e}") from e

    def ping(self, timeout: float = 5.0) -> int | None:
        """The broker's pid, or None if none listens. ``TimeoutError``: it is hung."""
        try:
            reply, _ = self._request({"op": "ping"}, timeout=timeout)
        except (_BrokerDown, ConnectionError):
            return None
        return int(reply["pid"])

    # -- Backend API -------------------------------------------------------------------

    def present(self) -> bool:
        return self.socket_path.exists()

    def start(self) -> None:
        if len(str(self.socket_path)) > _MAX_SOCKET_PATH:
            raise BackendUnavailable(
                f"broker socket path {self.socket_path} is too long for a unix socket; "
                f"choose a shorter AgentsApp.state_dir, such as {safe_short_dir()}"
            )
        ensure_private_dir(self.state_dir)
        ensure_private_dir(self.broker_dir)
        ensure_private_dir(self.transcript_dir)
        self._ensure_running()

    def _ensure_running(self) -> int:
        """The pid of the broker, started if none answers (one starter at a time)."""
        try:
            pid = self.ping()
            if pid is None:
                with self._start_lock():
                    pid = self.ping()
                    if pid is None:
                        self._launch()
                        pid = self.ping()
                        if pid is not None:
                            self.log.info("jupyter_agents: started the pty broker (pid %d)", pid)
        except (OSError, ProtocolError) as e:  # TimeoutError included: hung
            raise BackendUnavailable(f"the pty broker does not answer: {e}") from e
        if pid is None:
            raise BackendUnavailable(f"the pty broker did not start; see {self.log_path}")
        return pid

    @contextlib.contextmanager
    def _start_lock(self) -> Iterator[None]:
        import fcntl

        fd = os.open(self.broker_dir / "start.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _launch(self) -> None:
        env = {k: v for k, v in os.environ.items() if k in _BROKER_ENV}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p
        )
        create_private_file(self.log_path)
        argv = python_module_argv(
            "jupyter_agents.backends.broker.server", "--state-dir", str(self.state_dir), "--daemon"
        )
        with open(self.log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd="/",
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    close_fds=True,
                )
                code = proc.wait(self.start_timeout)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise BackendUnavailable(f"cannot start the pty broker: {e}") from e
        if code:
            raise BackendUnavailable(
                f"the pty broker exited at start (code {code}); see {self.log_path}"
            )

    def spawn(self, request: SpawnRequest) -> LiveSession:
        check_session_id(request.session_id)
        self._ensure_running()
        reply, _ = self._call(
            {
                "op": "spawn",
                "sid": request.session_id,
                "argv": list(request.argv),
                "cwd": request.cwd,
                "env": dict(request.env),
                "rows": request.rows,
                "cols": request.cols,
                "transcript_max_bytes": self.transcript_max_bytes,
            }
        )
        return _live(reply["session"])

    def list_live(self) -> list[LiveSession]:
        """Every session the broker holds; none when no broker runs (the next spawn or
        the heartbeat starts one)."""
        try:
            reply, _ = self._request({"op": "list"}, timeout=self.ping_timeout * 2)
        except (_BrokerDown, ConnectionError):
            return []
        except (OSError, ProtocolError) as e:
            raise BackendUnavailable(f"the pty broker does not answer: {e}") from e
        return [_live(s) for s in reply["sessions"]]

    def remove(self, session_id: str) -> None:
        with contextlib.suppress(_BrokerDown, ConnectionError):
            self._request({"op": "remove", "sid": session_id})

    def kill_server(self) -> None:
        """Stop the broker (it hangs up every session); end it by force if it does not
        answer. Nothing is left running either way."""
        ident = self._recorded_broker()
        with contextlib.suppress(_BrokerDown, OSError, ProtocolError, InvalidRequest):
            self._request({"op": "shutdown"}, timeout=self.ping_timeout)
        if ident is None:
            return
        deadline = time.monotonic() + 10
        while _running(ident) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(ident) and terminate_tree(ident):
            self.log.warning("jupyter_agents: ended the pty broker (pid %d) by force", ident.pid)

    def _recorded_broker(self) -> ProcessIdentity | None:
        try:
            pid, created = self.pid_path.read_text().split()
            return ProcessIdentity(int(pid), float(created))
        except (OSError, ValueError):
            return None

    def attach(self, session_id: str, listener: StreamListener) -> Stream:
        return BrokerStream(self.socket_path, check_session_id(session_id), listener)

    def debug_attach_command(self, session_id: str) -> list[str]:
        return python_module_argv(
            "jupyter_agents.backends.broker.attach", "--state-dir", str(self.state_dir), session_id
        )

    # -- liveness ----------------------------------------------------------------------

    def monitor(self, on_lost: Callable[[], object]) -> Callable[[], None]:
        """Heartbeat (module docstring); call from the running event loop."""
        if self.heartbeat_interval <= 0:
            return super().monitor(on_lost)
        task = asyncio.ensure_future(self._heartbeat(on_lost))

        def stop() -> None:
            task.cancel()

        return stop

    async def _heartbeat(self, on_lost: Callable[[], object]) -> None:
        late = 0
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                pid = await asyncio.to_thread(self.ping, self.ping_timeout)
            except (TimeoutError, OSError, ProtocolError) as e:
                late += 1
                self.log.warning("jupyter_agents: the pty broker did not answer a ping: %s", e)
                if late < 2:
                    continue
                pid = None
            if pid is not None:
                late = 0
                continue
            hung, late = late >= 2, 0
            try:
                new = await asyncio.to_thread(self._replace, hung)
            except BackendUnavailable as e:
                self.log.error("jupyter_agents: %s", e)
                continue
            self.log.warning(
                "jupyter_agents: the pty broker was %s; started a new one (pid %d); "
                "its sessions are lost (transcripts kept)",
                "hung" if hung else "gone",
                new,
            )
            try:
                on_lost()
            except AgentsError as e:  # keep beating: the next reconcile may succeed
                self.log.error("jupyter_agents: reconcile after losing the broker: %s", e)

    def _replace(self, hung: bool) -> int:
        """End a hung broker by force, start a new one; its pid. The state dir's lock is
        held meanwhile, so no reconcile runs between: one would hear the dying broker
        report its sessions as exited (the hang-up it gives them on its way out) where
        they were lost with it (``interrupted``)."""
        with state_lock(self.state_dir):
            if hung:
                ident = self._recorded_broker()
                if ident is not None:
                    terminate_tree(ident)
            return self._ensure_running()


def _running(ident: ProcessIdentity) -> bool:
    """Whether the process still runs (a zombie waiting for init to reap it does not)."""
    proc = matches(ident)
    try:
        return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _live(model: dict[str, Any]) -> LiveSession:
    return LiveSession(
        str(model["sid"]),
        model.get("pid"),
        bool(model.get("dead")),
        model.get("exit_code"),
        model.get("dead_since"),
    )


_Snapshot = Callable[[str], None] | None


class BrokerStream(QueuedStream[_Snapshot]):
    """One connection attached to one session; replies and output share it, so a
    snapshot's callback runs exactly between the output before and after it.

    The ``output`` frames of one read of the connection (a flood brings several) go to
    the listener as one piece, after that read's frames, or before the first frame of
    another op among them: one websocket message per read rather than per frame, in
    the same order."""

    def __init__(self, socket_path: Path, session_id: str, listener: StreamListener) -> None:
        super().__init__(listener)
        self._sid = session_id
        self._transport: asyncio.Transport | None = None
        #: output payloads of the read being handled, not yet delivered
        self._held: list[bytes] = []
        # the attach reply is pending as None: an error there means no such session
        self._request({"op": "attach", "sid": session_id}, reply=None, expects_reply=True)
        self._start(self._connect(socket_path))

    def snapshot(self, callback: Callable[[str], None], screen_rows: int | None = None) -> None:
        reply = callback
        if screen_rows is not None:
            rows = screen_rows

            def reply(text: str) -> None:
                callback(screen_only(text, rows))

        self._request({"op": "snapshot", "sid": self._sid}, reply=reply, expects_reply=True)

    def write(self, data: str) -> None:
        raw = data.encode("utf-8", "surrogateescape")
        for i in range(0, len(raw), _WRITE_CHUNK):
            self._request({"op": "write", "sid": self._sid}, raw[i : i + _WRITE_CHUNK])

    def resize(self, rows: int, cols: int) -> None:
        self._request({"op": "resize", "sid": self._sid, "rows": int(rows), "cols": int(cols)})

    def _request(
        self,
        header: dict[str, Any],
        payload: bytes = b"",
        reply: _Snapshot = None,
        expects_reply: bool = False,
    ) -> None:
        frame = encode(header, payload)
        if expects_reply:
            self._send(frame, reply)
        else:
            self._send(frame)

    def _transmit(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    def _hang_up(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def _connect(self, socket_path: Path) -> None:
        """Connect, and once the socket and its peer are known to be ours
        (:func:`~.protocol.connect_checked`; else the stream fails with why and sends
        nothing), send what is queued and serve the connection until it ends."""
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()
        try:
            sock = await asyncio.to_thread(connect_checked, socket_path)
        except NotOurs as e:
            logging.getLogger("jupyter_agents").warning(
                "jupyter_agents: not connecting to the pty broker: %s", e
            )
            raise
        sock.setblocking(False)
        self._transport, _ = await loop.create_unix_connection(
            lambda: FrameReader(self._dispatch, gone, self._release_output), sock=sock
        )
        try:
            if not self._closed:
                self._flush_outbox()
                await asyncio.shield(gone)
        finally:
            self._transport.close()
            with contextlib.suppress(asyncio.CancelledError):
                await gone

    def _dispatch(self, header: dict[str, Any], payload: bytes) -> bool:
        """Handle one frame from the broker; False when the stream is over."""
        op = header["op"]
        if op == "output":
            self._held.append(payload)
            return True
        self._release_output()
        if op == "resync":  # we fell behind and output was dropped: redraw
            self._decoder.reset()
            self._listener.on_output(payload.decode("utf-8", "replace"))
        elif op == "exit":
            code = header.get("exit_code")
            self._report_exit(code if isinstance(code, int) else None)
        elif op in ("ok", "error") and self._pending:
            callback = self._pending.popleft()
            if callback is None and op == "error":  # attach refused: no such session
                return False
            if callback is not None and op == "ok":
                callback(payload.decode("utf-8", "replace"))
        return True

    def _release_output(self) -> None:
        """Deliver the output held from the read being handled, as one piece."""
        if self._held:
            held = self._held
            self._held = []
            self._deliver(held[0] if len(held) == 1 else b"".join(held))
