"""13. Cost tracking: the usage ledger's CPU while 20 agents write usage records, and
what it does on the IO loop.

:data:`AGENTS` claude sessions (the fake CLI of tests/fakes/fake_agent.py, which writes
assistant records with ``message.usage`` where Claude Code does) each get ``/spend``:
an assistant record of about 0.5 KiB every :data:`EVERY` s until Escape. Their viewers
leave, so nobody watches, and an unattended limit is set far above what they spend:
every refresh (:data:`REFRESH` s) the server copies the new records into the archive,
reads them into the ledger, publishes usage events and weighs each session's allowance
(nothing is interrupted). The server runs with :mod:`bench.loopwatch`, which times
every IO-loop callback and sums the thread CPU of the cost tracking. Measured over
``usage_seconds``, per backend:

- *cost tracking CPU*: thread CPU of ``read_usage`` and the limit check, per second
  (ms/s, i.e. thousandths of a core) and per record read (µs); the server's whole CPU
  beside it (archive, streams and the rest);
- *IO loop*: the longest callback of jupyter_agents in CPU time and how many ran over
  1 ms (target: none), and in wall-clock time (which also counts waiting for a core),
  also for every callback of the server.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from jupyter_agents.config import DEFAULT_SCRUB_ENV

from . import loopwatch
from .harness import REPO, BenchServer, Flavor, Mode, median, workdir
from .report import Row

AGENTS = 20
#: seconds between two records of one agent (each writes 20 a second)
EVERY = 0.05
#: the server's refresh interval (its default)
REFRESH = 5.0
#: what each record's message uses: output tokens (and 20k cache reads, 5 input)
OUTPUT = 50
#: the target of the cost tracking's CPU: 2 % of a core for 20 agents far busier than
#: real ones (an agent writes a record every few seconds, these 20 a second each)
TARGET_MS_PER_S = 20.0
FAKE_AGENT = REPO / "tests" / "fakes" / "fake_agent.py"


def _setup(work: Path) -> tuple[dict[str, str], Path]:
    """The fake ``claude`` on PATH, a private HOME, the loop watch's sitecustomize, a
    config that keeps the watch out of the sessions' environment; the stats file."""
    bin_dir, home, site, config = work / "bin", work / "home", work / "site", work / "config"
    for folder in (bin_dir, home, site, config):
        folder.mkdir(exist_ok=True)
    script = bin_dir / "claude"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_AGENT}" claude "$@"\n')
    script.chmod(0o755)
    (site / "sitecustomize.py").write_text(loopwatch.sitecustomize())
    settings = {
        "scrub_env": [*DEFAULT_SCRUB_ENV, "BENCH_LOOPWATCH"],
        "unattended_limit": {"tokens": 10**12},
        "refresh_interval": REFRESH,
    }
    (config / "jupyter_server_config.json").write_text(json.dumps({"AgentsApp": settings}))
    stats = work / "loopwatch.json"
    path = os.pathsep.join(filter(None, [str(site), str(REPO), os.environ.get("PYTHONPATH")]))
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "PYTHONPATH": path,
        "BENCH_LOOPWATCH": str(stats),
    }
    return env, stats


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _stats(path: Path, after: float) -> dict[str, Any]:
    """The watch's figures written after ``after`` (epoch seconds)."""
    deadline = time.monotonic() + 10
    while True:
        stats = loopwatch.read(path)
        if stats.get("time", 0) > after:
            return stats
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server's loop watch wrote nothing to {path}")
        time.sleep(0.1)


