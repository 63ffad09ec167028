"""Models: the REST models of sessions, with what they spent and what their transcripts
keep, and the one write of spend a person makes (a session's own unattended limit).

The same models reach the browser (``GET /api/agents/sessions``), ``jupyter agents
list --json`` / ``show`` and the magics. Blocking (SQLite and the transcripts' files).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jupyter_agents.agents.base import AgentKind
from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.launch import EnvPolicy
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore
from jupyter_agents.spend.ledger import UsageLedger
from jupyter_agents.spend.limits import parse_override
from jupyter_agents.terminal.transcripts import Transcript


class Models:
    """The models of ``store``'s sessions and of the ``kinds`` (started with ``env``);
    ``usage`` holds what the ``usage_kinds`` spent; ``transcript_of`` finds a session's
    transcript; ``publish`` tells browsers of a changed limit (a ``usage`` event)."""

    def __init__(
        self,
        store: SessionStore,
        kinds: dict[str, AgentKind],
        env: EnvPolicy,
        usage: UsageLedger,
        usage_kinds: list[str],
        transcript_of: Callable[[Session], Transcript],
        publish: Callable[..., None],
    ) -> None:
        self._store = store
        self._kinds = kinds
        self._env = env
        self._usage = usage
        self._usage_kinds = usage_kinds
        self._transcript_of = transcript_of
        self._publish = publish

    def one(self, session_id: str) -> dict[str, Any]:
        """The REST model of one session (:meth:`Session.to_model`) with its ``usage``
        (:meth:`many`) and what its transcript keeps: ``transcript_start`` (the first
        kept byte; earlier ones were dropped by ``transcript_max_bytes``) and
        ``transcript_incomplete_since`` (when output was first lost among the kept
        bytes, e.g. on a full disk; else None)."""
        session = self._store.get(session_id)
        transcript = self._transcript_of(session)
        gaps = transcript.gaps()
        return {
            **session.to_model(),
            "usage": self._usage.model(session),
            "transcript_start": transcript.start(),
            "transcript_incomplete_since": (clock.iso(gaps[0][1]) if gaps else None),
        }

    def many(self, sessions: Iterable[Session]) -> list[dict[str, Any]]:
        """The REST models of ``sessions`` with their ``usage``: tokens by kind, the
        estimated cost, what they spent while nobody watched, the unattended limit
        (:meth:`~jupyter_agents.spend.ledger.UsageLedger.model`; None for shells)."""
        sessions = list(sessions)
        usage = self.usage(sessions)
        return [{**s.to_model(), "usage": usage[s.id]} for s in sessions]

    def usage(self, sessions: Iterable[Session]) -> dict[str, dict[str, Any] | None]:
        """The REST ``usage`` object of each of ``sessions``, by id (one query)."""
        sessions = list(sessions)
        found = self._usage.usage(s.id for s in sessions)
        return {s.id: self._usage.model(s, found.get(s.id)) for s in sessions}

    def set_unattended_limit(self, session_id: str, value: object) -> Session:
        """A session's own unattended limit (:func:`~jupyter_agents.spend.limits.parse_override`:
        a limit, ``{}`` for none, None for the configured one); :class:`InvalidRequest`
        for a bad one or a kind that reports no usage. Published (``usage``)."""
        limit = parse_override(value)
        session = self._store.get(session_id)
        if session.kind not in self._usage_kinds:
            raise InvalidRequest(
                f"session {session_id} is a {session.kind}: it reports no usage to limit"
            )
        self._usage.set_limit(session_id, limit)
        self._publish("usage", session, usage=self._usage.model(session))
        return session

    def kinds(self) -> list[dict[str, Any]]:
        """Every kind as clients see it (:meth:`~jupyter_agents.agents.base.AgentKind.
        describe`): whether it can start with the PATH new sessions get, and if not why.
        Looks on disk."""
        path = self._env.environment().get("PATH")
        return [kind.describe(path) for kind in self._kinds.values()]
