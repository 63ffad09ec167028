"""15. Where each megabyte's CPU goes: group 1's two payloads (``cat`` of the base64 file
and of the output of ``seq``) to a websocket client reading everything, timed the same
way, with the CPU every process on the data path spent, per MB of payload delivered.

The processes, found after the client's shell has answered and before the command is
sent:

- *server*: the Jupyter server (stock: terminado reads the pty in it);
- tmux: the *tmux server* (:meth:`BenchServer.owner_pid`), the *transcript writer*
  ``pipe-pane -O`` runs (its child whose command line names ``writer.pl``:
  :mod:`jupyter_agents.backends.tmux.writer`) and the *control-mode client* (the
  server's child running ``tmux ... -C``: :mod:`jupyter_agents.backends.tmux.control`);
- broker: the *pty broker* daemon (:mod:`jupyter_agents.backends.broker.server`);
- context: the *producer* (``cat``, which exits before the end: the shell waits for it
  before it prints the end marker, so its CPU is the shell's ``children_user`` +
  ``children_system`` after minus before, plus the shell's own) and the *websocket
  client* (this process's thread CPU while it reads).

Each is psutil ``cpu_times()`` user + system after minus before; beside it, each
process's *wake-ups* per MB: the voluntary context switches of its main thread (the
thread of the IO loop in the Jupyter server and the broker; tmux and perl have one),
the times it blocked waiting for something and was woken: what larger reads, fewer
frames and fewer turns of a loop per MB save, and what CPU figures in clock ticks are
too coarse to show. The *server side* row adds up every process but the producer and
the websocket client: the whole cost of a terminal that outlives its server, tmux
included, against stock's one process. Processes that the
server, the tmux server or the broker started and reaped meanwhile (e.g. a ``tmux``
command of the control plane) show up in their parent's ``children_*`` and are
reported as one row; a process that is still running at the end but was not found at
the start is not counted (none is expected: every process above lives as long as the
terminal and its viewer). Flavors run one after the other within a run (their servers
are all up), so no flavor's processes wait for another's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from jupyter_agents.backends.tmux.writer import WRITER as WRITER_SCRIPT

from . import throughput
from .harness import BenchServer, Flavor, Mode, make_base64_file, median, read_until, server
from .harness import workdir as make_workdir
from .report import Row

#: acceptance 4 of issue 59: our server's CPU per MB at most stock's
SERVER_TARGET = 1.0
#: seconds per clock tick, the unit /proc (and so psutil) counts process CPU in
TICK = 1 / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Part:
    """One process (or the children it reaped) whose CPU is counted."""

    label: str
    proc: psutil.Process
    #: count its reaped children's CPU (``children_user``/``children_system``) too
    with_children: bool = False
    #: count only its reaped children's CPU, not its own
    children_only: bool = False


#: row labels, in the order they are reported
SERVER = "Jupyter server"
TMUX_SERVER = "tmux server"
WRITER = "transcript writer (perl, run by pipe-pane)"
CONTROL = "tmux control-mode client"
BROKER = "pty broker"
REAPED = "short-lived processes reaped meanwhile"
PRODUCER = "producer (`cat`) and its shell"
CLIENT = "websocket client (the bench process)"
LABELS = (SERVER, TMUX_SERVER, WRITER, CONTROL, BROKER, REAPED, PRODUCER, CLIENT)
SERVER_SIDE = "server side (all but the producer and the client)"


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def parts(srv: BenchServer) -> list[Part]:
    """The processes of ``srv``'s data path (module docstring); call with exactly one
    terminal and its viewer connected. Raises if one the flavor must have is missing."""
    main = srv.server_process()
    shells = [psutil.Process(pid) for pid in srv.shell_pids()]
    if len(shells) != 1:
        raise RuntimeError(f"{srv.flavor.name}: expected one shell, found {len(shells)}")
    found = [
        Part(SERVER, main),
        Part(REAPED, main, children_only=True),
        Part(PRODUCER, shells[0], with_children=True),
    ]
    owner_pid = srv.owner_pid()
    if srv.flavor.backend == "tmux":
        assert owner_pid is not None
        owner = psutil.Process(owner_pid)
        writers = [p for p in owner.children(recursive=True) if str(WRITER_SCRIPT) in _cmdline(p)]
        controls = [
            p
            for p in main.children()
            if (argv := _cmdline(p)) and Path(argv[0]).name == "tmux" and "-C" in argv
        ]
        if len(writers) != 1 or len(controls) != 1:
            raise RuntimeError(f"tmux: {len(writers)} writers, {len(controls)} control clients")
        found += [
            Part(TMUX_SERVER, owner),
            Part(REAPED, owner, children_only=True),
            Part(WRITER, writers[0]),
            Part(CONTROL, controls[0]),
        ]
    elif srv.flavor.backend == "broker":
        assert owner_pid is not None
        owner = psutil.Process(owner_pid)
        found += [Part(BROKER, owner), Part(REAPED, owner, children_only=True)]
    return found


def _wakeups(part: Part) -> int:
    """Voluntary context switches of its main thread (psutil reads ``/proc/<pid>/status``);
    0 for a part that counts reaped children only."""
    return 0 if part.children_only else part.proc.num_ctx_switches().voluntary


def _seconds(part: Part) -> float:
    t = part.proc.cpu_times()
    own = 0.0 if part.children_only else t.user + t.system
    kids = t.children_user + t.children_system if part.with_children or part.children_only else 0
    return own + kids


@dataclasses.dataclass
class Used:
    """What one payload cost: seconds, and CPU seconds and wake-ups by part label."""

    seconds: float
    cpu: dict[str, float]
    wakeups: dict[str, int]


def measure(srv: BenchServer, name: str, path: Path) -> Used:
    """Send ``path`` to a new viewer of terminal ``name`` (:func:`throughput.ws_seconds`'s
    way): the seconds it took, CPU seconds and wake-ups by part label."""
    client = srv.ready_shell(name)
    try:
        found = parts(srv)
        woken = [_wakeups(p) for p in found]
        before = [_seconds(p) for p in found]
        client_before = time.thread_time()
        t0 = time.perf_counter()
        client.stdin(throughput.COMMAND.format(path=path))
        read_until(client, throughput.MARKER, 600)
        seconds = time.perf_counter() - t0
        cpu = {CLIENT: time.thread_time() - client_before}
        wakeups: dict[str, int] = {}
        for part, start, was in zip(found, before, woken, strict=True):
            with contextlib.suppress(psutil.Error):  # gone: counted 0
                cpu[part.label] = cpu.get(part.label, 0.0) + _seconds(part) - start
                if not part.children_only and part.label != PRODUCER:
                    wakeups[part.label] = _wakeups(part) - was
        return Used(seconds, cpu, wakeups)
    finally:
        client.close()


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    """Both payloads on every flavor's server, runs interleaved."""
    ours = [f.name for f in flavors if f.ours]
    with make_workdir("cpu") as data, contextlib.ExitStack() as stack:
        base64_file = make_base64_file(data / "payload.b64", mode.throughput_mb * 1_000_000)
        seq_file = throughput.make_seq_file(data / "seq.txt", mode.seq_lines)
        seq_mb = seq_file.stat().st_size / 1_000_000
        payloads = {
            f"{mode.throughput_mb:g} MB base64": (base64_file, float(mode.throughput_mb)),
            f"short lines (`seq 1 {mode.seq_lines:,}`, {seq_mb:.1f} MB)": (seq_file, seq_mb),
        }
        with ThreadPoolExecutor(len(flavors)) as pool:
            started = list(
                pool.map(lambda f: stack.enter_context(server(f, f"cpu{f.name}")), flavors)
            )
        servers = {srv.flavor.name: srv for srv in started}
        names = {name: srv.create_terminal() for name, srv in servers.items()}
        for srv in started:
            srv.verify_flavor()
        # by payload, flavor: per run MB/s, and per run CPU ms and wake-ups per MB by part
        speed: dict[str, dict[str, list[float]]] = {p: {} for p in payloads}
        per_mb: dict[str, dict[str, dict[str, list[float]]]] = {p: {} for p in payloads}
        woken: dict[str, dict[str, dict[str, list[float]]]] = {p: {} for p in payloads}
        for run_no in range(mode.runs):
            order = list(servers.items())
            if run_no % 2:
                order.reverse()
            for label, (path, mb) in payloads.items():
                for name, srv in order:
                    used = measure(srv, names[name], path)
                    speed[label].setdefault(name, []).append(mb / used.seconds)
                    by_part = per_mb[label].setdefault(name, {})
                    for part, cpu_s in used.cpu.items():
                        by_part.setdefault(part, []).append(1000 * cpu_s / mb)
                    by_part.setdefault("all", []).append(1000 * sum(used.cpu.values()) / mb)
                    side = sum(v for k, v in used.cpu.items() if k not in (PRODUCER, CLIENT))
                    by_part.setdefault(SERVER_SIDE, []).append(1000 * side / mb)
                    by_wake = woken[label].setdefault(name, {})
                    for part, count in used.wakeups.items():
                        by_wake.setdefault(part, []).append(count / mb)
    out: list[Row] = []
    for label in payloads:
        out += rows(label, payloads[label][1], speed[label], per_mb[label], ours, mode.runs)
        out += wakeup_rows(woken[label])
    return out


