"""pytest fixtures for testing against jupyter_agents with real parts.

Enable with ``pytest_plugins = ["jupyter_agents.pytest_plugin"]``. Fixtures:

- ``agents_state_dir``: a private state dir; at teardown its backends (the tmux server
  on its socket, the pty broker) are killed, so no test leaves processes behind.
- ``agents_backend``: the backend servers use: ``"tmux"`` unless a test parametrizes
  it indirectly (``@pytest.mark.parametrize("agents_backend", ["tmux", "broker"],
  indirect=True)``); ``"broker"`` servers run with a PATH that has no tmux.
- ``agents_server``: a factory starting real ``jupyter server`` subprocesses on that
  state dir (:class:`ServerProcess`) with that backend; all are stopped at teardown.
  Each without JupyterLab is forked from the worker's warm interpreter
  (:mod:`jupyter_agents.pytest_forkserver`; ``JUPYTER_AGENTS_TEST_FORK=0``: a fresh
  ``python -m jupyter_server`` each).

:func:`transcript_bytes` reads what a session's transcript keeps; :func:`kill_backends`
ends a state dir's backends as ``jupyter agents kill-server`` would, :func:`power_loss`
as a reboot would (no agent runs an exit hook).

The websocket clients (:class:`TermClient` for terminals, :class:`EventClient` for the
session events on ``/api/events/subscribe``) need ``websocket-client``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.backends.base import Backend
from jupyter_agents.core.events import SCHEMA_ID
from jupyter_agents.pytest_forkserver import ForkedProcess, ForkServer
from jupyter_agents.terminal.transcripts import Transcript

TOKEN = "test-token-not-secret"  # noqa: S105
#: a shell whose output tests can match: bash without rc files and a fixed prompt
TEST_SHELL = ["/bin/bash", "--norc", "--noprofile", "-i"]


#: ports a server is started on before its start fails (:meth:`ServerProcess.start`)
PORT_TRIES = 3


class PortTaken(Exception):
    """A server could not listen on its port: another process took it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` free ports, all different: each is held until all are chosen (one
    :func:`free_port` after another may be given the port just released again)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


#: server extensions that have nothing to do with terminals: off unless a test needs
#: JupyterLab (``ServerProcess(lab=True)``); a server starts about 1 s faster without them,
#: and nbdime's alone costs 0.22 of the 0.81 CPU-s of a start and stop (the worktree
#: review imports nbdime itself, in a child, and needs none of its handlers). Notebook
#: 7's imports jupyterlab_server to list its metadata: 0.13 -> 0.05 CPU-s of a forked
#: server's ``initialize`` without it
NON_TERMINAL_EXTENSIONS = ("jupyterlab", "jupyter_lsp", "notebook_shim", "nbdime", "notebook")
#: this process's fork server, which servers are forked from (started on first use)
FORK_SERVER = ForkServer()


def pytest_unconfigure(config: pytest.Config) -> None:
    FORK_SERVER.close()


class ServerProcess:
    """A ``jupyter server`` subprocess with jupyter_agents enabled by its shipped config
    (and JupyterLab's extensions only with ``lab``); ``fork=False``: a fresh interpreter
    even where it could be forked (what a benchmark measures)."""

    def __init__(
        self,
        state_dir: Path,
        workdir: Path,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        lab: bool = False,
        fork: bool = True,
        base_url: str = "/",
    ) -> None:
        self.state_dir = state_dir
        self.workdir = workdir
        #: ``ServerApp.base_url`` without its last ``/`` ("" for the root): what every
        #: URL of the server starts with after its host, as under JupyterHub's
        #: ``/user/<name>/``
        self.prefix = base_url.rstrip("/")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}{self.prefix}"
        self.extra_env = env or {}
        quiet = [f"--ServerApp.jpserver_extensions={e}=False" for e in NON_TERMINAL_EXTENSIONS]
        self.extra_args = [*([] if lab else quiet), *(args or [])]
        #: forked from :data:`FORK_SERVER` (never with JupyterLab, see
        #: :mod:`jupyter_agents.pytest_forkserver`), else a fresh interpreter
        self.fork = fork and not lab and os.environ.get("JUPYTER_AGENTS_TEST_FORK") != "0"
        self.proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._clients: list[TermClient] = []
        self.log_path = workdir / f"server-{self.port}.log"

    def start(self, timeout: float = 30) -> ServerProcess:
        """Start the server; once it answers, it is returned. Its port is free when
        :func:`free_port` picks it, but another process may bind it before the server
        does: the server then exits, and starts again on a new port (at most
        :data:`PORT_TRIES` ports in all)."""
        for _ in range(PORT_TRIES - 1):
            try:
                return self._start(timeout)
            except PortTaken:
                self.port = free_port()
                self.base = f"http://127.0.0.1:{self.port}{self.prefix}"
                self.log_path = self.workdir / f"server-{self.port}.log"
        return self._start(timeout)

    def _start(self, timeout: float) -> ServerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        for name in ("config", "data", "runtime"):
            (self.workdir / name).mkdir(exist_ok=True)
        env.update(
            {
                "JUPYTER_AGENTS_STATE_DIR": str(self.state_dir),
                "JUPYTER_CONFIG_DIR": str(self.workdir / "config"),
                "JUPYTER_DATA_DIR": str(self.workdir / "data"),
                "JUPYTER_RUNTIME_DIR": str(self.workdir / "runtime"),
            }
        )
        env.update(self.extra_env)
        args = [
            "--allow-root",
            "--no-browser",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={self.workdir}",
            f"--ServerApp.terminado_settings={json.dumps({'shell_command': TEST_SHELL})}",
            *([f"--ServerApp.base_url={self.prefix}/"] if self.prefix else []),
            *self.extra_args,
        ]
        self.proc = None
        if self.fork:
            try:
                self.proc = FORK_SERVER.spawn(args, env, self.workdir, self.log_path)
            except OSError:  # no fork server: a fresh interpreter, as below
                self.proc = None
        if self.proc is None:
            with open(self.log_path, "ab") as log:  # the child keeps its own copy
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "jupyter_server", *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.workdir,
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                said = self.log_path.read_text()
                if f"port {self.port} is not available" in said:
                    raise PortTaken(self.port)
                raise RuntimeError(f"server exited early:\n{said[-3000:]}")
            try:
                self.request("GET", "/api/status")
                return self
            except (OSError, http.client.HTTPException):  # not up, or another's port
                time.sleep(0.1)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"server did not start:\n{self.log_path.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Stop the server (and close the websocket clients :meth:`ws` opened)."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = TOKEN
    ) -> tuple[int, Any]:
        """One HTTP call; returns (status, parsed JSON body, the raw bytes if not JSON, or
        None). Never raises on 4xx/5xx."""
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        req = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310
        if token:
            req.add_header("Authorization", f"token {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
                raw = resp.read()
                try:
                    return resp.status, json.loads(raw) if raw else None
                except ValueError:
                    return resp.status, raw  # not JSON (e.g. a transcript)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def new(
        self, kind: str = "shell", cwd: Path | str | None = None, **body: Any
    ) -> dict[str, Any]:
        """``POST /api/agents/sessions``: a new session of ``kind`` (in ``cwd``; ``body``:
        the route's other fields); its model. Asserts the 201."""
        fields = {"kind": kind, **({} if cwd is None else {"cwd": str(cwd)}), **body}
        status, model = self.request("POST", "/api/agents/sessions", fields)
        assert status == 201, model
        return dict(model)

    def model(self, session_id: str) -> dict[str, Any]:
        """``GET /api/agents/sessions/<id>``: the session's model. Asserts the 200."""
        status, model = self.request("GET", f"/api/agents/sessions/{session_id}")
        assert status == 200, model
        return dict(model)

    def ws(self, name: str) -> TermClient:
        client = TermClient(
            f"ws://127.0.0.1:{self.port}{self.prefix}/terminals/websocket/{name}",
            log_path=self.log_path,
        )
        self._clients.append(client)
        return client

    def type_line(self, name: str, line: str, expect: str) -> None:
        """Type ``line`` into terminal ``name``, wait for ``expect``, disconnect."""
        client = self.ws(name)
        try:
            client.wait_for(lambda c: len(c.messages) >= 2)
            client.stdin(line + "\r")
            client.wait_for(expect)
        finally:
            client.close()


class TermClient:
    """A websocket terminal client: collects frames, waits for text."""

    def __init__(self, url: str, token: str = TOKEN, log_path: Path | None = None) -> None:
        """``log_path``: the server's log, quoted when the server closes the socket."""
        import websocket

        self.ws = websocket.create_connection(
            url, header=[f"Authorization: token {token}"], timeout=10
        )
        self.log_path = log_path
        self.messages: list[list[Any]] = []
        self.text = ""

    def _recv(self, timeout: float) -> bool:
        import websocket

        self.ws.settimeout(timeout)
        try:
            opcode, raw = self.ws.recv_data()
        except websocket.WebSocketTimeoutException:
            return False
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            code = int.from_bytes(raw[:2], "big") if len(raw) >= 2 else None
            raise AssertionError(
                f"the server closed the socket ({code}, {raw[2:].decode(errors='replace')!r}) "
                f"after {self.messages[-3:]!r}; {self.log_tail()}"
            )
        msg = json.loads(raw)
        self.messages.append(msg)
        if msg[0] == "stdout":
            self.text += msg[1]
        return True

    def log_tail(self) -> str:
        """The end of the server's log, for an assertion's message."""
        log = self.log_path.read_text(errors="replace")[-3000:] if self.log_path else ""
        return f"the server's log ends:\n{log}"

    def wait_for(self, predicate: str | Callable[[TermClient], bool], timeout: float = 15) -> None:
        """Receive until ``predicate`` (a substring of the output, or a callable) holds."""
        check = (lambda c: predicate in c.text) if isinstance(predicate, str) else predicate
        deadline = time.monotonic() + timeout
        while not check(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out waiting for {predicate!r}; got ...{self.text[-1500:]!r}"
                )
            self._recv(min(left, 0.5))

    def drain(self, quiet: float = 0.5) -> None:
        """Receive until nothing arrives for ``quiet`` seconds."""
        while self._recv(quiet):
            pass

    def send(self, *msg: Any) -> None:
        self.ws.send(json.dumps(list(msg)))

    def stdin(self, text: str) -> None:
        self.send("stdin", text)

    def close(self) -> None:
        self.ws.close()
        self.ws.shutdown()  # type: ignore[no-untyped-call]  # the socket, if the server closed


class EventClient:
    """A subscriber of ``/api/events/subscribe`` collecting jupyter_agents' session
    events (in ``events``, oldest first), read in a background thread."""

    def __init__(self, server: ServerProcess) -> None:
        import websocket

        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{server.port}{server.prefix}/api/events/subscribe",
            header=[f"Authorization: token {TOKEN}"],
            timeout=1,
        )
        self.events: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        import websocket

        while not self._stop.is_set():
            try:
                event = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            except (websocket.WebSocketException, OSError):
                return
            if event.get("schema_id") == SCHEMA_ID:
                self.events.append(event)

    def of(self, session_id: str, action: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["session_id"] == session_id and (action is None or e["action"] == action)
        ]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.ws.close()


def poll(
    check: Callable[[], Any], timeout: float = 20, what: str = "condition", interval: float = 0.2
) -> Any:
    """Call ``check`` until it returns something truthy (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def transcript(state_dir: Path, session_id: str) -> Transcript:
    """The transcript of session ``session_id`` of ``state_dir`` (what the REST log reads)."""
    return Transcript(session_id, state_dir / "transcripts" / session_id)


def transcript_bytes(state_dir: Path, session_id: str) -> bytes:
    """Every kept byte of a session's transcript (b"" while there is none)."""
    return transcript(state_dir, session_id).tail(sys.maxsize)


def kill_backends(state_dir: Path) -> None:
    """Stop every backend of ``state_dir`` (tmux server, pty broker) and its sessions."""
    from jupyter_agents.backends.broker import BrokerBackend
    from jupyter_agents.backends.tmux import TmuxBackend

    TmuxBackend(state_dir).kill_server()
    BrokerBackend(state_dir).kill_server()


def power_loss(server: ServerProcess) -> None:
    """What a power loss leaves of ``server`` and its backends: the server killed first
    (SIGKILL: it sees nothing of what follows, as nothing is seen when the power goes),
    then every process of its tmux server (SIGKILL, so no agent runs an exit hook), then
    what is left cleared as :func:`kill_backends` does. Killed the other way round, the
    server's exit watch sees an agent end while its tmux server still runs and records
    it ``exited``, which no power loss does."""
    import contextlib

    import psutil

    server.stop(signal.SIGKILL)
    state_dir = server.state_dir
    socket_path = str(state_dir / "tmux" / "socket")
    for tmux in psutil.process_iter(["cmdline"]):
        if socket_path not in (tmux.info["cmdline"] or []):
            continue
        with contextlib.suppress(psutil.NoSuchProcess):  # a tmux client that just ended
            for process in [*tmux.children(recursive=True), tmux]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
    kill_backends(state_dir)


def open_backend(state_dir: Path, name: str) -> Backend:
    """The backend ``name`` (``"tmux"`` or ``"broker"``) of ``state_dir``, started."""
    from jupyter_agents.backends.broker import BrokerBackend
    from jupyter_agents.backends.tmux import TmuxBackend

    backend: Backend = (TmuxBackend if name == "tmux" else BrokerBackend)(state_dir)
    backend.start()
    return backend


def tmux_control_clients(state_dir: Path) -> list[str]:
    """The names of the control-mode clients of ``state_dir``'s tmux server."""
    out = subprocess.run(
        [
            "tmux",
            "-S",
            str(state_dir / "tmux" / "socket"),
            "list-clients",
            "-F",
            "#{client_control_mode} #{client_name}",
        ],
        capture_output=True,
        text=True,
    ).stdout
    return [name for mode, _, name in (s.partition(" ") for s in out.splitlines()) if mode == "1"]


def detach_tmux_control_clients(state_dir: Path) -> None:
    """Have ``state_dir``'s tmux server detach its control clients (as a user attaching
    with ``attach -d`` would)."""
    socket_path = str(state_dir / "tmux" / "socket")
    for client in tmux_control_clients(state_dir):
        subprocess.run(["tmux", "-S", socket_path, "detach-client", "-t", client], check=False)


def path_without(tool: str, directory: Path) -> str:
    """A PATH like ours in which ``tool`` cannot be found: one directory of symlinks to
    every other executable on PATH (first one wins, as in a lookup)."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            link = directory / name
            if name != tool and not link.exists() and not link.is_symlink():
                link.symlink_to(os.path.join(entry, name))
    return str(directory)


@pytest.fixture(scope="session")
def path_without_tmux(tmp_path_factory: pytest.TempPathFactory) -> str:
    return path_without("tmux", tmp_path_factory.mktemp("no-tmux") / "bin")


@pytest.fixture
def agents_state_dir(tmp_path: Path) -> Iterator[Path]:
    # short path: unix socket paths are limited to ~100 bytes
    state = tmp_path / "state"
    yield state
    kill_backends(state)


@pytest.fixture
def agents_backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "tmux"))


@pytest.fixture
def agents_server(
    agents_state_dir: Path, agents_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., ServerProcess]]:
    servers: list[ServerProcess] = []

    def start(**kwargs: Any) -> ServerProcess:
        if agents_backend == "broker":
            no_tmux = request.getfixturevalue("path_without_tmux")
            kwargs["env"] = {"PATH": no_tmux, **kwargs.get("env", {})}
            kwargs["args"] = ["--AgentsApp.backend=broker", *kwargs.get("args", [])]
        server = ServerProcess(agents_state_dir, tmp_path, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop(signal.SIGKILL)
