"""What every benchmark shares: the server flavors, a private work dir per run, real
servers and websocket clients (from :mod:`jupyter_agents.pytest_plugin`), process
measurements and statistics.

A *flavor* is one way of serving ``/api/terminals``: ``stock`` (jupyter_server_terminals
+ terminado, in-process ptys) or one of our backends (``tmux`` now; a ``broker`` flavor
is one more :class:`Flavor` in :data:`FLAVORS` once that backend exists). Benchmarks
take flavors as parameters and never branch on a backend's internals except through
:meth:`BenchServer.helper_processes`, which says which processes a flavor's terminals
cost besides the Jupyter server.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from jupyter_agents.pytest_plugin import (
    NON_TERMINAL_EXTENSIONS,
    TOKEN,
    ServerProcess,
    TermClient,
    kill_backends,
)

if TYPE_CHECKING:
    import websocket

REPO = Path(__file__).resolve().parent.parent
_T = TypeVar("_T")


def this_tree_env() -> dict[str, str]:
    """Environment for a subprocess that must import this tree's jupyter_agents (the
    editable install may point elsewhere)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _extensions(**enabled: bool) -> list[str]:
    """Server flags enabling ``enabled``; the extensions that are not about terminals
    are off in every flavor (as ServerProcess does), so start-up and memory figures
    compare the terminal stacks and nothing else (jupyter_lsp spawns node)."""
    flags = {name: False for name in NON_TERMINAL_EXTENSIONS} | enabled
    return [f"--ServerApp.jpserver_extensions={k}={v}" for k, v in flags.items()]


@dataclasses.dataclass(frozen=True)
class Flavor:
    """One terminal stack to benchmark, as the server arguments that select it."""

    name: str
    description: str
    #: True for jupyter_agents backends (terminals owned outside the server process)
    ours: bool
    args: tuple[str, ...]
    #: the jupyter_agents backend (``AgentsApp.backend``) of our flavors
    backend: str | None = None


STOCK = Flavor(
    "stock",
    "jupyter_server_terminals + terminado (ptys in the server process)",
    False,
    tuple(_extensions(jupyter_agents=False, jupyter_server_terminals=True)),
)
TMUX = Flavor(
    "tmux",
    "jupyter_agents, tmux backend (private tmux server, one control client per Jupyter server)",
    True,
    (*_extensions(jupyter_agents=True), "--AgentsApp.backend=tmux"),
    backend="tmux",
)
BROKER = Flavor(
    "broker",
    "jupyter_agents, pty broker backend (a daemon owning the ptys)",
    True,
    (*_extensions(jupyter_agents=True), "--AgentsApp.backend=broker"),
    backend="broker",
)
#: every flavor by name
FLAVORS: dict[str, Flavor] = {f.name: f for f in (STOCK, TMUX, BROKER)}


# -- work dirs and servers --------------------------------------------------------------


@contextlib.contextmanager
def workdir(tag: str) -> Iterator[Path]:
    """A fresh short temp dir (unix socket paths must stay under ~100 bytes).

    On exit: the backends of ``<dir>/st`` are killed, every process still running
    with its cwd inside the dir (shells of a crashed stock server) is killed, and the dir
    is removed. Nothing outside it is touched.
    """
    path = Path(tempfile.mkdtemp(prefix=f"jab-{tag}-", dir="/tmp"))
    try:
        yield path
    finally:
        with contextlib.suppress(Exception):
            kill_backends(path / "st")
        _kill_processes_in(path)
        shutil.rmtree(path, ignore_errors=True)


def _kill_processes_in(path: Path) -> None:
    me = os.getpid()
    inside = str(path)
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            cwd = proc.cwd()
            if cwd == inside or cwd.startswith(inside + os.sep):
                proc.kill()


