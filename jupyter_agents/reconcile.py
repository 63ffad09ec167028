"""Reconcile: bring the store in line with what the backend really holds.

:func:`plan` is pure: (records, live sessions, now) -> actions. The TerminalManager
applies the actions under the state lock, so no spawn (which holds the same lock from
"start the process" to "record it") is ever seen half-done, and two servers reconciling
at once take turns. Rules (DESIGN.md section 7):

- record ``running``/``orphaned`` + live          -> keep (``adopt``: re-adopted)
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
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from .backends.base import LiveSession
from .store import Session, Status

ActionKind = Literal["adopt", "exit", "interrupt", "orphan", "release"]

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
            "adopt": "re-adopted",
            "exit": f"exited (code {self.exit_code})",
            "interrupt": "interrupted (process gone; transcript kept)",
            "orphan": "orphaned (live but not recorded as running; not killed)",
            "release": "released (its process ended after its record did)",
        }[self.kind]
        return f"session {self.session_id} (terminal {self.name!r}, pid {self.pid}): {verb}"


def _age(iso: str, now: datetime) -> float:
    try:
        then = datetime.fromisoformat(iso.replace("Z", "+00:00"))
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
                actions.append(Action("adopt", rec.id, rec.name, cur.pid, was=rec.status))
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
