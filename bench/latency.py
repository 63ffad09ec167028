"""2. Keystroke echo latency: one character at a time sent as ``["stdin", c]``, timed
until a ``stdout`` frame with its echo arrives (bash's readline echoes it). The line
is cleared (Ctrl-U, untimed) every 50 keys so it never wraps.

Also under flood: the same keys timed in one terminal while another terminal of the
same server prints N MB (``head -c ... /dev/zero | base64``) to a websocket client that
reads everything as fast as it can, like a browser tab. That client runs in a forked
child process: as a thread of the measuring process its GIL would delay the echo client
and be counted as server latency. Only keys whose echo arrives while the flood still
runs are counted; then the flood is stopped (Ctrl-C) and its output drained."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import queue
import string
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from jupyter_agents.pytest_plugin import TermClient

from .harness import BenchServer, percentile, recv_stdout
from .report import Row

WARMUP = 20
LINE = 50
#: warm-up keys under flood (the flood is finite: spend it on timed keys)
FLOOD_WARMUP = 5
#: an echo slower than this under flood ends that run's keys (recorded as this value)
FLOOD_ECHO_TIMEOUT = 30.0
#: printed when the flood command completes; ``_`` and ``:`` never occur in base64 and
#: the typed command line shows ``$((6*5))``, not the marker
FLOOD_DONE = "_30_:"
FLOOD_COMMAND = "head -c {n} /dev/zero | base64 -w 100; echo _$((6*5))_:\r"
#: typed after Ctrl-C; its output is the last thing of the flood terminal
DRAINED = "_42_:"
DRAIN_COMMAND = "echo _$((6*7))_:\r"


def echo_latencies(srv: BenchServer, name: str, keys: int) -> list[float]:
    """Seconds from sending each of ``keys`` characters to receiving its echo."""
    client = srv.ready_shell(name)
    try:
        return time_keys(client, srv.flavor.name, keys)
    finally:
        client.close()


def time_keys(
    client: TermClient,
    label: str,
    keys: int,
    warmup: int = WARMUP,
    active: Callable[[], bool] | None = None,
    timeout: float = 5.0,
    samples: list[float] | None = None,
) -> list[float]:
    """Echo latencies (seconds) of ``keys`` keys typed into the shell of ``client``
    after ``warmup`` untimed ones; appended to ``samples`` if given. With ``active``,
    stops as soon as it returns False after an echo (that key is not counted)."""
    letters = string.ascii_lowercase
    samples = [] if samples is None else samples
    for i in range(warmup + keys):
        if i % LINE == 0:
            client.stdin("\x15")  # readline: kill the line
            client.drain(0.1)
        ch = letters[i % len(letters)]
        frame = json.dumps(["stdin", ch])
        t0 = time.perf_counter()
        client.ws.send(frame)
        while True:
            text = recv_stdout(client, timeout)
            if text is None:
                raise TimeoutError(f"{label}: no echo of {ch!r}")
            if ch in text:
                break
        took = time.perf_counter() - t0
        if active is not None and not active():
            break
        if i >= warmup:
            samples.append(took)
    client.stdin("\x15")
    return samples


@dataclasses.dataclass
class Flood:
    """Echo latencies of one run under flood, and what the flood did meanwhile."""

    samples: list[float]
    #: MB/s the flood's client received while the keys were timed
    mb_per_s: float
    #: the flood completed (its client got all of it) before the keys did
    ended_early: bool
    #: an echo took longer than FLOOD_ECHO_TIMEOUT (the last sample is that timeout)
    timed_out: bool
    #: the flood terminal's output ended (Ctrl-C, then a marker) within the time allowed
    drained: bool


def _flood_reader(
    srv: BenchServer,
    name: str,
    size_mb: int,
    go: Event,
    events: tuple[Event, Event, Event, Event],
    out: Queue[object],
) -> None:
    """In the child: a client of terminal ``name`` that starts the flood on ``go``,
    sets ``streaming`` once its output streams, ``ended`` when the flood has
    completed, reads everything until ``stop``, then interrupts the flood and drains
    it. Puts a dict of figures (or an error text) on ``out``; sets ``waited`` when the
    parent need wait no longer for ``streaming`` (it streams, or the child failed)."""
    waited, streaming, ended, stop = events
    try:
        client = srv.ready_shell(name)
        try:
            if not go.wait(120):
                raise TimeoutError("never told to start")
            # base64 prints 4 characters per 3 bytes: size_mb MB of text (plus newlines)
            client.stdin(FLOOD_COMMAND.format(n=size_mb * 750_000))
            warm = min(1_000_000, size_mb * 100_000)
            out.put(_read_flood(client, warm, (waited, streaming, ended, stop)))
        finally:
            client.close()
    except Exception as e:
        out.put(f"{type(e).__name__}: {e}")
    finally:
        waited.set()


def _read_flood(
    client: TermClient, warm: int, events: tuple[Event, Event, Event, Event]
) -> dict[str, float]:
    waited, streaming, ended, stop = events
    total, tail = 0, ""
    t_start = t_stop = 0.0
    at_start = at_stop = -1
    early = drained = False
    deadline = time.monotonic() + 900
    last_frame = time.monotonic()
    while time.monotonic() < deadline:
        if at_stop < 0 and stop.is_set():
            t_stop, at_stop = time.perf_counter(), total
            early = ended.is_set()
            client.stdin("\x03")  # SIGINT to the flood (bash drops the rest of the line)
            time.sleep(0.2)
            client.stdin(DRAIN_COMMAND)
        text = recv_stdout(client, 0.1)
        if text is None:
            if at_stop >= 0 and time.monotonic() - last_frame > 10:
                client.stdin("\x03")  # quiet for 10 s and no marker: try again
                client.stdin(DRAIN_COMMAND)
                last_frame = time.monotonic()
            continue
        last_frame = time.monotonic()
        total += len(text)
        tail = (tail + text)[-64:]
        if at_start < 0 and (total >= warm or FLOOD_DONE in tail):
            t_start, at_start = time.perf_counter(), total
            streaming.set()
            waited.set()
        if not ended.is_set() and FLOOD_DONE in tail:
            ended.set()
        if at_stop >= 0 and DRAINED in tail:
            drained = True
            break
    seconds = t_stop - t_start if at_stop >= 0 and at_start >= 0 else 0.0
    return {
        "mb_per_s": (at_stop - at_start) / seconds / 1e6 if seconds > 0 else 0.0,
        "ended_early": float(early),
        "drained": float(drained),
    }


def under_flood(srv: BenchServer, name: str, flood_name: str, keys: int, size_mb: int) -> Flood:
    """Echo latencies of up to ``keys`` keys in terminal ``name`` while terminal
    ``flood_name`` prints ``size_mb`` MB to a client reading all of it."""
    ctx = multiprocessing.get_context("fork")
    go, waited, streaming, ended, stop = (ctx.Event() for _ in range(5))
    out: Queue[object] = ctx.Queue()
    # forked before the echo client exists: the child holds no copy of its socket
    child = ctx.Process(
        target=_flood_reader,
        args=(srv, flood_name, size_mb, go, (waited, streaming, ended, stop), out),
        daemon=True,
    )
    child.start()
    samples: list[float] = []
    timed_out = False
    try:
        client = srv.ready_shell(name)
        try:
            go.set()
            if not waited.wait(120):
                raise TimeoutError(f"{srv.flavor.name}: the flood did not start")
            if streaming.is_set():  # else the child failed: its error follows
                try:
                    time_keys(client, srv.flavor.name, keys, FLOOD_WARMUP,
                              lambda: not ended.is_set(), FLOOD_ECHO_TIMEOUT, samples)  # fmt: skip
                except TimeoutError:
                    samples.append(FLOOD_ECHO_TIMEOUT)
                    timed_out = True
        finally:
            stop.set()
            client.close()
        try:
            result = out.get(timeout=960)
        except queue.Empty:
            result = f"{srv.flavor.name}: the flood client gave no result"
    finally:
        stop.set()
        go.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
        with contextlib.suppress(Exception):
            out.close()
    if isinstance(result, str):
        raise RuntimeError(f"flood client: {result}")
    assert isinstance(result, dict)
    return Flood(
        samples,
        result["mb_per_s"],
        bool(result["ended_early"]),
        timed_out,
        bool(result["drained"]),
    )


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


def flood_rows(runs: dict[str, list[Flood]], size_mb: int, ours: list[str]) -> list[Row]:
    """``runs`` maps each flavor to one :class:`Flood` per run; figures are the median
    over runs (with samples) of each run's p50 / p99. Target (the issue's acceptance):
    p99 at most 2x stock's under the same flood."""
    from .harness import median

    out = []
    for q in (0.5, 0.99):
        values: dict[str, float | None] = {}
        for f, rs in runs.items():
            per_run = [percentile(r.samples, q) for r in rs if r.samples]
            values[f] = 1000 * median(per_run) if per_run else None
        out.append(
            Row("2", f"echo latency p{int(q * 100)} while another terminal prints {size_mb} MB",
                "ms", values)
        )  # fmt: skip
    p99 = out[-1]
    stock = p99.values.get("stock")
    p99.target = "<= 2x stock"
    p99.verdict = {}
    for f in ours:
        if f in p99.values:
            value = p99.values[f]
            p99.verdict[f] = bool(stock and value is not None and value <= 2 * stock)
    n = len(next(iter(runs.values()), []))
    facts = [
        "keys timed while the flood ran "
        + ", ".join(f"{f} {'/'.join(str(len(r.samples)) for r in rs)}" for f, rs in runs.items()),
        "flood received by its client meanwhile "
        + ", ".join(f"{f} {median([r.mb_per_s for r in rs]):.1f} MB/s" for f, rs in runs.items()),
    ]
    for what, flag in (
        ("flood over before the keys", lambda r: r.ended_early),
        (f"an echo timed out (>{FLOOD_ECHO_TIMEOUT:g} s)", lambda r: r.timed_out),
        ("flood terminal not drained", lambda r: not r.drained),
    ):
        hit = [f for f, rs in runs.items() if any(flag(r) for r in rs)]
        if hit:
            facts.append(f"{what} in {', '.join(hit)}")
    p99.note = (
        f"median over {n} run(s) of each run's percentile; "
        + "; ".join(facts)
        + "; the flood's client reads in a child process"
    )
    return out