class BenchServer:
    """A real ``jupyter server`` of one flavor, with helpers the benchmarks share."""

    def __init__(
        self, flavor: Flavor, work: Path, extra_args: tuple[str, ...] = (), lab: bool = False
    ) -> None:
        """``lab``: with JupyterLab's server extension on (its page and our labextension
        served, for a browser); the other extensions that are not about terminals stay
        off."""
        self.flavor = flavor
        self.work = work
        self.state_dir = work / "st"
        self.lab = lab
        args = list(flavor.args)
        if lab:
            args = [a for a in args if "jpserver_extensions=jupyterlab=" not in a]
            args.append("--ServerApp.jpserver_extensions=jupyterlab=True")
        # a fresh interpreter, as a deployment starts one (and the loop watch some
        # benchmarks install with a sitecustomize runs at interpreter start)
        self.proc = ServerProcess(
            self.state_dir,
            work,
            env=this_tree_env(),
            args=[*args, *extra_args],
            lab=lab,
            fork=False,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> BenchServer:
        self.proc.start(timeout=60)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.proc.stop(sig)

    def restart_process(self) -> None:
        """A new server process on the same work and state dir (new port)."""
        self.proc = ServerProcess(
            self.state_dir,
            self.work,
            env=self.proc.extra_env,
            args=self.proc.extra_args,
            lab=self.lab,
            fork=False,
        )

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None, "server not running"
        return self.proc.proc.pid

    # -- API ----------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One API call; raises on any non-2xx status (benchmarks never expect errors)."""
        status, data = self.proc.request(method, path, body)
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path} -> {status}: {data}")
        return data

    def create_terminal(self) -> str:
        return str(self.request("POST", "/api/terminals", {})["name"])

    def create_terminals(self, n: int, workers: int = 4) -> list[str]:
        """``n`` new terminals (a few ``POST``s at a time; no client, no waiting for
        their shells); their names."""
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda _: self.create_terminal(), range(n)))

    def delete_terminal(self, name: str) -> None:
        self.request("DELETE", f"/api/terminals/{name}")

    def ws(self, name: str) -> TermClient:
        """A websocket client of terminal ``name`` (handshake done).

        websocket-client checks UTF-8 of text frames in pure Python (~3 MB/s, slower than
        any server); the bytes are decoded anyway, so that check is switched off to
        measure the servers rather than the client.
        """
        client = self.proc.ws(name)
        client.ws.frame_buffer.skip_utf8_validation = True
        client.ws.cont_frame.skip_utf8_validation = True
        return client

    def events_client(self) -> websocket.WebSocket:
        """A websocket connected to ``/api/events/subscribe`` (jupyter_events: every
        event the server emits, one JSON object per text frame), token-authenticated
        like the terminal clients."""
        import websocket

        url = self.proc.base.replace("http", "ws", 1) + "/api/events/subscribe"
        return websocket.create_connection(url, header=[f"Authorization: token {TOKEN}"])

    def connect(self, name: str, rows: int = 40, cols: int = 120) -> TermClient:
        """A websocket client that got ``setup`` and the first output; sized like a tab."""
        client = self.ws(name)
        client.wait_for(lambda c: len(c.messages) >= 2, timeout=30)
        client.send("set_size", rows, cols, rows * 17, cols * 8)
        return client

    def ready_shell(self, name: str) -> TermClient:
        """Connect to ``name`` and wait until its shell answers (the prompt is drawn)."""
        client = self.connect(name)
        client.stdin("echo rdy$((6*7))\r")
        client.wait_for("rdy42", timeout=30)
        client.drain(0.2)
        return client

    # -- processes ----------------------------------------------------------------------

    def server_process(self) -> psutil.Process:
        return psutil.Process(self.pid)

    def tmux_server_pid(self) -> int | None:
        """The pid of this state dir's tmux server, if one runs."""
        sock = self.state_dir / "tmux" / "socket"
        if not sock.exists():
            return None
        out = subprocess.run(
            ["tmux", "-S", str(sock), "display-message", "-p", "#{pid}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        return int(out) if out.isdigit() else None

    def owner_pid(self) -> int | None:
        """The pid of the process owning this flavor's terminals outside the Jupyter
        server (tmux server, pty broker), if one runs; None for stock."""
        if self.flavor.backend == "tmux":
            return self.tmux_server_pid()
        if self.flavor.backend == "broker":
            from jupyter_agents.backends.broker.protocol import broker_paths

            pid_file = broker_paths(self.state_dir)[1]
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                return pid if psutil.pid_exists(pid) else None
        return None

    def helper_processes(self) -> dict[str, list[psutil.Process]]:
        """Processes the terminals cost besides the shells, grouped: ``server`` (the
        Jupyter server), ``clients`` (its children that are not shells: our tmux control
        clients) and ``owner`` (the tmux server or the pty broker)."""
        server = self.server_process()
        shells = set(self.shell_pids())
        clients = [p for p in server.children() if p.pid not in shells]
        groups: dict[str, list[psutil.Process]] = {"server": [server], "clients": clients}
        owner = self.owner_pid()
        groups["owner"] = [psutil.Process(owner)] if owner else []
        return groups

    def shell_pids(self) -> list[int]:
        """Pids of the terminals' shells (children of the server or of the owner)."""
        parents = [self.pid]
        owner = self.owner_pid()
        if owner:
            parents.append(owner)
        pids = []
        for parent in parents:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(parent).children():
                    with contextlib.suppress(psutil.Error):
                        if "--norc" in child.cmdline():
                            pids.append(child.pid)
        return pids

    def verify_flavor(self) -> None:
        """Check that terminals are owned where the flavor says (call with >= 1 terminal).

        Stock: shells are children of the server and no backend runs. Ours: the
        backend's process owns them and none is the server's child.
        """
        direct = [c.pid for c in self.server_process().children() if "--norc" in _cmdline(c)]
        owner = self.owner_pid()
        if self.flavor.ours:
            if owner is None or direct or not self.shell_pids():
                raise RuntimeError(
                    f"{self.flavor.name}: terminals are not owned by the {self.flavor.backend}"
                )
        elif (self.state_dir / "tmux" / "socket").exists() or not direct:
            raise RuntimeError("stock: terminals are not children of the server (is it stock?)")


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


@contextlib.contextmanager
def server(flavor: Flavor, tag: str, extra_args: tuple[str, ...] = ()) -> Iterator[BenchServer]:
    """A started server of ``flavor`` in its own work dir; everything is cleaned up."""
    with workdir(tag) as work:
        srv = BenchServer(flavor, work, extra_args)
        try:
            yield srv.start()
        finally:
            srv.stop(signal.SIGKILL)


#: servers with sessions that groups share within one :func:`shared_servers` block
_shared: dict[tuple[str, int], BenchServer] = {}
_shared_stack: list[contextlib.ExitStack] = []


@contextlib.contextmanager
def shared_servers() -> Iterator[None]:
    """Within this block, :func:`server_with_sessions` hands every group the same server
    per (flavor, sessions) and stops them all at the end (one start-up instead of one
    per group: quick mode has a time budget)."""
    with contextlib.ExitStack() as stack:
        _shared_stack.append(stack)
        try:
            yield
        finally:
            _shared_stack.pop()
            _shared.clear()


@contextlib.contextmanager
def server_with_sessions(flavor: Flavor, sessions: int) -> Iterator[BenchServer]:
    """A server of ``flavor`` with ``sessions`` terminals (shells, no client). Groups
    may use it, never change it: a terminal they add they delete. Shared within a
    :func:`shared_servers` block, else started and cleaned up here."""
    key = (flavor.name, sessions)
    if key in _shared:
        yield _shared[key]
        return
    with contextlib.ExitStack() as own:
        stack = _shared_stack[-1] if _shared_stack else own
        srv = stack.enter_context(server(flavor, f"s{sessions}{flavor.name}"))
        srv.create_terminals(sessions)
        srv.verify_flavor()
        if _shared_stack:
            _shared[key] = srv
        yield srv


# -- raw websocket reading (no per-frame text accumulation) ------------------------------


def each_with_sessions(
    flavors: list[Flavor], mode: Mode, fn: Callable[[BenchServer, Mode], _T]
) -> dict[str, _T]:
    """``fn(server, mode)`` by flavor name, on the server with ``mode.api_sessions``
    sessions (:func:`server_with_sessions`) of each of our flavors, one after the other:
    for groups about our API and front ends (no stock counterpart). Quick mode, which
    has a time budget, measures only the first of ours (tmux)."""
    ours = [f for f in flavors if f.ours]
    out = {}
    for flavor in ours[:1] if mode.name == "quick" else ours:
        with server_with_sessions(flavor, mode.api_sessions) as srv:
            out[flavor.name] = fn(srv, mode)
    return out


def each(
    flavors: list[Flavor], fn: Callable[[Flavor], _T], parallel: bool = False
) -> dict[str, _T]:
    """``fn(flavor)`` for every flavor, by name: one after the other, or all at once."""
    if not parallel or len(flavors) < 2:
        return {f.name: fn(f) for f in flavors}
    with ThreadPoolExecutor(len(flavors)) as pool:
        return dict(zip([f.name for f in flavors], pool.map(fn, flavors), strict=True))


def recv_stdout(client: TermClient, timeout: float) -> str | None:
    """The text of the next ``stdout`` frame; None on timeout. Other frames are skipped."""
    import websocket

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        client.ws.settimeout(left)
        try:
            raw = client.ws.recv()
        except websocket.WebSocketTimeoutException:
            return None
        msg = json.loads(raw)
        if msg[0] == "stdout":
            return str(msg[1])


def read_until(client: TermClient, marker: str, timeout: float) -> int:
    """Receive stdout until ``marker`` has appeared; returns the characters received."""
    total = 0
    tail = ""
    deadline = time.monotonic() + timeout
    while True:
        text = recv_stdout(client, deadline - time.monotonic())
        if text is None:
            raise TimeoutError(f"no {marker!r} within {timeout:.0f}s ({total} chars received)")
        total += len(text)
        tail = (tail + text)[-(len(marker) + 64) :]
        if marker in tail:
            return total


# -- measurements -----------------------------------------------------------------------


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of ``procs`` (vanished ones count 0)."""
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


@dataclasses.dataclass(frozen=True)
class Memory:
    """Resident memory of a group of processes, bytes: RSS, and USS (pages only that
    process maps: what it gives back when it exits; shared library and executable pages,
    resident anyway, are not counted)."""

    rss: int = 0
    uss: int = 0

    def __add__(self, other: Memory) -> Memory:
        return Memory(self.rss + other.rss, self.uss + other.uss)

    def __sub__(self, other: Memory) -> Memory:
        return Memory(self.rss - other.rss, self.uss - other.uss)


def memory(procs: list[psutil.Process]) -> Memory:
    total = Memory()
    for p in procs:
        with contextlib.suppress(psutil.Error):
            info = p.memory_full_info()
            total += Memory(info.rss, getattr(info, "uss", info.rss))
    return total


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest-rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn()`` took."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def make_base64_file(path: Path, size: int) -> Path:
    """A file of ``size`` bytes of base64 text (76-column lines), made once per run."""
    if not path.exists() or path.stat().st_size != size:
        with open(path, "wb") as out:
            left = size
            while left > 0:
                chunk = base64.encodebytes(os.urandom(57 * 20_000))[:left]
                out.write(chunk)
                left -= len(chunk)
    return path


@dataclasses.dataclass(frozen=True)
class Mode:
    """Workload sizes and repetitions of one run of the suite."""

    name: str
    runs: int  # repetitions of each timed measurement (medians are reported)
    throughput_mb: int
    seq_lines: int  # short lines: ``seq 1 seq_lines`` printed, throughput measured
    keys: int
    flood_mb: int  # what another terminal prints while echo latency is measured
    restart_terminals: int
    reconcile_records: int
    reconcile_live: int
    idle_terminals: int
    idle_seconds: float
    noisy_terminals: int
    noisy_mb: int
    tidy_seconds: float  # real seconds tmux's hourly tidy takes in group 5's reference
    replay_lines: int
    settle: float  # seconds to let servers settle before a measurement
    api_sessions: int  # live sessions of the server the CLI, load and events groups use
    cli_runs: int  # runs of each timed command (medians are reported)
    load_clients: int  # GET requests kept in flight while echo latency is measured
    events_seconds: float  # each idle-CPU window of the events group
    search_mb: int  # transcripts searched, in all
    search_sessions: int  # how many transcripts they are
    #: run our flavors side by side where that can only make their figures worse
    #: (restart, reconcile: targets without a stock comparison); quick mode only
    parallel: bool = False
    #: MB an agent appends to its conversation while the archive copies it (group 12)
    archive_mb: int = 20
    #: seconds the cost tracking is measured while 20 agents spend (group 13)
    usage_seconds: float = 30.0
    #: MB of the conversation the turns view reads (group 14)
    turns_mb: int = 100


FULL = Mode(
    "full",
    runs=5,
    throughput_mb=100,
    seq_lines=2_000_000,
    keys=1000,
    flood_mb=200,
    restart_terminals=100,
    reconcile_records=10_000,
    reconcile_live=200,
    idle_terminals=100,
    idle_seconds=60,
    noisy_terminals=5,
    noisy_mb=10,
    tidy_seconds=10,
    replay_lines=20_000,
    settle=2.0,
    api_sessions=50,
    cli_runs=10,
    load_clients=20,
    events_seconds=30,
    search_mb=1000,
    search_sessions=100,
)
QUICK = Mode(
    "quick",
    runs=1,
    throughput_mb=5,
    seq_lines=100_000,
    keys=100,
    flood_mb=30,
    restart_terminals=10,
    reconcile_records=1_000,
    reconcile_live=10,
    idle_terminals=5,
    idle_seconds=3,
    noisy_terminals=2,
    noisy_mb=1,
    tidy_seconds=3,
    replay_lines=2_000,
    settle=0.5,
    api_sessions=10,
    cli_runs=3,
    load_clients=20,
    events_seconds=2,
    search_mb=50,
    search_sessions=10,
    parallel=True,
    archive_mb=4,
    usage_seconds=10.0,
    turns_mb=5,
)
