"""5. Cost of idle sessions, and memory given back after noisy ones are deleted.

- Memory per terminal: N terminals, each with a connected websocket client (as in a
  browser with N tabs), measured against one such terminal: the marginal RSS and USS
  per terminal of the Jupyter server, its helper processes (our tmux control clients)
  and the process owning the terminals (the tmux server), shells excluded.
- Idle CPU of all those processes over a quiet period.
- ``DELETE /api/terminals/<name>`` while a client is connected (what closing a tab's
  terminal does in JupyterLab), timed.
- Memory kept after noisy terminals are deleted: K terminals each print M MB to a
  client and are deleted; server + owner memory is compared with before (one idle
  terminal stays open throughout, so tmux's server does not exit when it gets empty).
  With a reference for tmux: the same in tmux alone, and the memory its server still
  keeps after its hourly tidy, which calls glibc's ``malloc_trim(0)`` (tmux >= 3.2,
  ``server_tidy_event``); that server's clock runs fast under libfaketime, so the hour
  passes in ``Mode.tidy_seconds``.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from jupyter_agents.backends.tmux import TmuxBackend

from .harness import (
    BenchServer,
    Flavor,
    Memory,
    Mode,
    cpu_seconds,
    make_base64_file,
    median,
    memory,
    read_until,
    server,
    workdir,
)
from .report import Row

TARGET_KIB = 1024
TARGET_CPU = 0.5
GROUPS = ("server", "clients", "owner")
#: terminals deleted with a client connected, per flavor (all at once)
DELETES = 3
#: tmux's tidy interval (``server_tidy_event``), seconds of its clock
TIDY_SECONDS = 3600


def group_memory(srv: BenchServer) -> dict[str, Memory]:
    return {g: memory(procs) for g, procs in srv.helper_processes().items()}


def all_processes(srv: BenchServer) -> list[psutil.Process]:
    return [p for procs in srv.helper_processes().values() for p in procs]


def noisy(srv: BenchServer, payload: Path) -> str:
    """A terminal that has printed ``payload`` to a client (now closed); its name."""
    name = srv.create_terminal()
    client = srv.ready_shell(name)
    try:
        client.stdin(f"cat {payload}; echo _$((6*7))_:\r")
        read_until(client, "_42_:", timeout=300)
    finally:
        client.close()
    return name


def delete_all(srv: BenchServer, names: list[str]) -> list[float]:
    """``DELETE`` every terminal of ``names`` at once; seconds each took."""

    def one(name: str) -> float:
        t0 = time.perf_counter()
        srv.delete_terminal(name)
        return time.perf_counter() - t0

    with ThreadPoolExecutor(max(1, len(names))) as pool:
        return list(pool.map(one, names))


def measure(srv: BenchServer, mode: Mode, data: Path) -> dict[str, float]:
    n = mode.idle_terminals
    clients = []
    try:
        first = srv.create_terminal()
        clients.append(srv.ready_shell(first))
        srv.verify_flavor()
        time.sleep(mode.settle)
        one = group_memory(srv)
        clients += [srv.ready_shell(srv.create_terminal()) for _ in range(n - 1)]
        time.sleep(mode.settle)
        many = group_memory(srv)
        groups = srv.helper_processes()
        c0 = {g: cpu_seconds(procs) for g, procs in groups.items()}
        time.sleep(mode.idle_seconds)
        cpu = {
            g: 100 * (cpu_seconds(procs) - c0[g]) / mode.idle_seconds for g, procs in groups.items()
        }
    finally:
        for c in clients:
            c.close()

    # terminals deleted while a client is connected; their output is also the warm-up
    # of the next part (first-use allocations are not what it measures)
    small = make_base64_file(data / "small.b64", 100_000)
    viewed = [srv.create_terminal() for _ in range(DELETES)]
    viewers = [srv.ready_shell(name) for name in viewed]
    try:
        for c in viewers:
            c.stdin(f"cat {small}; echo _$((6*7))_:\r")
            read_until(c, "_42_:", timeout=60)
        deletes = delete_all(srv, viewed)
    finally:
        for c in viewers:
            c.close()

    big = make_base64_file(data / "noisy.b64", mode.noisy_mb * 1_000_000)
    time.sleep(mode.settle)
    before = group_memory(srv)
    delete_all(srv, [noisy(srv, big) for _ in range(mode.noisy_terminals)])
    time.sleep(mode.settle)
    after = group_memory(srv)

    out = {"delete": median(deletes)}
    for g in GROUPS:
        out[f"cpu_{g}"] = cpu.get(g, 0.0)
        delta = many[g] - one[g]
        out[f"rss_{g}"] = delta.rss / (n - 1) / 1024
        out[f"uss_{g}"] = delta.uss / (n - 1) / 1024
        kept = after[g] - before[g]
        out[f"kept_rss_{g}"] = kept.rss / mode.noisy_terminals / 1024
        out[f"kept_uss_{g}"] = kept.uss / mode.noisy_terminals / 1024
    return out


def tmux_tidy_kept(
    state: Path, sessions: int, payload: Path, hour: float
) -> tuple[float, float] | None:
    """Reference: a tmux server alone (our ``history-limit``) with one idle session;
    ``sessions`` more each ``cat payload`` and are killed. The server's RSS kept per
    killed session, KiB: right after, and once its hourly tidy has run (its clock runs
    fast: an hour in ``hour`` seconds). None without libfaketime (apt: faketime), or if
    the sessions took so long that the tidy may have run before the first measure."""
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    if not found:
        return None
    state.mkdir(parents=True, exist_ok=True)
    sock, conf = str(state / "socket"), state / "tmux.conf"
    conf.write_text(
        f"set -g history-limit {TmuxBackend.history_limit.default_value}\n"
        "set -g status off\nset-environment -gu LD_PRELOAD\nset-environment -gu FAKETIME\n"
    )
    speed = TIDY_SECONDS / hour
    env = {**os.environ, "LD_PRELOAD": found[0], "FAKETIME": f"+0 x{speed:g}"}
    env = {k: v for k, v in env.items() if not k.startswith("TMUX")}

    def tmux(*args: str) -> str:
        out = subprocess.run(["tmux", "-S", sock, *args], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        return out.stdout.strip()

    started = time.monotonic()
    tmux("-f", str(conf), "new-session", "-d", "-s", "idle", "-x", "100", "-y", "30")
    try:
        owner = psutil.Process(int(tmux("display-message", "-p", "#{pid}")))
        before = owner.memory_info().rss
        for i in range(sessions):
            tmux("new-session", "-d", "-s", f"n{i}", "-x", "100", "-y", "30",
                 f"cat {payload}; tmux -S {sock} wait-for -S n{i}; sleep 3600")  # fmt: skip
        for i in range(sessions):
            tmux("wait-for", f"n{i}")
        for i in range(sessions):
            tmux("kill-session", "-t", f"n{i}")
        time.sleep(0.5)
        kept = owner.memory_info().rss - before
        if time.monotonic() - started >= hour:
            return None
        time.sleep(max(0.0, started + hour + 1 - time.monotonic()))
        tidied = owner.memory_info().rss - before
        return kept / sessions / 1024, tidied / sessions / 1024
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], env=env, capture_output=True)


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    ours = [f.name for f in flavors if f.ours]
    with workdir("idata") as data:
        # payloads first: the flavors run at once and share them
        make_base64_file(data / "small.b64", 100_000)
        make_base64_file(data / "noisy.b64", mode.noisy_mb * 1_000_000)

        def one(flavor: Flavor) -> dict[str, float]:
            with server(flavor, f"idle{flavor.name}") as srv:
                return measure(srv, mode, data)

        # flavors side by side: every figure here is per process group (CPU seconds,
        # memory) and so not skewed by the other flavor's load; halves the wall time
        with ThreadPoolExecutor(len(flavors)) as pool:
            res = dict(zip([f.name for f in flavors], pool.map(one, flavors), strict=True))
        tidy = None
        if any(f.backend == "tmux" for f in flavors):  # after them: it loads the CPU
            tidy = tmux_tidy_kept(
                data / "tidy", mode.noisy_terminals, data / "noisy.b64", mode.tidy_seconds
            )

    def total(kind: str, groups: tuple[str, ...] = GROUPS) -> dict[str, float | None]:
        return {f: sum(r[f"{kind}_{g}"] for g in groups) for f, r in res.items()}

    def breakdown(kind: str, groups: tuple[str, ...] = GROUPS) -> str:
        return "; ".join(
            f"{f}: "
            + ", ".join(f"{g} {r[f'{kind}rss_{g}']:.0f}/{r[f'{kind}uss_{g}']:.0f}" for g in groups)
            for f, r in res.items()
        )

    rss, uss, cpu = total("rss"), total("uss"), total("cpu")
    kept = total("kept_rss", ("server", "owner"))
    stock_kept = kept.get("stock")
    n, k, mb = mode.idle_terminals, mode.noisy_terminals, mode.noisy_mb
    groups_doc = (
        "server = Jupyter server, clients = its tmux control clients, "
        "owner = tmux server or pty broker"
    )
    return [
        Row("5", f"RSS per viewed idle terminal, beyond the shell ({n} terminals)", "KiB",
            rss, target=f"<= {TARGET_KIB} KiB",
            verdict={f: (rss[f] or 0) <= TARGET_KIB for f in ours},
            note=f"KiB per terminal, RSS/USS by process group ({groups_doc}): "
            + breakdown("")),
        Row("5", "USS per viewed idle terminal, beyond the shell", "KiB", uss,
            target=f"<= {TARGET_KIB} KiB",
            verdict={f: (uss[f] or 0) <= TARGET_KIB for f in ours}),
        Row("5", f"idle CPU, {n} viewed terminals over {mode.idle_seconds:g} s", "%",
            cpu, target=f"<= {TARGET_CPU} % of a core",
            verdict={f: (cpu[f] or 0) <= TARGET_CPU for f in ours}, ratio=False,
            note="% of a core by process group: " + "; ".join(
                f"{f}: " + ", ".join(f"{g} {r[f'cpu_{g}']:.2f}" for g in GROUPS)
                for f, r in res.items())),
        Row("5", f"RSS kept per deleted terminal that printed {mb} MB ({k} deleted)", "KiB",
            kept, target="< stock",
            verdict={f: stock_kept is not None and (kept[f] or 0) < stock_kept for f in ours},
            ratio=False,
            note="RSS/USS after deletion minus before, KiB per deleted terminal: "
            + breakdown("kept_", ("server", "owner"))),
        *([] if tidy is None else [
            Row("5", "  reference: tmux alone, RSS kept per killed session", "KiB",
                {"tmux": tidy[0]}, ratio=False,
                note=f"its server's RSS after kill-session minus before, KiB per session "
                f"that printed {mb} MB ({k} killed)"),
            Row("5", "  reference: the same after tmux's hourly tidy (malloc_trim)", "KiB",
                {"tmux": tidy[1]}, ratio=False,
                note=f"tmux >= 3.2 calls malloc_trim(0) once an hour; its server's "
                f"clock ran fast under libfaketime: the hour passed in "
                f"{mode.tidy_seconds:g} s"),
        ]),
        Row("5", "DELETE /api/terminals/<name> with its client connected", "ms",
            {f: 1000 * r["delete"] for f, r in res.items()},
            note=f"median of {DELETES} deleted at once"),
    ]  # fmt: skip
