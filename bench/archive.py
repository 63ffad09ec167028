"""12. The conversation archive's cost while an agent writes its conversation.

A claude session (the fake CLI of tests/fakes/fake_agent.py, which keeps its file where
Claude Code does) gets a prompt, so its conversation file exists and is archived. Then an
"agent" (a process of its own) appends records of about 1 KiB to that file at
:data:`RATE` MB/s until it grew by ``archive_mb`` MB, while the server's refresh (every
:data:`REFRESH` s, the default) copies what was added into the archive. Measured, per
backend:

- *server CPU per MB archived*: the Jupyter server process's CPU time from the first
  write until the archive holds the whole file, less what it spends over an idle window
  as long (its refresh's other work), divided by the MB archived;
- *lag*: seconds from the last write until the copy is whole (at most one refresh);
- *keystroke echo* of a shell on the same server (p50, p95): idle, and while the agent
  writes as much again and the archive copies it (no CPU is measured meanwhile).
  Target: unchanged (within 25 % or 0.5 ms).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from jupyter_agents.agents.archive import ConversationArchive

from .harness import REPO, BenchServer, Flavor, Mode, median, percentile, workdir
from .latency import time_keys
from .report import Row

#: how fast the agent writes its conversation (MB/s); real agents write KB/s
RATE = 2.0
#: the server's refresh interval (its default)
REFRESH = 5.0
TARGET_MS_PER_MB = 20.0
FAKE_AGENT = REPO / "tests" / "fakes" / "fake_agent.py"
#: the agent: appends ~1 KiB JSON records to argv[1] at argv[2] MB/s until argv[3] bytes
WRITER = """
import json, sys, time
path, rate, total = sys.argv[1], float(sys.argv[2]) * 1e6, int(sys.argv[3])
text = "x" * 900
written, t0, n = 0, time.monotonic(), 0
with open(path, "a") as f:
    while written < total:
        line = json.dumps({"type": "assistant", "message": {"role": "assistant",
            "content": [{"type": "text", "text": f"record {n} {text}"}]}}) + "\\n"
        f.write(line)
        f.flush()
        written += len(line)
        n += 1
        ahead = written / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
