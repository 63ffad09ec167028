"""Instruments a Jupyter server from inside (group 13): how long every IO-loop callback
takes, which of them are jupyter_agents', and the CPU its usage ledger spends.

The benchmark starts the server with a ``sitecustomize.py`` (:func:`sitecustomize`)
that calls :func:`install` when ``$BENCH_LOOPWATCH`` names a file: every
``asyncio.Handle`` run is timed (wall-clock and the loop thread's CPU time: about a
microsecond each), and one of
jupyter_agents' (a step of one of its tasks, a method of one of its objects, one of its
functions, or the two calls the live terminals make into
:class:`~jupyter_agents.server.activity.Attendance` from tornado's websocket task) counts as
ours. The thread CPU time of ``Refresh.read_usage`` and ``UnattendedGuard.check``
(the cost tracking: they run in worker threads) and the records they read are summed.
The figures go to that file as JSON twice a second; a file of the same name ending in
``.reset`` (:func:`reset`) sets them back to zero.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import time
from asyncio import events
from pathlib import Path
from typing import Any

#: a callback slower than this is counted as slow
SLOW = 0.001


class Stats:
    """What :func:`install` collects (see :meth:`dump`)."""

    def __init__(self) -> None:
        self.callbacks = 0
        self.slow = 0
        self.longest = 0.0
        self.ours = 0
        self.ours_slow = 0
        self.ours_longest = 0.0
        self.ours_longest_what = ""
        #: the same, in CPU time of the loop's thread (a callback preempted by another
        #: process takes longer than it runs)
        self.ours_cpu_slow = 0
        self.ours_cpu_longest = 0.0
        self.ledger_cpu = 0.0
        self.ledger_calls = 0
        self.records = 0
        self.lock = threading.Lock()

    def dump(self) -> dict[str, Any]:
        return {
            "callbacks": self.callbacks,
            "slow": self.slow,
            "longest": self.longest,
            "ours": self.ours,
            "ours_slow": self.ours_slow,
            "ours_longest": self.ours_longest,
            "ours_longest_what": self.ours_longest_what,
            "ours_cpu_slow": self.ours_cpu_slow,
            "ours_cpu_longest": self.ours_cpu_longest,
            "ledger_cpu": self.ledger_cpu,
            "ledger_calls": self.ledger_calls,
            "records": self.records,
            "time": time.time(),
        }


def _owner(callback: Any) -> str:
    """Where a callback's code lives (a file or a module name)."""
    bound = getattr(callback, "__self__", None)
    if isinstance(bound, asyncio.Task):
        code = getattr(bound.get_coro(), "cr_code", None)
        return f"{code.co_filename}:{code.co_qualname}" if code is not None else ""
    if isinstance(callback, functools.partial):
        return _owner(callback.func)
    if bound is not None:
        return f"{type(bound).__module__}.{getattr(callback, '__qualname__', '')}"
    return f"{getattr(callback, '__module__', '')}.{getattr(callback, '__qualname__', '')}"


def _ours(owner: str) -> bool:
    return "jupyter_agents" in owner


def install(path: Path) -> Stats:
    """Start timing (module docstring); the figures are written to ``path``."""
    stats = Stats()
    run = events.Handle._run

    def timed_run(handle: events.Handle) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        run(handle)
        took, cpu = time.perf_counter() - t0, time.thread_time() - c0
        stats.callbacks += 1
        stats.longest = max(stats.longest, took)
        if took > SLOW:
            stats.slow += 1
        owner = _owner(handle._callback)  # type: ignore[attr-defined]
        if _ours(owner):
            note(owner, took, cpu)

    def note(owner: str, took: float, cpu: float) -> None:
        stats.ours += 1
        if took > SLOW:
            stats.ours_slow += 1
        if took > stats.ours_longest:
            stats.ours_longest, stats.ours_longest_what = took, owner
        if cpu > SLOW:
            stats.ours_cpu_slow += 1
        stats.ours_cpu_longest = max(stats.ours_cpu_longest, cpu)

    events.Handle._run = timed_run  # type: ignore[method-assign,assignment]

    from jupyter_agents.server import activity, unattended
    from jupyter_agents.sessions import refresh

    def on_loop(fn: Any) -> Any:
        """Time a method the live terminals call on the loop (inside tornado's task)."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                took, cpu = time.perf_counter() - t0, time.thread_time() - c0
                note(f"jupyter_agents.server.activity.Attendance.{fn.__name__}", took, cpu)

        return timed

    def in_thread(fn: Any) -> Any:
        """Sum the thread CPU of a blocking cost-tracking step."""

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            result = fn(*args, **kwargs)
            took = time.thread_time() - t0
            with stats.lock:
                stats.ledger_cpu += took
                stats.ledger_calls += 1
                if isinstance(result, dict):
                    stats.records += sum(getattr(c, "records", 0) for c in result.values())
            return result

        return counted

    activity.Attendance.viewers = on_loop(activity.Attendance.viewers)  # type: ignore[method-assign]
    activity.Attendance.human_input = on_loop(activity.Attendance.human_input)  # type: ignore[method-assign]
    refresh.Refresh.read_usage = in_thread(refresh.Refresh.read_usage)  # type: ignore[method-assign]
    unattended.UnattendedGuard.check = in_thread(unattended.UnattendedGuard.check)  # type: ignore[method-assign]

    def write() -> None:
        while True:
            reset = path.with_suffix(".reset")
            if reset.exists():  # the window measured starts: counts from zero
                stats.__init__()  # type: ignore[misc]
                reset.unlink()
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(stats.dump()))
            os.replace(tmp, path)
            time.sleep(0.5)

    threading.Thread(target=write, name="bench-loopwatch", daemon=True).start()
    return stats


def sitecustomize() -> str:
    """The ``sitecustomize.py`` that installs the watch in a server started with
    ``$BENCH_LOOPWATCH`` set."""
    return (
        "import os\n"
        "if os.environ.get('BENCH_LOOPWATCH'):\n"
        "    from pathlib import Path\n"
        "    from bench import loopwatch\n"
        "    loopwatch.install(Path(os.environ['BENCH_LOOPWATCH']))\n"
    )


def reset(path: Path) -> None:
    """Ask the server's watch to count from zero (within half a second)."""
    path.with_suffix(".reset").touch()


def read(path: Path) -> dict[str, Any]:
    """The last figures written (empty before the first)."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}