def rows(
    payload: str,
    mb: float,
    speed: dict[str, list[float]],
    per_mb: dict[str, dict[str, list[float]]],
    ours: list[str],
    runs: int,
) -> list[Row]:
    """The rows of one payload: MB/s, then CPU ms per MB by process, medians of runs."""

    def values(part: str) -> dict[str, float | None]:
        return {f: median(by[part]) for f, by in per_mb.items() if part in by}

    out = [
        Row("15", f"cpu: {payload} to a websocket client", "MB/s",
            {f: median(v) for f, v in speed.items()},
            note=f"median of {runs}; flavors one after the other, runs interleaved")
    ]  # fmt: skip
    server = values(SERVER)
    stock = server.get("stock")
    out.append(
        Row("15", f"  {SERVER} CPU per MB delivered", "ms/MB", server,
            target=f"<= {SERVER_TARGET:g}x stock (issue 59, acceptance 4)",
            verdict={f: bool(stock and (server[f] or 0) <= SERVER_TARGET * stock)
                     for f in ours if f in server},
            note=f"psutil counts CPU in clock ticks of {1000 * TICK:g} ms: one tick is "
            f"{1000 * TICK / mb:.2g} ms/MB here")
    )  # fmt: skip
    for part in LABELS[1:]:
        got = values(part)
        if not any(got.values()) and part == REAPED:
            continue
        out.append(Row("15", f"  {part} CPU per MB", "ms/MB", got))
    out.append(
        Row("15", f"  {SERVER_SIDE}, CPU per MB", "ms/MB", values(SERVER_SIDE),
            note="ours: the Jupyter server, tmux, its writer and control client, or the "
            "broker; stock: the Jupyter server alone")
    )  # fmt: skip
    whole = values("all")
    out.append(
        Row("15", "  all of them, CPU per MB", "ms/MB", whole,
            note="CPU ms per MB of payload = CPU-seconds per MB x 1000; psutil cpu_times "
            "user + system, after minus before")
    )  # fmt: skip
    return out


def wakeup_rows(woken: dict[str, dict[str, list[float]]]) -> list[Row]:
    """Wake-ups per MB by process (module docstring), medians of runs; parts a flavor
    lacks are left out of it."""
    out = []
    for part in LABELS:
        got: dict[str, float | None] = {
            f: median(by[part]) for f, by in woken.items() if part in by
        }
        if got and part != REAPED:
            out.append(Row("15", f"  {part} wake-ups per MB", "count", got))
    if out:
        out[0].note = (
            "voluntary context switches of the process's main thread (/proc/<pid>/status), "
            "after minus before, per MB"
        )
    return out
