"""Process identity and the one place that signals processes.

A pid alone names nothing durable: pids are reused. A process is identified by its pid
*and* its create time, and :func:`terminate_tree` refuses to signal a pid whose create
time differs from the recorded one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from jupyter_agents.core.records import Status

#: create times are floats from /proc; allow for rounding through the store
_CREATE_TIME_TOLERANCE = 0.01


@dataclasses.dataclass(frozen=True)
class ProcessIdentity:
    """A process as recorded: pid plus create time (seconds since the epoch)."""

    pid: int
    created: float


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the live process ``pid``, or None if there is none."""
    try:
        return ProcessIdentity(pid, psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def matches(identity: ProcessIdentity) -> psutil.Process | None:
    """The live process if ``identity`` still names it (same pid *and* create time)."""
    try:
        proc = psutil.Process(identity.pid)
        if abs(proc.create_time() - identity.created) > _CREATE_TIME_TOLERANCE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def terminate_tree(identity: ProcessIdentity, grace: float = 3.0) -> bool:
    """End the process ``identity`` names and all its descendants.

    Sends SIGHUP and SIGTERM (a terminal closing: interactive shells ignore SIGTERM but
    not SIGHUP), waits up to ``grace`` seconds, then SIGKILLs what is left. Does nothing
    and returns False when the identity no longer matches a live process (exited, or the
    pid was reused); returns True when it signalled the tree. Blocking: call it from a
    thread in async code.
    """
    root = matches(identity)
    if root is None:
        return False
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for sig in (signal.SIGHUP, signal.SIGCONT, signal.SIGTERM):
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)
    alive = _wait_gone(procs, grace)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()  # psutil re-checks the process identity before signalling
    _wait_gone(alive, grace)
    return True


def ended_within(identity: ProcessIdentity, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the process ``identity`` names to end; whether
    it did (or was gone already). Blocking."""
    proc = matches(identity)
    return proc is None or not _wait_gone([proc], timeout)


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a zombie has ended; only its parent can reap it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` seconds for ``procs`` to end; returns those still running."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _running(p)]
    return alive


def socket_holders(path: str) -> list[ProcessIdentity]:
    """The live processes that hold the unix socket bound at ``path`` (a server's
    listening socket, and the connections it accepted there), of those this user may
    inspect; [] where the system does not tell (macOS without root, say). Blocking
    (reads every process's file descriptors)."""
    try:
        connections = psutil.net_connections(kind="unix")
    except (psutil.AccessDenied, NotImplementedError, OSError):
        return []
    pids: set[int] = set()
    for c in connections:
        if isinstance(c.laddr, str) and c.laddr == path and c.pid is not None:
            pids.add(c.pid)
    return [i for i in map(identify, sorted(pids)) if i is not None]


def children_map() -> dict[int, list[int]]:
    """ppid -> child pids of every process now (one pass over the process table)."""
    tree: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["pid", "ppid"]):
        tree.setdefault(proc.info["ppid"] or 0, []).append(proc.info["pid"])
    return tree


def descendants(pid: int, tree: dict[int, list[int]]) -> list[int]:
    """``pid``'s descendants in ``tree`` (from :func:`children_map`), breadth first."""
    found, queue = [], list(tree.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(tree.get(child, []))
    return found


#: variable every session's processes inherit: ``<session id>@<state dir>``; it marks the
#: processes a session started, even after they left its process tree (daemons)
SESSION_MARKER = "JUPYTER_AGENTS_SESSION"


def session_marker(session_id: str, state_dir: str) -> str:
    """The value of :data:`SESSION_MARKER` for a session."""
    return f"{session_id}@{state_dir}"


@dataclasses.dataclass(frozen=True)
class MarkedProcess:
    """A live process carrying a session marker of one state dir."""

    identity: ProcessIdentity
    session_id: str
    cmdline: list[str]


def marked_processes(state_dir: str) -> Iterator[MarkedProcess]:
    """Every live process of this user whose environment carries a :data:`SESSION_MARKER`
    of ``state_dir`` (processes of other users cannot be read, and are never ours)."""
    suffix = "@" + state_dir
    for proc in psutil.process_iter(["pid", "create_time"]):
        try:
            value = proc.environ().get(SESSION_MARKER, "")
            if not value.endswith(suffix):
                continue
            yield MarkedProcess(
                ProcessIdentity(proc.pid, proc.info["create_time"]),
                value[: -len(suffix)],
                proc.cmdline(),
            )
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue


def stale_processes(
    state_dir: str, live: set[str], records: dict[str, Status]
) -> list[MarkedProcess]:
    """Processes started by sessions that no longer run (e.g. an agent's background
    daemon that outlived a backend crash): marked with a session id of ``state_dir``
    that is not ``live`` in its backend, or whose record (``records``: id -> status) is
    missing or neither running nor orphaned. This process and its ancestors are never
    listed. Blocking (reads every process's environment)."""
    me = psutil.Process()
    ours = {me.pid, *(p.pid for p in me.parents())}  # never this process or its callers
    return [
        m
        for m in marked_processes(state_dir)
        if m.identity.pid not in ours
        and (m.session_id not in live or records.get(m.session_id) not in ("running", "orphaned"))
    ]


#: how often :func:`on_exit` checks where the kernel cannot tell (neither pidfd nor kqueue)
EXIT_CHECK_INTERVAL = 1.0


def on_exit(pid: int, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` once (on the running loop) when process ``pid`` ends, or at
    once if there is none; returns the function that stops watching.

    The kernel says when: a pidfd on Linux (5.3+), kqueue's ``NOTE_EXIT`` on macOS and
    the BSDs; nothing polls. Elsewhere the process is checked every
    :data:`EXIT_CHECK_INTERVAL` seconds. A pid can be reused: callers look at the process
    (a tmux pane's, say) once more after subscribing.
    """
    loop = asyncio.get_running_loop()
    done = False

    def fire() -> None:
        nonlocal done
        if not done:
            done = True
            cancel()
            callback()

    fd = -1
    kq: Any = None  # select.kqueue, which Linux's select lacks
    handle: asyncio.TimerHandle | None = None
    try:
        if hasattr(os, "pidfd_open"):
            fd = os.pidfd_open(pid)
        elif hasattr(select, "kqueue"):
            kq = select.kqueue()
            sel: Any = select
            event = sel.kevent(
                pid, sel.KQ_FILTER_PROC, sel.KQ_EV_ADD | sel.KQ_EV_ONESHOT, sel.KQ_NOTE_EXIT
            )
            kq.control([event], 0, 0)
            fd = kq.fileno()
    except ProcessLookupError:  # gone already (``fire`` would find nothing to cancel)
        return loop.call_soon(callback).cancel
    except OSError:  # no pidfd in this kernel: check instead
        fd = -1

    def check() -> None:
        nonlocal handle
        if psutil.pid_exists(pid):
            handle = loop.call_later(EXIT_CHECK_INTERVAL, check)
        else:
            fire()

    def cancel() -> None:
        if fd >= 0:
            loop.remove_reader(fd)
            if kq is not None:
                kq.close()
            else:
                os.close(fd)
        if handle is not None:
            handle.cancel()

    if fd >= 0:
        loop.add_reader(fd, fire)
    else:
        handle = loop.call_later(EXIT_CHECK_INTERVAL, check)

    def stop() -> None:
        nonlocal done
        if not done:
            done = True
            cancel()

    return stop
