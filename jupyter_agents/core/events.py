"""Session events: what the session service publishes, and their jupyter_events schema.

The service calls its subscribers with a :class:`SessionEvent` for every change; the
server emits each as a ``jupyter_agents/session/v1`` event (schema in
``event_schemas/session/v1.yaml``) that browsers receive on ``/api/events/subscribe``.
Nothing here imports jupyter_server or jupyter_events.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from jupyter_agents.core.records import Session, Status
from jupyter_agents.core.store import SessionStore

SCHEMA_ID = "https://events.jupyter.org/jupyter_agents/session/v1"
SCHEMA_PATH = Path(__file__).parents[1] / "event_schemas" / "session" / "v1.yaml"

EventAction = Literal[
    "created",
    "status",
    "conversation",
    "attention",
    "activity",
    "title",
    "updated",
    "shared",
    "usage",
    "request",
    "turns",
]


@dataclasses.dataclass(frozen=True)
class SessionEvent:
    """Something happened to a session: ``created``, ``status`` (``previous`` holds the
        old status), ``conversation`` (its id changed), ``activity`` (output or input),
        ``attention`` (what the agent needs changed), ``title`` (a person or its program
        retitled it), ``updated`` (other fields), ``usage`` (it spent tokens: ``usage`` holds
        its REST ``usage`` object; at most every few seconds per session), ``request`` (its
    pending permission requests changed: ``GET /api/agents/requests`` has them; the event
    never carries what a request shows)."""

    action: EventAction
    session: Session
    previous: Status | None = None
    usage: dict[str, Any] | None = None

    def data(self) -> dict[str, Any]:
        """The event's JSON payload (:data:`SCHEMA_ID`)."""
        s = self.session
        return {
            "action": self.action,
            "session_id": s.id,
            "name": s.name,
            "kind": s.kind,
            "status": s.status,
            "previous_status": self.previous,
            "conversation_id": s.conversation_id,
            "reason": s.reason,
            "attention": s.attention,
            "attention_since": s.attention_since,
            "attention_reason": s.attention_reason,
            "title": s.title or s.program_title,
            "title_source": "user" if s.title else "program" if s.program_title else None,
            **({} if self.usage is None else {"usage": self.usage}),
        }


class Changer(Protocol):
    """The one way a session record changes (:meth:`SessionService.change
    <jupyter_agents.sessions.service.SessionService.change>`), handed to what changes
    records below the sessions wing: set ``fields`` (compare-and-set on ``expect``, the
    statuses it may have, and ``was``, the values fields must still hold), publish
    ``action`` if given; the record as it is now, or None when nothing changed."""

    def __call__(
        self,
        session_id: str,
        action: EventAction | None = None,
        *,
        expect: Iterable[Status] | None = None,
        was: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Session | None: ...


class EventHub:
    """Fans session events out to subscribers, and notices changes other processes
    made to the store (they publish nothing here)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._subscribers: list[Callable[[SessionEvent], None]] = []
        self._lock = threading.Lock()
        #: (status, conversation id, title) of each session as last published
        self._seen: dict[str, tuple[Status, str | None, str | None]] | None = None
        self._data_version = -1

    def subscribe(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every event, from the thread that made the change.
        Returns a function that unsubscribes."""
        with self._lock:
            self._subscribers.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._subscribers:
                    self._subscribers.remove(listener)

        return unsubscribe

    def publish(
        self,
        action: EventAction,
        session: Session,
        previous: Status | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """Tell every subscriber; a failing subscriber is logged, never fatal. What it
        says of the session counts as published for :meth:`publish_external`, but for an
        ``activity`` event, which is about output only: a session another process made
        is still announced as ``created`` after its first output was."""
        event = SessionEvent(action, session, previous, usage)
        with self._lock:
            listeners = list(self._subscribers)
            if self._seen is not None and action != "activity":
                self._seen[session.id] = _seen(session)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a subscriber's bug must not undo a committed change
                self.log.exception("jupyter_agents: event subscriber failed")

    def publish_external(self, store: SessionStore) -> int:
        """Publish what other processes (the CLI, kernels, another server) changed in the
        store since the last call: new records, status, conversation and title changes. The
        first call only takes note; later calls cost one query while nothing changed."""
        version = store.data_version()
        if version == self._data_version:
            return 0
        self._data_version = version
        current = store.list()
        with self._lock:
            seen, first = self._seen or {}, self._seen is None
            self._seen = seen
        published = 0
        for session in [] if first else current:
            was = seen.get(session.id)
            if was is None:
                self.publish("created", session)
            elif was[0] != session.status:
                self.publish("status", session, was[0])
            elif was[1] != session.conversation_id:
                self.publish("conversation", session)
            elif was[2] != _seen(session)[2]:
                self.publish("title", session)
            else:
                continue
            published += 1
        with self._lock:
            for session in current:
                seen.setdefault(session.id, _seen(session))
        return published


def _seen(session: Session) -> tuple[Status, str | None, str | None]:
    """What :meth:`EventHub.publish_external` compares of a session."""
    return session.status, session.conversation_id, session.title or session.program_title
