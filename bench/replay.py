"""6. Replay on (re)connect: a terminal that printed ``lines`` coloured lines; a new
websocket client connects and we time the handshake until the last replayed byte,
and measure how much arrives and how many of the lines it contains.

Ours replays tmux's rendered history + screen (one message); stock replays terminado's
buffer of the last 1000 raw read chunks (one message per chunk)."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

from .harness import BenchServer, median, recv_stdout
from .report import Row

LINE = re.compile(r"line (\d{5}) ")
QUIET = 0.5


def make_history_file(path: Path, lines: int) -> Path:
    """``lines`` lines of ~80 columns with SGR colours (so the replay carries escapes)."""
    with open(path, "w") as f:
        for i in range(1, lines + 1):
            f.write(f"\x1b[3{i % 8}mline {i:05d} \x1b[0m" + "abcdefghij" * 6 + f" {i:05d}\n")
    return path


@dataclasses.dataclass
class Replay:
    seconds: float
    bytes: int
    messages: int
    lines: int  # distinct history lines present in the replay


def prepare(srv: BenchServer, path: Path, lines: int) -> str:
    """A terminal that has printed ``path``; returns its name (no client connected)."""
    name = srv.create_terminal()
    client = srv.ready_shell(name)
    try:
        client.stdin(f"cat {path}; echo _$((6*7))_:\r")
        client.wait_for("_42_:", timeout=120)
        client.drain(0.3)
    finally:
        client.close()
    time.sleep(0.3)  # let the server release the stream
    return name


def measure(srv: BenchServer, name: str) -> Replay:
    """Connect a new client to ``name`` and time its replay."""
    t0 = time.perf_counter()
    client = srv.ws(name)
    try:
        parts: list[str] = []
        last = t0
        while (text := recv_stdout(client, QUIET if parts else 30)) is not None:
            parts.append(text)
            last = time.perf_counter()
        replay = "".join(parts)
        return Replay(
            seconds=last - t0,
            bytes=len(replay.encode()),
            messages=len(parts),
            lines=len(set(LINE.findall(replay))),
        )
    finally:
        client.close()
        time.sleep(0.2)


def rows(results: dict[str, list[Replay]], lines: int, ours: list[str]) -> list[Row]:
    t = {f: 1000 * median([r.seconds for r in rs]) for f, rs in results.items()}
    size = {f: median([r.bytes for r in rs]) / 1024 for f, rs in results.items()}
    kept = {f: float(median([r.lines for r in rs])) for f, rs in results.items()}
    msgs = ", ".join(f"{f} {median([r.messages for r in rs]):.0f}" for f, rs in results.items())
    n = len(next(iter(results.values())))
    first = {f: 1000 * rs[0].seconds for f, rs in results.items()}
    return [
        Row("6", f"replay time, {lines:,} lines of history", "ms", dict(t),
            note=f"connect to last replayed byte, median of {n}; messages: {msgs}"),
        Row("6", "  the first viewer after the output", "ms", dict(first),
            note="one connect, 0.6 s after the output ended; tmux: the viewers after it "
            "reuse its older history while the terminal prints nothing (history.py)"),
        Row("6", "replay size", "KiB", dict(size)),
        Row("6", f"history lines in the replay (of {lines:,})", "count", dict(kept)),
    ]  # fmt: skip
