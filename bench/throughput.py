"""1. Output throughput: a file of base64 text ``cat`` in a terminal, timed from the
command being sent until a websocket client has received all of it (an end marker
printed after it). Compared with a bare pty read loop, the physical limit here."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .harness import BenchServer, read_until
from .report import Row

#: printed after the payload; ``_`` and ``:`` never occur in base64, and the typed
#: command line shows ``$((6*7))``, not the marker
MARKER = "_42_:"
COMMAND = "cat {path}; echo _$((6*7))_:\r"


def ws_seconds(srv: BenchServer, name: str, path: Path, timeout: float = 600) -> float:
    """Seconds for ``path`` to reach a websocket client of terminal ``name``."""
    client = srv.ready_shell(name)
    try:
        t0 = time.perf_counter()
        client.stdin(COMMAND.format(path=path))
        received = read_until(client, MARKER, timeout)
        elapsed = time.perf_counter() - t0
        if received < path.stat().st_size:
            raise RuntimeError(f"{srv.flavor.name}: got {received} chars of {path.stat().st_size}")
        return elapsed
    finally:
        client.close()


def bare_pty_seconds(path: Path) -> float:
    """Seconds for ``cat path`` on a fresh pty, read by a plain ``os.read`` loop."""
    master, slave = os.openpty()
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            ["cat", str(path)], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        slave = -1
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the other side closed
                break
        proc.wait()
        return time.perf_counter() - t0
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def rows(mb_per_s: dict[str, list[float]], size_mb: float, ours: list[str]) -> list[Row]:
    """``mb_per_s`` maps ``bare``/``stock``/our flavors to per-run MB/s."""
    from .harness import median

    values: dict[str, float | None] = {k: median(v) for k, v in mb_per_s.items()}
    stock = values.get("stock")
    verdict = {f: bool(stock and (values[f] or 0) >= stock) for f in ours if f in values}
    floor = {f: bool(stock and (values[f] or 0) >= 0.8 * stock) for f in ours if f in values}
    bare = values.get("bare")
    note = ", ".join(
        f"{k} {v / bare:.2f}x bare" for k, v in values.items() if k != "bare" and v and bare
    )
    if any(not v for v in floor.values()):
        note += "; BELOW the 0.8x floor"
    return [
        Row(
            "1",
            f"throughput, {size_mb:g} MB base64 to a websocket client",
            "MB/s",
            values,
            target=">= 1.0x stock (never < 0.8x)",
            verdict=verdict,
            note=note + f" (median of {len(next(iter(mb_per_s.values())))})",
        )
    ]
