"""PermissionDesk: what people do with agents' pending permission requests.

The requests themselves are files the agents' hooks write and wait on
(:class:`~jupyter_agents.agents.permissions.RequestFolder`); the desk lists those of
running sessions with what a person needs to decide (the session's name, kind and
title), answers them once, and hands to the CLI's own dialog those that wait with none
on screen. Every change is published as a ``request`` event of its session (the event
never carries what a request shows). Blocking (files and SQLite).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jupyter_agents.agents.permissions import Answer, Ending, RequestFolder, answer_from
from jupyter_agents.core.errors import Conflict, NotFound
from jupyter_agents.core.store import SessionStore


class PermissionDesk:
    """The pending requests of ``store``'s running sessions, in ``requests``;
    ``changed(session_id)`` publishes that a session's requests changed."""

    def __init__(
        self, store: SessionStore, requests: RequestFolder, changed: Callable[[str], None]
    ) -> None:
        self._store = store
        self._requests = requests
        self._changed = changed

    def how_ended(self, request_id: str) -> str | None:
        """How request ``request_id`` ended (answered here or in the terminal, moot),
        while this process remembers it (the latest 1,000); None for one pending or
        unknown."""
        return self._requests.how_ended(request_id)

    def decision_of(self, request_id: str) -> str | None:
        """How request ``request_id`` ended as a decision (``allow``, ``deny``,
        ``closed``, ``dialog``), while it is known; None for one pending or unknown."""
        return self._requests.decision_of(request_id)

    def pending(self, session_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The REST models of the pending permission requests of running sessions (of
        ``session_ids`` when given), oldest first, each with its session's ``name``,
        ``kind`` and ``title``."""
        running = {s.id: s for s in self._store.list(["running"])}
        wanted = running.keys() if session_ids is None else running.keys() & set(session_ids)
        out = []
        for request in self._requests.pending(sorted(wanted)):
            session = running[request.session_id]
            out.append(
                {
                    **request.to_model(),
                    "name": session.name,
                    "kind": session.kind,
                    "title": session.title or session.program_title,
                }
            )
        return out

    def pending_one(self, request_id: str) -> dict[str, Any]:
        """One pending request's model; :class:`NotFound` when there is none."""
        found = [r for r in self.pending() if r["id"] == request_id]
        if not found:
            raise NotFound(
                f"no pending permission request {request_id!r}: it was answered, "
                "closed, or never existed"
            )
        return found[0]

    def answer(
        self, request_id: str, body: Mapping[str, Any], by: str | None = None
    ) -> dict[str, Any]:
        """Answer a pending request with ``body`` ``{decision: "allow"|"deny", message?,
        suggestion?}`` (:func:`~jupyter_agents.agents.permissions.answer_from`), once.
        :class:`InvalidRequest` for a malformed body; :class:`Conflict` saying how it
        ended for a request that ended (answered here or in the terminal, moot) while
        this server remembers it (the latest 1,000); :class:`NotFound` for an unknown
        one, or one of a session that no longer runs. Returns ``{request, decision}``."""
        answer = answer_from(body, by, time.time())
        request = self._requests.get(request_id)
        session = None if request is None else self._store.get_many([request.session_id])
        how = self._requests.how_ended(request_id) if request is None else None
        if how is not None:
            raise Conflict(f"permission request {request_id} was {how}")
        if request is None or not session or session[0].status != "running":
            raise NotFound(
                f"no pending permission request {request_id!r}: it was answered, "
                "closed, or never existed"
            )
        self._requests.answer(request_id, answer)
        self._changed(request.session_id)
        s = session[0]
        model = {**request.to_model(), "name": s.name, "kind": s.kind}
        return {
            "request": {**model, "title": s.title or s.program_title},
            "decision": answer.decision,
        }

    def asks_elsewhere(self, session_id: str) -> bool:
        """Whether a pending request of ``session_id`` waits with no dialog on screen
        (its CLI shows one only when the hook ends: Codex)."""
        return any(r.fallback == "dialog" for r in self._requests.pending([session_id]))

    def hand_over(self, session_id: str, reason: str) -> int:
        """Hand every pending request of ``session_id`` that waits with no dialog on
        screen to its CLI's own dialog (a person is at the terminal); how many."""
        waiting = [r for r in self._requests.pending([session_id]) if r.fallback == "dialog"]
        return sum(self.end(r.id, "dialog", reason) for r in waiting)

    def end(self, request_id: str, how: Ending, reason: str) -> bool:
        """End a pending request without a decision (``dialog``: hand it to the CLI's
        own dialog; ``closed``); False when it was answered or ended already."""
        request = self._requests.get(request_id)
        if request is None:
            return False
        try:
            self._requests.answer(request_id, Answer(how, time.time(), reason=reason))
        except (NotFound, Conflict):
            return False
        self._changed(request.session_id)
        return True
