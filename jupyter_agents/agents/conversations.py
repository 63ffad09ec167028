"""Following agent conversation ids while sessions run (``/clear``, a new codex thread,
a codex id not captured at launch).

Evidence comes from the kinds (:meth:`~jupyter_agents.agents.base.AgentKind.discover`) and is
tied to the session's own process tree; one conversation id never goes to two sessions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from jupyter_agents.agents.base import AgentKind
from jupyter_agents.core.events import Changer
from jupyter_agents.core.procs import ProcessIdentity, children_map, descendants, matches
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore


@dataclasses.dataclass(frozen=True)
class Change:
    """Session ``session_id`` now holds conversation ``new`` (was ``old``)."""

    session_id: str
    old: str | None
    new: str


def follow(
    store: SessionStore, change: Changer, kinds: Mapping[str, AgentKind], log: logging.Logger
) -> list[Change]:
    """Check every running agent session whose kind follows conversations and record the
    ids that changed. Blocking (reads the process table once per call)."""
    running = store.list(["running"], [n for n, k in kinds.items() if k.follows_conversation])
    if not running:
        return []
    held = {s.conversation_id: s.id for s in store.list() if s.conversation_id}
    tree = children_map()
    changes: list[Change] = []
    for session in running:
        found = _discover(session, kinds[session.kind], tree, held)
        if found is None or found == session.conversation_id:
            continue
        if found in held and held[found] != session.id:
            log.warning(
                "jupyter_agents: session %s now shows conversation %s, which session %s "
                "holds; keeping %s",
                session.id,
                found,
                held[found],
                session.conversation_id,
            )
            continue
        if change(
            session.id,
            conversation_id=found,
            ambiguous=False,
            expect=("running",),
            was={"conversation_id": session.conversation_id},  # not if a hook moved it
        ):
            if session.conversation_id:
                held.pop(session.conversation_id, None)
            held[found] = session.id
            changes.append(Change(session.id, session.conversation_id, found))
            log.info(
                "jupyter_agents: session %s (terminal %r) conversation %s -> %s",
                session.id,
                session.name,
                session.conversation_id,
                found,
            )
    return changes


def _discover(
    session: Session, agent: AgentKind, tree: dict[int, list[int]], held: dict[str, str]
) -> str | None:
    if not session.pid or session.pid_created is None:
        return None
    if matches(ProcessIdentity(session.pid, session.pid_created)) is None:
        return None
    pids = [session.pid, *descendants(session.pid, tree)]
    taken = {cid for cid, sid in held.items() if sid != session.id}
    return agent.discover(session, pids, session.env or {}, taken)
