"""3. Restart re-adoption: with N live terminals, a new server process is started on
the same state dir (the old one SIGKILLed, as in a crash); timed from process start
until all N are listed by ``GET /api/terminals`` and until each has delivered its
replay to a newly connected websocket client. Compared with a bare server start (no
terminals), and with stock, whose terminals do not survive at all."""

from __future__ import annotations

import signal
import time

import psutil

from .harness import BenchServer, Flavor, Mode, each, median, server, timed, workdir
from .report import Row

#: seconds allowed above a bare server start
TARGET_S = 3.0


def bare_start(flavor: Flavor) -> float:
    """Seconds from process start to the first answered ``GET /api/terminals``, with a
    fresh work and state dir."""
    with workdir(f"bare{flavor.name}") as work:
        srv = BenchServer(flavor, work)
        try:
            t0 = time.perf_counter()
            srv.start()
            srv.request("GET", "/api/terminals")
            return time.perf_counter() - t0
        finally:
            srv.stop(signal.SIGKILL)


def populate(srv: BenchServer, n: int) -> list[str]:
    """``n`` terminals, each with a line of output to replay; no client left connected."""
    names = []
    for _ in range(n):
        name = srv.create_terminal()
        srv.ready_shell(name).close()
        names.append(name)
    srv.verify_flavor()
    return names


def timed_restart(srv: BenchServer, n: int) -> tuple[float, float]:
    """SIGKILL the server, start a new one: seconds until ``n`` terminals are listed,
    and until each has delivered a replay (containing the earlier output) to a client."""
    srv.stop(signal.SIGKILL)
    srv.restart_process()
    t0 = time.perf_counter()
    srv.start()
    while len(names := [t["name"] for t in srv.request("GET", "/api/terminals")]) < n:
        time.sleep(0.01)
    listed = time.perf_counter() - t0
    clients = [srv.ws(name) for name in names]
    try:
        for c in clients:
            c.wait_for("rdy42", timeout=60)
        replayed = time.perf_counter() - t0
    finally:
        for c in clients:
            c.close()
    return listed, replayed


def stock_survivors(flavor: Flavor, n: int) -> tuple[int, float]:
    """How many of ``n`` terminals of a non-persistent flavor are listed and alive after
    a crash + restart; and the seconds that restart took to answer ``GET
    /api/terminals`` (nothing survives, so it is a bare start)."""
    with server(flavor, f"lose{flavor.name}") as srv:
        populate(srv, n)
        shells = srv.shell_pids()
        srv.stop(signal.SIGKILL)
        time.sleep(0.5)
        alive = sum(psutil.pid_exists(p) for p in shells)
        srv.restart_process()
        t0 = time.perf_counter()
        srv.start()
        listed = len(srv.request("GET", "/api/terminals"))
        return min(alive, listed), time.perf_counter() - t0


def ours_restarts(flavor: Flavor, mode: Mode) -> tuple[float, float, float, int]:
    """(first start with an empty state dir, median seconds to all listed, median seconds
    to all replayed, terminals listed at the end) for one of our flavors."""
    n = mode.restart_terminals
    with workdir(f"rs{flavor.name}") as work:
        srv = BenchServer(flavor, work)
        try:
            first = timed(srv.start)
            populate(srv, n)
            times = [timed_restart(srv, n) for _ in range(mode.runs)]
            survivors = len(srv.request("GET", "/api/terminals"))
        finally:
            srv.stop(signal.SIGKILL)
    return first, median([t[0] for t in times]), median([t[1] for t in times]), survivors


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    n = mode.restart_terminals
    ours = [f.name for f in flavors if f.ours]
    # bare starts: the first start of each flavor below, plus fresh ones up to mode.runs
    bare_runs = {f.name: [bare_start(f) for _ in range(mode.runs - 1)] for f in flavors}
    listed: dict[str, float | None] = {}
    replayed: dict[str, float | None] = {}
    survivors: dict[str, float | None] = {}
    for flavor in flavors:
        if not flavor.ours:  # alone: its restart is the bare-start baseline
            survivors[flavor.name], seconds = stock_survivors(flavor, n)
            bare_runs[flavor.name].append(seconds)
    results = each([f for f in flavors if f.ours], lambda f: ours_restarts(f, mode), mode.parallel)
    for name, (first, listed[name], replayed[name], survivors[name]) in results.items():
        bare_runs[name].append(first)
    bare: dict[str, float | None] = {f: median(v) for f, v in bare_runs.items()}
    baseline = bare.get("stock") or min(v for v in bare.values() if v is not None)
    verdict = {f: (replayed[f] or 0) <= baseline + TARGET_S for f in ours if f in replayed}
    extra = ", ".join(f"{f} +{(replayed[f] or 0) - baseline:.2f} s" for f in replayed)
    return [
        Row("3", "bare server start to first GET /api/terminals", "s", dict(bare), ratio=False),
        Row("3", f"restart with {n} live terminals: all listed", "s", listed, ratio=False),
        Row("3", f"restart with {n} live terminals: all {n} replays delivered", "s", replayed,
            target=f"<= bare stock start + {TARGET_S:g} s", verdict=verdict, ratio=False,
            note=f"above the bare stock start: {extra}; median of {mode.runs} restart(s)"
            + ("; our flavors ran at once (quick mode)" if mode.parallel else "")),
        Row("3", f"terminals surviving a crash + restart (of {n})", "count", survivors,
            ratio=False),
    ]  # fmt: skip
