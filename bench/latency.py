"""2. Keystroke echo latency: one character at a time sent as ``["stdin", c]``, timed
until a ``stdout`` frame with its echo arrives (bash's readline echoes it). The line
is cleared (Ctrl-U, untimed) every 50 keys so it never wraps."""

from __future__ import annotations

import json
import string
import time

from .harness import BenchServer, percentile, recv_stdout
from .report import Row

WARMUP = 20
LINE = 50


def echo_latencies(srv: BenchServer, name: str, keys: int) -> list[float]:
    """Seconds from sending each of ``keys`` characters to receiving its echo."""
    client = srv.ready_shell(name)
    letters = string.ascii_lowercase
    samples: list[float] = []
    try:
        for i in range(WARMUP + keys):
            if i % LINE == 0:
                client.stdin("\x15")  # readline: kill the line
                client.drain(0.1)
            ch = letters[i % len(letters)]
            frame = json.dumps(["stdin", ch])
            t0 = time.perf_counter()
            client.ws.send(frame)
            while True:
                text = recv_stdout(client, 5)
                if text is None:
                    raise TimeoutError(f"{srv.flavor.name}: no echo of {ch!r}")
                if ch in text:
                    break
            if i >= WARMUP:
                samples.append(time.perf_counter() - t0)
        client.stdin("\x15")
    finally:
        client.close()
    return samples


def rows(runs: dict[str, list[list[float]]], keys: int, ours: list[str]) -> list[Row]:
    """``runs`` maps each flavor to one list of latencies (seconds) per run; figures are
    the median over runs of each run's p50 / p99."""
    from .harness import median

    out = []
    for q, limit in ((0.5, 1.5), (0.99, 2.0)):
        values: dict[str, float | None] = {
            f: 1000 * median([percentile(r, q) for r in rs]) for f, rs in runs.items()
        }
        stock = values.get("stock")
        verdict = {
            f: bool(stock and (values[f] or 0) <= limit * stock) for f in ours if f in values
        }
        out.append(
            Row(
                "2",
                f"echo latency p{int(q * 100)}, {keys} keys",
                "ms",
                values,
                target=f"<= {limit}x stock",
                verdict=verdict,
            )
        )
    n = len(next(iter(runs.values())))
    out[-1].note = f"median over {n} run(s) of each run's percentile; includes the Python ws client"
    return out
