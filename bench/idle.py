"""5. Cost of idle sessions, and memory given back after noisy ones are deleted.

- Memory per terminal: N terminals, each with a connected websocket client (as in a
  browser with N tabs), measured against one such terminal: the marginal RSS and PSS
  per terminal of the Jupyter server, its helper processes (our tmux control clients)
  and the process owning the terminals (the tmux server), shells excluded.
- Idle CPU of all those processes over a quiet period.
- Memory kept after noisy terminals are deleted: K terminals each print M MB to a
  client and are deleted; server + owner memory is compared with before (one idle
  terminal stays open throughout, so tmux's server does not exit when it gets empty).
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from .harness import (
    BenchServer,
    Flavor,
    Memory,
    Mode,
    cpu_seconds,
    make_base64_file,
    memory,
    read_until,
    server,
    workdir,
)
from .report import Row

TARGET_KIB = 1024
TARGET_CPU = 0.5
GROUPS = ("server", "clients", "owner")


def group_memory(srv: BenchServer) -> dict[str, Memory]:
    return {g: memory(procs) for g, procs in srv.helper_processes().items()}


def all_processes(srv: BenchServer) -> list[psutil.Process]:
    return [p for procs in srv.helper_processes().values() for p in procs]


def noisy(srv: BenchServer, payload: Path) -> None:
    """A terminal that prints ``payload`` to a client, then is deleted."""
    name = srv.create_terminal()
    client = srv.ready_shell(name)
    try:
        client.stdin(f"cat {payload}; echo _$((6*7))_:\r")
        read_until(client, "_42_:", timeout=300)
    finally:
        client.close()
    srv.delete_terminal(name)


def measure(srv: BenchServer, mode: Mode, data: Path) -> dict[str, float]:
    n = mode.idle_terminals
    clients = []
    try:
        first = srv.create_terminal()
        clients.append(srv.ready_shell(first))
        srv.verify_flavor()
        time.sleep(1)
        one = group_memory(srv)
        names = [srv.create_terminal() for _ in range(n - 1)]
        clients += [srv.ready_shell(name) for name in names]
        time.sleep(2)
        many = group_memory(srv)
        procs = all_processes(srv)
        c0 = cpu_seconds(procs)
        time.sleep(mode.idle_seconds)
        cpu = 100 * (cpu_seconds(procs) - c0) / mode.idle_seconds
    finally:
        for c in clients:
            c.close()
    for name in names:
        srv.delete_terminal(name)

    small = make_base64_file(data / "small.b64", 100_000)
    big = make_base64_file(data / "noisy.b64", mode.noisy_mb * 1_000_000)
    noisy(srv, small)  # warm-up: first-use allocations are not what we measure
    time.sleep(1)
    before = group_memory(srv)
    for _ in range(mode.noisy_terminals):
        noisy(srv, big)
    time.sleep(2)
    after = group_memory(srv)

    out = {"cpu": cpu}
    for g in GROUPS:
        per = (many[g] - one[g]).rss / (n - 1) / 1024, (many[g] - one[g]).pss / (n - 1) / 1024
        out[f"rss_{g}"], out[f"pss_{g}"] = per
    kept = Memory()
    for g in ("server", "owner"):
        kept += after[g] - before[g]
    out["kept_rss"] = kept.rss / mode.noisy_terminals / 1024
    out["kept_pss"] = kept.pss / mode.noisy_terminals / 1024
    return out


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    ours = [f.name for f in flavors if f.ours]
    res: dict[str, dict[str, float]] = {}
    with workdir("idata") as data:
        for flavor in flavors:
            with server(flavor, f"idle{flavor.name}") as srv:
                res[flavor.name] = measure(srv, mode, data)

    def total(kind: str) -> dict[str, float | None]:
        return {f: sum(r[f"{kind}_{g}"] for g in GROUPS) for f, r in res.items()}

    rss, pss = total("rss"), total("pss")
    breakdown = "; ".join(
        f"{f}: " + ", ".join(f"{g} {r[f'rss_{g}']:.0f}/{r[f'pss_{g}']:.0f}" for g in GROUPS)
        for f, r in res.items()
    )
    stock_kept = res.get("stock", {}).get("kept_rss")
    n, k, mb = mode.idle_terminals, mode.noisy_terminals, mode.noisy_mb
    return [
        Row("5", f"RSS per viewed idle terminal, beyond the shell ({n} terminals)", "KiB",
            rss, target=f"<= {TARGET_KIB} KiB",
            verdict={f: (rss[f] or 0) <= TARGET_KIB for f in ours},
            note=f"KiB per terminal RSS/PSS by process group (server = Jupyter server, "
            f"clients = its tmux control clients, owner = tmux server): {breakdown}"),
        Row("5", "PSS per viewed idle terminal, beyond the shell", "KiB", pss,
            target=f"<= {TARGET_KIB} KiB",
            verdict={f: (pss[f] or 0) <= TARGET_KIB for f in ours}),
        Row("5", f"idle CPU, {n} viewed terminals over {mode.idle_seconds:g} s", "%",
            {f: r["cpu"] for f, r in res.items()}, target=f"<= {TARGET_CPU} % of a core",
            verdict={f: res[f]["cpu"] <= TARGET_CPU for f in ours}, ratio=False),
        Row("5", f"RSS kept per deleted terminal that printed {mb} MB ({k} deleted)", "KiB",
            {f: r["kept_rss"] for f, r in res.items()}, target="< stock",
            verdict={f: stock_kept is not None and res[f]["kept_rss"] < stock_kept
                     for f in ours},
            ratio=False, note="server + tmux server RSS after deletion minus before"),
    ]  # fmt: skip
