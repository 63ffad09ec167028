"""Refresh: what the session records learn from outside the requests that change them.

Agents change their conversation ids, append to their conversation files, spend tokens,
set modes and titles, print while nobody watches and spool hook events; other processes
(the CLI, kernels) write the store; transcripts get gaps. :class:`Refresh` brings the
records up to date with each of those, one follower each, and publishes every change.
The server runs :meth:`Refresh.tick` every ``refresh_interval`` seconds (and
:meth:`Refresh.apply_attention` on each hook's wake); a front end without a server
(the CLI, a kernel's magics) calls :meth:`Refresh.catch_up` before it shows sessions.
Reads (``SessionService.list``) never refresh: a listing returns what the store holds.

Everything here is blocking (SQLite, the state dir, the backends): the server calls it
from worker threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from jupyter_agents.agents import conversations
from jupyter_agents.agents.archive import ConversationArchive, ConversationFile
from jupyter_agents.agents.attention import AttentionTracker
from jupyter_agents.agents.base import AgentKind
from jupyter_agents.core import clock
from jupyter_agents.core.events import Changer, EventHub
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore
from jupyter_agents.spend.ledger import Change, Throttle, UsageLedger
from jupyter_agents.terminal.state import Followed, ModeFollower
from jupyter_agents.terminal.transcripts import GapLog, Transcript


class Refresh:
    """The followers of one state dir's sessions (module docstring). It writes records
    only through ``change`` and publishes on ``events``; ``reconcile`` matches the store
    with the backends; ``transcript_of`` and ``conversation_files`` say where a
    session's output and conversations are read from."""

    def __init__(
        self,
        *,
        store: SessionStore,
        kinds: dict[str, AgentKind],
        change: Changer,
        events: EventHub,
        reconcile: Callable[[], object],
        transcript_of: Callable[[Session], Transcript],
        conversation_files: Callable[[Session], list[ConversationFile]],
        archive: ConversationArchive,
        attention: AttentionTracker,
        usage: UsageLedger,
        modes: ModeFollower,
        log: logging.Logger,
    ) -> None:
        self._store = store
        self._kinds = kinds
        self._change = change
        self._events = events
        self._reconcile = reconcile
        self._transcript_of = transcript_of
        self._conversation_files = conversation_files
        self._archive = archive
        self._attention = attention
        self._usage = usage
        self._modes = modes
        self._log = log
        #: the kinds whose CLIs record what they spend
        self._usage_kinds = [name for name, kind in kinds.items() if kind.reports_usage]
        self._usage_events = Throttle()
        self._gaps = GapLog(log)

    def tick(self) -> dict[str, Change]:
        """One refresh, in this order: sessions that ended unwatched (a reconcile),
        conversation ids, the conversation archive, usage, modes and titles, activity,
        attention (in case a hook's wake was lost), what other processes changed in the
        store, new transcript gaps (logged). What the usage ledger changed, by session
        (the server's unattended limit checks it)."""
        self._reconcile()
        self.follow_conversations()
        self.archive_conversations()
        changes = self.read_usage()
        self.follow_modes()
        self.follow_activity()
        self.apply_attention()
        self.publish_external()
        self.log_transcript_gaps()
        return changes

    def catch_up(self) -> None:
        """What a front end with no server's tick does before it shows sessions: a
        reconcile, conversation ids, spooled hook events, activity and usage."""
        self._reconcile()
        self.follow_conversations()
        self.apply_attention()
        self.follow_activity()
        self.read_usage()

    def publish_external(self) -> int:
        """Publish what other processes (the CLI, kernels) changed in the store since the
        last call (:meth:`~jupyter_agents.core.events.EventHub.publish_external`; the
        first call takes the baseline); how many events."""
        return self._events.publish_external(self._store)

    def follow_conversations(self) -> int:
        """Record the conversation ids running agents hold now; how many changed (the
        ids they held before are noted in the archive, which keeps their files too)."""
        changes = conversations.follow(self._store, self._change, self._kinds, self._log)
        for change in changes:
            if change.old:
                self._archive.note(change.session_id, change.old)
        for session in self._store.get_many(c.session_id for c in changes):
            self._events.publish("conversation", session)
        return len(changes)

    def archive_conversations(self) -> int:
        """Copy what agents added to their conversation files into the archive
        (:meth:`ConversationArchive.sync`); the bytes copied."""
        kinds = [name for name, kind in self._kinds.items() if kind.keeps_conversations]
        return self._archive.sync(self._store.list(kinds=kinds), self._kinds)

    def read_usage(self) -> dict[str, Change]:
        """Read what agents added to their conversation files into the usage ledger
        (:meth:`~jupyter_agents.spend.ledger.UsageLedger.update`): what changed, by session.
        Each changed session's usage is published (a ``usage`` event), at most every
        :data:`~jupyter_agents.spend.ledger.USAGE_EVENT_INTERVAL` seconds per session."""
        sessions = self._store.list(kinds=self._usage_kinds)
        changes = self._usage.update(sessions, self._conversation_files)
        due = self._usage_events.due(changes)
        for session in self._store.get_many(due):
            self._events.publish("usage", session, usage=self._usage.model(session))
        return changes

    def follow_modes(self) -> int:
        """Follow what running sessions' programs set since the last call (their modes,
        :mod:`jupyter_agents.terminal.state`, kept in the store, and their titles: each
        new title is published); how many titles changed."""
        changed = 0
        for session in self._store.list(["running"]):
            point = self._modes.at(session.id, self._transcript_of(session), session.modes)
            fields: dict[str, Any] = {}
            kept = Followed.load(session.modes)
            if kept is None or kept.modes != point.modes or point.offset - kept.offset > 1 << 20:
                fields["modes"] = point.dump()
            if point.modes.title is not None and point.modes.title != session.program_title:
                fields["program_title"] = point.modes.title
            if not fields:
                continue
            retitled = "program_title" in fields
            if self._change(session.id, "title" if retitled else None, **fields) and retitled:
                changed += 1
        return changed

    def modes_at(self, session_id: str, offset: int) -> Followed:
        """What session ``session_id``'s program set, at transcript ``offset`` (or the
        point followed past it: :meth:`~jupyter_agents.terminal.state.ModeFollower.at`);
        the backends ask it for a replay."""
        session = self._store.get(session_id)
        return self._modes.at(session_id, self._transcript_of(session), session.modes, offset)

    def follow_activity(self) -> int:
        """Move each running session's ``last_activity`` up to when its program last
        printed: its transcript's last write, which the backend makes whether anyone
        watches or not (publishing ``activity``). One stat per running session, a store
        write only for one that printed since it was last moved; how many moved."""
        moved = 0
        for session in self._store.list(["running"]):
            wrote = self._transcript_of(session).ended_at()
            recorded = clock.parse(session.last_activity)
            if wrote is None or wrote <= recorded:
                continue
            when = clock.iso(wrote)
            if self._change(session.id, "activity", expect=("running",), last_activity=when):
                moved += 1
        return moved

    def apply_attention(self) -> int:
        """Bring attention states up to date (:class:`~jupyter_agents.agents.attention.
        AttentionTracker`): the hook events agents spooled since the last call (also
        those of while no server ran), and the silence heuristic of kinds that report
        nothing exact. Each change is published; returns how many there were."""
        changed = self._attention.apply_spool()
        return changed + self._attention.apply_silence(self._printed_at, time.time())

    def log_transcript_gaps(self) -> int:
        """Log each new gap in running sessions' transcripts once (:class:`GapLog`);
        how many were new."""
        running: Iterable[Session] = self._store.list(["running"])
        return self._gaps.log_new(self._transcript_of(s) for s in running)

    def _printed_at(self, session_id: str) -> datetime | None:
        """When session ``session_id``'s transcript was last written (None: never)."""
        return self._transcript_of(self._store.get(session_id)).ended_at()