"""


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def fake_claude_env(work: Path) -> dict[str, str]:
    """A PATH whose ``claude`` is the fake CLI, and a private HOME."""
    bin_dir, home = work / "bin", work / "home"
    bin_dir.mkdir()
    home.mkdir()
    script = bin_dir / "claude"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_AGENT}" claude "$@"\n')
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}


def archived_whole(state_dir: Path, sid: str) -> Path | None:
    """The source file once the archive holds all of it."""
    archive = ConversationArchive(state_dir)
    kept = archive.index(sid).kept()
    if not kept:
        return None
    source, copy = Path(kept[0].source), archive.folder(sid) / kept[0].name
    try:
        same = copy.stat().st_size == source.stat().st_size
    except OSError:
        return None
    return source if same else None


def _wait(check: object, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while True:
        result = check() if callable(check) else None
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError("the archive did not catch up")
        time.sleep(0.05)


def measure(flavor: Flavor, mode: Mode) -> dict[str, float]:
    total = mode.archive_mb * 1_000_000
    with workdir(f"arch{flavor.name}") as work:
        srv = BenchServer(flavor, work, (f"--AgentsApp.refresh_interval={REFRESH}",))
        srv.proc.extra_env.update(fake_claude_env(work))
        srv.start()
        try:
            shell = srv.create_terminal()
            status, agent = srv.proc.request(
                "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(work)}
            )
            if status != 201:
                raise RuntimeError(f"could not start the agent: {agent}")
            srv.proc.type_line(agent["name"], "bench-prompt", "claude heard: bench-prompt")
            source = _wait(lambda: archived_whole(srv.state_dir, agent["id"]), 3 * REFRESH)
            assert isinstance(source, Path)
            server = srv.server_process()
            seconds = total / 1e6 / RATE

            def grow() -> subprocess.Popen[bytes]:
                return subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(source), str(RATE), str(total)]
                )

            # CPU: idle for as long as the writes will take, then the writes until the
            # copy is whole (nothing else going on in either)
            c0, t0 = _cpu(server), time.monotonic()
            time.sleep(seconds)
            idle_rate = (_cpu(server) - c0) / (time.monotonic() - t0)
            before = source.stat().st_size
            c0, t0 = _cpu(server), time.monotonic()
            writer = grow()
            writer.wait()
            last_write = time.monotonic()
            _wait(lambda: archived_whole(srv.state_dir, agent["id"]), 3 * REFRESH)
            done = time.monotonic()
            cpu = _cpu(server) - c0 - idle_rate * (done - t0)
            archived = source.stat().st_size - before

            # echo: idle, then while the agent writes again and the archive copies it
            client = srv.ready_shell(shell)
            try:
                idle_echo: list[float] = []
                t0 = time.monotonic()
                while time.monotonic() - t0 < seconds:
                    time_keys(client, flavor.name, 50, warmup=0, samples=idle_echo)
                busy_echo: list[float] = []
                writer = grow()
                while writer.poll() is None:
                    time_keys(
                        client,
                        flavor.name,
                        50,
                        warmup=0,
                        active=lambda: writer.poll() is None,
                        samples=busy_echo,
                    )
                _wait(lambda: archived_whole(srv.state_dir, agent["id"]), 3 * REFRESH)
            finally:
                client.close()
        finally:
            srv.stop()
    return {
        "ms_per_mb": 1000 * max(cpu, 0.0) / (archived / 1e6),
        "lag": done - last_write,
        "mb": archived / 1e6,
        "idle_p50": 1000 * percentile(idle_echo, 0.50),
        "idle_p95": 1000 * percentile(idle_echo, 0.95),
        "busy_p50": 1000 * percentile(busy_echo, 0.50),
        "busy_p95": 1000 * percentile(busy_echo, 0.95),
    }


def _unchanged(busy: float, idle: float) -> bool:
    return busy <= max(1.25 * idle, idle + 0.5)


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    ours = [f for f in flavors if f.ours]
    if mode.name == "quick":
        ours = ours[:1]
    runs = {f.name: [measure(f, mode) for _ in range(mode.runs)] for f in ours}
    fig = {name: {k: median([r[k] for r in rs]) for k in rs[0]} for name, rs in runs.items()}
    names = list(fig)
    mb = median([f["mb"] for f in fig.values()])
    write = f"an agent appends {mb:.0f} MB to its conversation at {RATE:g} MB/s"
    rows = [
        Row(
            "12",
            f"conversation archive: server CPU per MB archived ({write})",
            "ms/MB",
            {"stock": None, **{n: fig[n]["ms_per_mb"] for n in names}},
            target=f"<= {TARGET_MS_PER_MB:g} ms/MB",
            verdict={n: fig[n]["ms_per_mb"] <= TARGET_MS_PER_MB for n in names},
            ratio=False,
            note="stock has no archive; CPU of the Jupyter server process beyond its idle "
            f"rate, until the copy is whole (refresh every {REFRESH:g} s)",
        ),
        Row(
            "12",
            "conversation archive: lag from the agent's last write to a whole copy",
            "s",
            {"stock": None, **{n: fig[n]["lag"] for n in names}},
            target=f"<= {REFRESH + 1:g} s",
            verdict={n: fig[n]["lag"] <= REFRESH + 1 for n in names},
            ratio=False,
        ),
    ]
    for q in ("p50", "p95"):
        rows.append(
            Row(
                "12",
                f"keystroke echo {q}, idle -> while {write} and the archive copies it",
                "ms",
                {"stock": None, **{n: fig[n][f"busy_{q}"] for n in names}},
                target="unchanged (<= 1.25x idle or +0.5 ms)",
                verdict={n: _unchanged(fig[n][f"busy_{q}"], fig[n][f"idle_{q}"]) for n in names},
                ratio=False,
                note="idle: " + ", ".join(f"{n} {fig[n][f'idle_{q}']:.2f} ms" for n in names),
            )
        )
    print(json.dumps({"archive": fig}, indent=1), file=sys.stderr)
    return rows
