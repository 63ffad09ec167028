"""Our own clean-up: ended sessions older than an age go, with everything of theirs in
the state dir (transcript, archived conversations, the notebook of its conversation, hook
spool and settings, the record).

Nothing is ever pruned implicitly (only the conversation archive's caps drop copies):
:func:`plan` chooses from plain records (ended: ``exited``, ``interrupted``,
``killed``; last active before the cutoff), :func:`remove` deletes what the plan names.
The agent CLIs' own files are theirs and stay.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.export import notebook_path
from jupyter_agents.sessions.query import parse_since
from jupyter_agents.sessions.service import ENDED, SessionService


@dataclasses.dataclass(frozen=True)
class Prunable:
    """A session the plan removes, and the bytes of its own files in the state dir."""

    session: Session
    transcript_bytes: int
    archive_bytes: int


def cutoff(older_than: str, now: datetime | None = None) -> datetime:
    """The time before which ended sessions go: ``older_than`` is a duration (``90d``,
    ``12h``, ``30m``, ``45s``) before ``now``, or an ISO 8601 time.

    >>> cutoff("90d", clock.parse("2026-12-01T00:00:00Z")).date().isoformat()
    '2026-09-02'
    """
    try:
        return parse_since(older_than, now)
    except InvalidRequest:
        raise InvalidRequest(
            f"--older-than must be a duration like 90d, 12h, 30m or an ISO 8601 time; "
            f"got {older_than[:40]!r}"
        ) from None


def plan(sessions: Iterable[Session], before: datetime) -> list[Session]:
    """The ended sessions last active before ``before``, oldest first.

    >>> old = Session("a", "1", "exited", "tmux", last_activity="2026-01-01T00:00:00Z")
    >>> live = Session("b", "2", "running", "tmux", last_activity="2026-01-01T00:00:00Z")
    >>> [s.id for s in plan([old, live], clock.parse("2026-06-01T00:00:00Z"))]
    ['a']
    """
    chosen = [s for s in sessions if s.status in ENDED and clock.parse(s.last_activity) < before]
    return sorted(chosen, key=lambda s: (s.last_activity, s.id))


def _bytes(path: Path) -> int:
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _transcript(service: SessionService, session: Session) -> Path:
    return service.backends.get(session.backend).transcript_path(session.id)


def describe(service: SessionService, sessions: Iterable[Session]) -> list[Prunable]:
    """What pruning ``sessions`` would free."""
    return [
        Prunable(
            s,
            _bytes(_transcript(service, s)),
            _bytes(service.archive.folder(s.id)),
        )
        for s in sessions
    ]


def remove(service: SessionService, sessions: Iterable[Session]) -> list[str]:
    """Delete each of ``sessions`` that is still ended (re-read first: one restored
    meanwhile stays): its record, transcript, archived conversations, the notebook of its
    conversation in the state dir (:func:`~jupyter_agents.sessions.export.notebook_path`),
    hook spool and restore prelude, and the files its kind keeps of it
    (:meth:`~jupyter_agents.agents.base.AgentKind.session_files`: hook settings, plugin
    records). The ids removed."""
    state = service.state_dir
    removed = []
    for session in sessions:
        if service.store.forget(session.id, ENDED) is None:
            continue  # restored (or gone) since the plan was made
        shutil.rmtree(_transcript(service, session), ignore_errors=True)
        service.archive.remove(session.id)
        kind = service.kinds.get(session.kind)
        if kind is None:
            service.log.warning(
                "jupyter_agents: pruning session %s of kind %r, no longer configured: "
                "files of its kind's own (hook settings) may stay in %s",
                session.id,
                session.kind,
                state,
            )
        own = kind.session_files(state, session.id) if kind is not None else []
        own += service.backends.get(session.backend).session_files(session.id)
        for leftover in (
            state / "spool" / f"{session.id}.jsonl",
            state / f"prelude-{session.id}",
            notebook_path(state, session),
            *own,
        ):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        service.log.info("jupyter_agents: pruned session %s (%s)", session.id, session.kind)
        removed.append(session.id)
    return removed


def age(value: timedelta) -> str:
    """A short age: ``3d``, ``5h``, ``12m``.

    >>> age(timedelta(days=3, hours=4)), age(timedelta(minutes=12))
    ('3d', '12m')
    """
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
