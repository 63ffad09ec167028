"""9. Idle cost of keeping browsers up to date: a server with N sessions and nothing
happening; CPU of the Jupyter server process over a quiet window, three ways:

- no client at all (the reference);
- 5 websocket clients subscribed to ``/api/events/subscribe``, as 5 JupyterLab tabs of
  the second design are (they are shown session events; checked first: each client gets
  the events of a terminal created and deleted before the window);
- 5 clients each polling ``GET /api/agents/sessions`` once a second, as the sessions
  panel did before the second design ("old panel").

CPU is user + system seconds of the server process over the window, as % of a core; the
tmux server (or broker) is given in the note.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

from jupyter_agents.core.events import SCHEMA_ID

from .harness import (
    BenchServer,
    Flavor,
    Mode,
    cpu_seconds,
    each_with_sessions,
)
from .report import Row

if TYPE_CHECKING:
    import websocket

TARGET_CPU = 0.3
CLIENTS = 5
POLL_S = 1.0
POLL_PATH = "/api/agents/sessions"


def idle_cpu(srv: BenchServer, seconds: float) -> tuple[float, float]:
    """% of a core the server process and the backend's owner process used over the
    next ``seconds``."""
    groups = srv.helper_processes()
    server, owner = groups["server"], groups["owner"]
    s0, o0, t0 = cpu_seconds(server), cpu_seconds(owner), time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return 100 * (cpu_seconds(server) - s0) / wall, 100 * (cpu_seconds(owner) - o0) / wall


def session_events(ws: websocket.WebSocket, quiet: float, enough: int | None = None) -> int:
    """How many session events ``ws`` receives until nothing comes for ``quiet`` s (or
    ``enough`` came)."""
    import websocket

    count = 0
    ws.settimeout(quiet)
    while enough is None or count < enough:
        try:
            event = json.loads(ws.recv())
        except websocket.WebSocketTimeoutException:
            break
        count += event.get("schema_id") == SCHEMA_ID
    return count


@contextmanager
def subscribers(srv: BenchServer, n: int) -> Iterator[Callable[[], int]]:
    """``n`` clients of ``/api/events/subscribe``, checked to receive session events;
    yields a function that counts the session events they got since."""
    clients = [srv.events_client() for _ in range(n)]
    try:
        srv.delete_terminal(srv.create_terminal())
        for ws in clients:  # created, then status (killed or exited)
            if session_events(ws, 10, enough=2) < 2:
                raise RuntimeError("an events subscriber did not get the session events")
        for ws in clients:  # anything else they brought
            session_events(ws, 0.1)

        yield lambda: sum(session_events(ws, 0.1) for ws in clients)
    finally:
        for ws in clients:
            ws.close()


@contextmanager
def pollers(srv: BenchServer, n: int) -> Iterator[Callable[[], int]]:
    """``n`` threads each calling ``GET POLL_PATH`` every ``POLL_S`` seconds; yields a
    function that counts the calls made so far."""
    stop = threading.Event()
    calls = [0] * n

    def poll(i: int) -> None:
        tick = time.monotonic() + i * POLL_S / n  # spread, like independent tabs
        while not stop.wait(max(0.0, tick - time.monotonic())):
            srv.request("GET", POLL_PATH)
            calls[i] += 1
            tick += POLL_S

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(poll, i) for i in range(n)]
        try:
            yield lambda: sum(calls)
        finally:
            stop.set()
            for f in futures:
                f.result()


def measure(srv: BenchServer, mode: Mode) -> dict[str, float]:
    seconds = mode.events_seconds
    time.sleep(mode.settle)
    out: dict[str, float] = {}
    out["none"], out["none_owner"] = idle_cpu(srv, seconds)
    with subscribers(srv, CLIENTS) as received:
        time.sleep(mode.settle)
        out["events"], out["events_owner"] = idle_cpu(srv, seconds)
        out["events_received"] = received()
    time.sleep(mode.settle)
    with pollers(srv, CLIENTS) as polls:
        out["polls"], out["polls_owner"] = idle_cpu(srv, seconds)
        out["polls_made"] = polls()
    return out


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    res = each_with_sessions(flavors, mode, measure)

    def pct(key: str) -> dict[str, float | None]:
        return {f: r[key] for f, r in res.items()}

    def owners(key: str) -> str:
        return ", ".join(f"{f} {r[f'{key}_owner']:.2f} %" for f, r in res.items())

    n, s = mode.api_sessions, mode.events_seconds
    events = pct("events")
    return [
        Row("9", f"idle server CPU, {n} sessions, {CLIENTS} event subscribers, {s:g} s", "%",
            events, target=f"<= {TARGET_CPU} % of a core",
            verdict={f: (events[f] or 0) <= TARGET_CPU for f in res}, ratio=False,
            note="Jupyter server process only; tmux server / broker: " + owners("events")
            + "; session events received in the window: "
            + ", ".join(f"{f} {r['events_received']:.0f}" for f, r in res.items())),
        Row("9", "  same, no client (reference)", "%", pct("none"), ratio=False,
            note="tmux server / broker: " + owners("none")),
        Row("9", f"  same, {CLIENTS} pollers of GET {POLL_PATH} every {POLL_S:g} s (old panel)",
            "%", pct("polls"), ratio=False,
            note="tmux server / broker: " + owners("polls") + "; calls made: "
            + ", ".join(f"{f} {r['polls_made']:.0f}" for f, r in res.items())),
    ]  # fmt: skip
