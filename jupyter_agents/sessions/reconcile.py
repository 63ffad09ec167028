"""Reconcile: bring the store in line with what the backends really hold.

:func:`plan` is pure: (records, live sessions, now) -> actions. :func:`apply_plan` runs it
for every backend of a state dir under the state lock, so no spawn (which holds the same
lock from "start the process" to "record it") is ever seen half-done, and two servers
reconciling at once take turns. Each backend judges only the records it owns (their
``backend`` field): a CLI configured for tmux never marks a broker session lost.
Rules (docs/design.md, "Reconcile"):

- record ``running``/``orphaned`` + live          -> keep (``reattach``: reattached)
- record ``running``/``orphaned`` + dead in backend -> ``exit`` (code kept, pane released)
- record ``running``/``orphaned`` + not in backend  -> ``interrupt``
- live + no record, or a record that says it ended -> ``orphan`` (never killed here)
- record ``killed`` + still live                    -> left alone for ``KILL_GRACE``
  seconds (a DELETE is in flight), then ``orphan``
- record that says it ended + dead in backend       -> ``release`` the backend's hold
  (e.g. a DELETE cut short by a crash after the kill); the record stays as it is

Reconcile never signals a process.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from jupyter_agents.backends import Backend, Backends
from jupyter_agents.backends.base import LiveSession
from jupyter_agents.core import clock
from jupyter_agents.core.errors import BackendUnavailable
from jupyter_agents.core.events import Changer
from jupyter_agents.core.paths import state_lock
from jupyter_agents.core.procs import identify
from jupyter_agents.core.records import Session, Status
from jupyter_agents.core.store import SessionStore

ActionKind = Literal["reattach", "exit", "interrupt", "orphan", "release"]

#: the words recorded with a session's exit: (session id, exit code) -> them, or None
ExitReason = Callable[[str, int], str | None]

#: seconds a ``killed`` record may still be live before it counts as an orphan
KILL_GRACE = 60.0


@dataclasses.dataclass(frozen=True)
class Action:
    """One decision about one session."""

    kind: ActionKind
    session_id: str
    name: str
    pid: int | None = None
    exit_code: int | None = None
    #: status of the record before (None: no record)
    was: Status | None = None

    def describe(self) -> str:
        """One log line for this decision."""
        verb = {
            "reattach": "reattached",
            "exit": f"exited (code {self.exit_code})",
            "interrupt": "interrupted (process gone; transcript kept)",
            "orphan": "orphaned (live but not recorded as running; not killed)",
            "release": "released (its process ended after its record did)",
        }[self.kind]
        return f"session {self.session_id} (terminal {self.name!r}, pid {self.pid}): {verb}"


def _age(iso: str, now: datetime) -> float:
    try:
        then = clock.parse(iso)
    except ValueError:
        return float("inf")
    return (now - then).total_seconds()


def plan(
    records: Sequence[Session],
    live: Sequence[LiveSession],
    now: datetime,
) -> list[Action]:
    """Decide what each record and each live session becomes (see module docstring).

    ``now`` must be timezone-aware (UTC). Live sessions that are dead but whose exit
    status the backend does not know yet are skipped: they are decided next time.
    """
    by_id = {s.session_id: s for s in live}
    actions: list[Action] = []
    recorded: set[str] = set()
    for rec in records:
        recorded.add(rec.id)
        cur = by_id.get(rec.id)
        if rec.status in ("running", "orphaned"):
            if cur is None:
                actions.append(Action("interrupt", rec.id, rec.name, rec.pid, was=rec.status))
            elif cur.dead:
                if cur.exit_code is not None:
                    actions.append(
                        Action("exit", rec.id, rec.name, cur.pid, cur.exit_code, was=rec.status)
                    )
            elif rec.status == "running":
                actions.append(Action("reattach", rec.id, rec.name, cur.pid, was=rec.status))
        elif cur is not None and cur.dead:
            actions.append(Action("release", rec.id, rec.name, cur.pid, was=rec.status))
        elif cur is not None and not cur.dead:
            if rec.status == "killed" and _age(rec.last_activity, now) < KILL_GRACE:
                continue
            actions.append(Action("orphan", rec.id, rec.name, cur.pid, was=rec.status))
    for cur in live:
        if cur.session_id not in recorded:
            actions.append(Action("orphan", cur.session_id, cur.session_id, cur.pid, cur.exit_code))
    return actions


def apply_plan(
    store: SessionStore,
    change: Changer,
    backends: Backends,
    state_dir: Path,
    log: logging.Logger,
    exit_reason: ExitReason | None = None,
) -> list[Action]:
    """Plan and apply, backend by backend, under the state lock; the actions taken.

    ``exit_reason`` gives the words recorded with an exit, written with it in one
    change (a reader never sees the exit without them).

    The backends asked are those owning a ``running``/``orphaned`` record and those
    whose owner process may run (for orphans). Records of a backend that is not
    configured any more, or cannot be asked (its socket is not ours, it hangs), are
    left alone (with a warning).
    """
    actions: list[Action] = []
    with state_lock(state_dir):
        records = store.list(["running", "orphaned"])
        names = {r.backend for r in records} | {b.name for b in backends.present()}
        for name in sorted(names):
            try:
                backend = backends.get(name)
                live = backend.list_live()
            except BackendUnavailable as e:  # e.g. a socket that is not ours: not asked
                log.warning("jupyter_agents: sessions of backend %r left as they are: %s", name, e)
                continue
            known = {r.id for r in records}
            extra = store.get_many(s.session_id for s in live if s.session_id not in known)
            foreign = {r.id for r in extra if r.backend != name}
            mine = [r for r in [*records, *extra] if r.backend == name]
            live = [s for s in live if s.session_id not in foreign]
            for action in plan(mine, live, datetime.now(timezone.utc)):
                _apply(store, change, backend, action, exit_reason)
                actions.append(action)
    return actions


def _apply(
    store: SessionStore,
    change: Changer,
    backend: Backend,
    action: Action,
    exit_reason: ExitReason | None,
) -> None:
    sid = action.session_id
    if action.kind == "exit":
        code = action.exit_code
        reason = exit_reason(sid, code) if exit_reason is not None and code is not None else None
        words: dict[str, Any] = {"reason": reason} if reason is not None else {}
        change(sid, status="exited", exit_code=code, expect=("running", "orphaned"), **words)
        backend.remove(sid)
    elif action.kind == "interrupt":
        change(sid, status="interrupted", expect=("running", "orphaned"))
    elif action.kind == "release":
        backend.remove(sid)
    elif action.kind == "orphan":
        ident = identify(action.pid) if action.pid else None
        if action.was is None:
            store.add(
                Session(
                    id=sid,
                    name=action.name,
                    status="orphaned",
                    backend=backend.name,
                    pid=action.pid,
                    pid_created=ident.created if ident else None,
                )
            )
        else:
            change(sid, status="orphaned", expect=(action.was,))
