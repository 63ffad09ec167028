"""Idle cost of N terminals: CPU of the Jupyter server (+ its control-mode clients) and
of the tmux server while N terminals sit idle with a websocket client each.

Usage: python bench/idle_cpu.py [N] [SECONDS]. Prints one line of figures.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

from jupyter_agents.pytest_plugin import ServerProcess, kill_tmux_server


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def main(n: int = 50, seconds: float = 30.0) -> None:
    work = Path(tempfile.mkdtemp(prefix="ja-bench-"))
    server = ServerProcess(work / "st", work).start()
    try:
        for _ in range(n):
            server.request("POST", "/api/terminals", {})
        clients = [server.ws(str(i)) for i in range(1, n + 1)]
        for c in clients:
            c.wait_for(lambda c: len(c.messages) >= 2)
        time.sleep(2)  # let start-up settle
        assert server.proc is not None
        jupyter = psutil.Process(server.proc.pid)
        ours = [jupyter, *jupyter.children(recursive=True)]
        tmux = [p for p in psutil.process_iter(["cmdline"])
                if p.info["cmdline"] and p.info["cmdline"][0] == "tmux"
                and str(work) in " ".join(p.info["cmdline"])
                and p not in ours]
        tmux_servers = [p for p in psutil.process_iter(["name", "ppid"])
                        if p.info["name"] == "tmux: server"]
        before = (cpu_seconds(ours), cpu_seconds(tmux_servers))
        time.sleep(seconds)
        after = (cpu_seconds(ours), cpu_seconds(tmux_servers))
        rss_clients = sum(p.memory_info().rss for p in ours[1:]) / n / 1024
        print(
            f"{n} idle terminals over {seconds:.0f}s: jupyter server + {len(ours) - 1} "
            f"control clients {100 * (after[0] - before[0]) / seconds:.2f}% CPU, "
            f"tmux server {100 * (after[1] - before[1]) / seconds:.2f}% CPU; "
            f"control-client RSS {rss_clients:.0f} KiB per viewed terminal "
            f"({len(tmux)} stray tmux clients)"
        )
        for c in clients:
            c.close()
    finally:
        server.stop(signal.SIGKILL)
        kill_tmux_server(work / "st")


if __name__ == "__main__":
    main(*(float(a) if i else int(a) for i, a in enumerate(sys.argv[1:])))  # type: ignore[arg-type]