def measure(flavor: Flavor, mode: Mode) -> dict[str, Any]:
    with workdir(f"usage{flavor.name}") as work:
        env, stats_path = _setup(work)
        srv = BenchServer(flavor, work)
        srv.proc.extra_env.update(env)
        srv.start()
        try:
            names = []
            for _ in range(AGENTS):
                status, agent = srv.proc.request(
                    "POST",
                    "/api/agents/sessions",
                    {"kind": "claude", "cwd": str(work), "args": ["--model", "claude-sonnet-4-5"]},
                )
                if status != 201:
                    raise RuntimeError(f"could not start an agent: {agent}")
                names.append(agent["name"])
            for name in names:  # each starts spending; its viewer leaves
                srv.proc.type_line(name, f"/spend {OUTPUT} {EVERY}", "spending")
            time.sleep(REFRESH + 1)  # the first refresh reads what came before
            server = psutil.Process(srv.pid)
            loopwatch.reset(stats_path)  # what start-up and connecting cost is not counted
            while stats_path.with_suffix(".reset").exists():
                time.sleep(0.05)
            t0 = time.time()
            first, c0 = _stats(stats_path, t0), _cpu(server)
            time.sleep(mode.usage_seconds)
            t1 = time.time()
            last, c1 = _stats(stats_path, t1), _cpu(server)
            for name in names:  # stop them (a person's Escape)
                client = srv.proc.ws(name)
                try:
                    client.wait_for(lambda c: len(c.messages) >= 2)
                    client.stdin("\x1b")
                finally:
                    client.close()
        finally:
            srv.stop()
    seconds = last["time"] - first["time"]
    records = last["records"] - first["records"]
    ledger = last["ledger_cpu"] - first["ledger_cpu"]
    return {
        "ms_per_s": 1000 * ledger / seconds,
        "us_per_record": 1e6 * ledger / max(records, 1),
        "records_per_s": records / seconds,
        "server_ms_per_s": 1000 * (c1 - c0) / (t1 - t0),
        "ours_longest_ms": 1000 * last["ours_longest"],
        "ours_slow": last["ours_slow"],
        "ours_cpu_longest_ms": 1000 * last["ours_cpu_longest"],
        "ours_cpu_slow": last["ours_cpu_slow"],
        "ours": last["ours"],
        "longest_ms": 1000 * last["longest"],
        "slow": last["slow"],
        "callbacks": last["callbacks"],
        "ours_longest_what": last["ours_longest_what"],
    }


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    ours = [f for f in flavors if f.ours]
    if mode.name == "quick":
        ours = ours[:1]
    runs = {f.name: [measure(f, mode) for _ in range(mode.runs)] for f in ours}
    numbers = [k for k, v in next(iter(runs.values()))[0].items() if isinstance(v, (int, float))]
    fig = {n: {k: median([r[k] for r in rs]) for k in numbers} for n, rs in runs.items()}
    # the loop's worst over every run, not a median (and what it was)
    worst = {n: {k: max(r[k] for r in rs) for k in numbers} for n, rs in runs.items()}
    what = {
        n: max(rs, key=lambda r: r["ours_longest_ms"])["ours_longest_what"]
        for n, rs in runs.items()
    }
    names = list(fig)
    rate = median([f["records_per_s"] for f in fig.values()])
    load = f"{AGENTS} agents writing {rate:.0f} usage records/s, nobody watching"
    stock = {"stock": None}
    return [
        Row(
            "13",
            f"cost tracking: CPU of reading usage and weighing the limit ({load})",
            "ms/s",
            {**stock, **{n: fig[n]["ms_per_s"] for n in names}},
            target=f"<= {TARGET_MS_PER_S:g} ms/s",
            verdict={n: fig[n]["ms_per_s"] <= TARGET_MS_PER_S for n in names},
            ratio=False,
            note="stock tracks no cost; thread CPU of Refresh.read_usage and "
            f"UnattendedGuard.check in the server, refresh every {REFRESH:g} s; the server's "
            "whole CPU meanwhile: "
            + ", ".join(f"{n} {fig[n]['server_ms_per_s']:.0f} ms/s" for n in names),
        ),
        Row(
            "13",
            "cost tracking: CPU per usage record read",
            "us",
            {**stock, **{n: fig[n]["us_per_record"] for n in names}},
            ratio=False,
        ),
        Row(
            "13",
            "IO loop: longest callback of jupyter_agents, CPU time (same load)",
            "ms",
            {**stock, **{n: worst[n]["ours_cpu_longest_ms"] for n in names}},
            target="<= 1 ms",
            verdict={n: worst[n]["ours_cpu_longest_ms"] <= 1.0 for n in names},
            ratio=False,
            note="every asyncio callback timed in the server (bench/loopwatch.py), in the "
            "loop thread's CPU time and in wall-clock time (which also counts the loop "
            "waiting for a core: 20 agents and the server share 2); "
            + "; ".join(
                f"{n}: {worst[n]['ours_cpu_slow']:.0f} of {fig[n]['ours']:.0f} of ours over "
                f"1 ms of CPU; wall-clock: the longest {worst[n]['ours_longest_ms']:.2f} ms "
                f"({what[n].rsplit('/', 1)[-1]}), {worst[n]['ours_slow']:.0f} over 1 ms; "
                f"of any callback {worst[n]['longest_ms']:.1f} ms "
                f"({worst[n]['slow']:.0f} of {fig[n]['callbacks']:.0f} over 1 ms)"
                for n in names
            ),
        ),
    ]
