"""Attention: what an agent session needs from its user, as its CLI tells us exactly.

We launch the agent CLIs, so each process gets its own hooks, which its kind's module
sets up (Claude Code: ``--settings`` with a private file; Codex: ``-c notify=[...]``
and ``-c hooks...``; the plumbing they share: :mod:`.hooks`). They run
:mod:`jupyter_agents.hook`, which appends a digest of each event to the session's spool
file (:mod:`~.spool`); the session service applies spooled events (:func:`state_after`)
to the store. The user's own settings files are never edited. :func:`state_after` is
pure; the rest touches files: the spool (:class:`AttentionTracker`) and its wake
socket.

States: ``working``; ``waiting`` (turn finished, wants input); ``permission`` (approval
asked); ``error`` (with the reason); ``unknown`` (the CLI ended its session). Claude
sends no hook when a permission prompt is answered or a turn is interrupted with Esc:
the next tool or prompt event closes that state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_agents.agents.hooks import spool_dir
from jupyter_agents.agents.permissions import ASKED, CLOSING_EVENTS, ENDED, RequestFolder
from jupyter_agents.agents.spool import WAKE_SOCKET, read_spool
from jupyter_agents.core import clock
from jupyter_agents.core.errors import Conflict, NotFound
from jupyter_agents.core.events import Changer
from jupyter_agents.core.records import Attention, Session
from jupyter_agents.core.store import SessionStore

if TYPE_CHECKING:
    from jupyter_agents.agents.base import AgentKind

#: the states in which a session needs its user
NEEDS_YOU: frozenset[str] = frozenset({"waiting", "permission", "error"})
#: ``notification_type`` of a Notification that shows a permission dialog: Claude
#: Code's, Gemini CLI's
_PERMISSION_TYPES = frozenset({"permission_prompt", "ToolPermission"})


def state_after(
    record: Mapping[str, Any], current: Attention | None = None
) -> tuple[Attention, str | None] | None:
    """The attention state (and reason) a spooled event puts a session in, from its
    ``current`` one; None when the event says nothing about it. A CLI that started (or
    resumed) and was asked nothing is ``ready``, not waiting: no turn ended, so nobody
    is needed, and its "still idle" reminder changes nothing.

    >>> state_after({"event": "Notification", "type": "permission_prompt"})
    ('permission', None)
    >>> state_after({"event": "Notification", "type": "ToolPermission"})  # Gemini CLI's
    ('permission', None)
    >>> state_after({"event": "StopFailure", "error": "rate_limit"})
    ('error', 'rate_limit')
    >>> state_after({"event": "SessionStart"}), state_after({"event": "Stop"}, "ready")
    (('ready', None), ('waiting', None))
    >>> state_after({"event": "Notification", "type": "idle_prompt"}, "ready") is None
    True
    """
    event, kind = record.get("event"), record.get("type")
    if event == "SessionStart":
        return "ready", None
    if event == "Notification" and kind == "idle_prompt" and current in ("ready", None):
        return None
    if event in ("UserPromptSubmit", "PreToolUse", "PostToolUse"):
        return "working", None
    if event == "PermissionRequest" or (event == "Notification" and kind in _PERMISSION_TYPES):
        return "permission", None
    if event == "Notification" and kind in ("idle_prompt", "elicitation_dialog"):
        return "waiting", kind if kind != "idle_prompt" else None
    if event in ("Stop", "agent-turn-complete"):
        return "waiting", None
    if event == "StopFailure":
        return "error", str(record.get("error") or "unknown error")
    if event == "SessionEnd":
        return "unknown", None
    return None


class _Wake(asyncio.DatagramProtocol):
    def __init__(self, on_wake: Callable[[], object]) -> None:
        self.on_wake = on_wake

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.on_wake()


async def listen_for_hooks(
    state_dir: Path, on_wake: Callable[[], object]
) -> asyncio.DatagramTransport | None:
    """Call ``on_wake`` (in the loop) whenever a hook spooled an event: the spool's
    datagram socket (:data:`WAKE_SOCKET`), taken over from a server that died. None if it
    cannot be made (a path too long for a socket): the periodic refresh still applies
    the spool."""
    path = spool_dir(state_dir) / WAKE_SOCKET
    if len(str(path)) > 100:
        return None
    path.unlink(missing_ok=True)
    try:
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Wake(on_wake), local_addr=str(path), family=socket.AF_UNIX
        )
    except OSError:
        return None
    os.chmod(path, 0o600)
    return transport


class AttentionTracker:
    """Keeps the store's attention states current: :meth:`apply_spool` applies the hook
    events spooled in a state dir, in order, each file from where the last call stopped
    (idempotent across processes: an event no newer than a session's
    ``attention_since`` was applied before, but for the requests it asked or ended,
    which are followed whatever their order: one spooled after an event that closes
    it, such as the tool's run after its dialog was answered in the terminal, is
    closed); an event's time is when its CLI ran the hook (:mod:`jupyter_agents.hook`);
    :meth:`launching` and :meth:`launched`
    bracket a new process's launch, so that its first events apply to the record its
    launch wrote; :meth:`apply_silence` runs the heuristic of kinds that report nothing
    exact."""

    def __init__(
        self,
        state_dir: Path,
        store: SessionStore,
        kinds: Mapping[str, AgentKind],
        change: Changer,
        log: logging.Logger,
        requests_changed: Callable[[str], object] | None = None,
        conversation_left: Callable[[str, str], object] | None = None,
    ) -> None:
        self.folder = state_dir / "spool"
        #: the pending permission requests (:mod:`jupyter_agents.agents.permissions`)
        self.requests = RequestFolder(state_dir)
        #: called with a session's id when its pending requests changed
        self.requests_changed = requests_changed or (lambda session_id: None)
        #: called with a session's id and the conversation id it held, when a hook event
        #: moved it to another (``/clear``): the archive keeps the one it left
        self.conversation_left = conversation_left or (lambda session_id, conversation: None)
        self.store = store
        self.kinds = kinds
        self.change = change
        self.log = log
        self._offsets: dict[str, int] = {}
        #: where each session's spool ended when a new process of it was launched
        self._launches: dict[str, int] = {}
        #: each session's latest event that closes the requests asked before it:
        #: ``(t, reason, conversation)``
        self._closing: dict[str, tuple[float, str, object]] = {}
        self._lock = threading.RLock()

    def apply_silence(self, last_output_of: Callable[[str], datetime | None], now: float) -> int:
        """Running sessions of ``heuristic`` kinds: ``waiting`` once their transcript
        has been silent for the kind's ``silence`` seconds (``last_output_of(session
        id)``: when it was last written, None if never), else ``working``. Returns the
        number of changes."""
        changed = 0
        heuristic = {n: k for n, k in self.kinds.items() if k.reports == "heuristic"}
        for session in self.store.list(["running"], heuristic):
            kind = heuristic[session.kind]
            written = last_output_of(session.id)
            last_output = clock.seconds(written) if written else clock.epoch(session.last_activity)
            silent = now - last_output >= getattr(kind, "silence", 5.0)
            state: Attention = "waiting" if silent else "working"
            if state != session.attention:
                changed += self._set(session, state, None, last_output, "heuristic")
        return changed

    def _set(
        self,
        session: Session,
        state: Attention,
        reason: str | None,
        when: float,
        source: str | None,
    ) -> int:
        self.change(
            session.id,
            "attention",
            attention=state,
            attention_reason=reason,
            attention_since=clock.iso(when),
            attention_source=source,
        )
        return 1

    def apply_spool(self) -> int:
        """Apply what is new in every spool file; the number of attention changes."""
        try:
            files = sorted(self.folder.glob("*.jsonl"))
        except OSError:
            return 0
        return sum(self._apply_file(path.stem, None) for path in files)

    def launching(self, session_id: str) -> None:
        """Note where a session's spool ends before a new process of it starts: every
        line after this is that process's (:meth:`launched`)."""
        try:
            self._launches[session_id] = (self.folder / f"{session_id}.jsonl").stat().st_size
        except OSError:
            self._launches[session_id] = 0

    def launched(self, session_id: str) -> int:
        """Apply what the new process of a session spooled since :meth:`launching`, once
        its launch is recorded and published: its hooks run as soon as it starts, so
        their events can reach :meth:`apply_spool` before the record they belong to
        exists (a new session) or while it still says the old process ended (a
        restore, whose record then drops what was applied to it). Lines read before are
        read again; those older than the launch are skipped as applied before. The
        number of attention changes."""
        return self._apply_file(session_id, self._launches.pop(session_id, None))

    def _apply_file(self, session_id: str, start: int | None) -> int:
        """Apply one session's spool from byte ``start`` (None: from where the last call
        stopped). Lines of a session with no record yet stay unread, for when it has
        one. One file at a time, so two threads never apply its lines out of order."""
        with self._lock:
            offset = self._offsets.get(session_id, 0)
            records, end = read_spool(
                self.folder / f"{session_id}.jsonl", offset if start is None else start
            )
            if not records:
                self._offsets[session_id] = max(end, offset)
                return 0
            try:
                session = self.store.get(session_id)
            except NotFound:
                return 0
            self._offsets[session_id] = max(end, offset)
            return self._apply(session, records)

    def _apply(self, session: Session, records: list[dict[str, Any]]) -> int:
        session_id = session.id
        kind = self.kinds.get(session.kind)
        source = session.attention_source or (kind.reports if kind else None)
        changed = 0
        requests = False
        for record in records:
            if _another_thread(session, record):
                continue  # Codex's title thread ends its turn too: not the session's
            # a request asked or ended counts even when a later event came first: hooks
            # run at once (Claude Code's Notification beside its PermissionRequest, which
            # spools after its request file is written) and append out of time order
            requests = self._follow_requests(session_id, record) or requests
            if session.attention_since and record["t"] <= clock.epoch(session.attention_since):
                continue  # applied before (by this or another process)
            if record.get("event") == "SessionStart":
                note = record.get("note")  # an ACP proxy's: why it did not go on as asked
                why = note[:500] if isinstance(note, str) and note else None
                session = self._follow(session, record.get("conversation"), why)
                if why is not None and why != session.reason:
                    session = self.change(session_id, "updated", reason=why) or session
            state = state_after(record, session.attention)
            if state is None or state == (session.attention, session.attention_reason):
                continue
            changed += self._set(session, state[0], state[1], record["t"], source)
            session = self.store.get(session_id)
        if requests:
            self.requests_changed(session_id)
        return changed

    def _follow_requests(self, session_id: str, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` changed the session's pending requests: one was asked or
        ended, or an event after it shows it answered in the terminal (the tool ran)
        or moot (the turn moved on), which closes it."""
        event = record.get("event")
        if event == ENDED:
            self.requests.note_ended(
                record.get("request"), record.get("decision"), record.get("reason")
            )
        if event == ASKED and session_id in self._closing:
            # spooled after an event that closes it (its hook was slow to start, and the
            # dialog was answered in the terminal meanwhile): closed as that event says
            t, reason, conversation = self._closing[session_id]
            if record["t"] < t:
                self.requests.close_before(session_id, t, reason, conversation)
        if event in (ASKED, ENDED):
            return bool(record.get("request"))
        if event not in CLOSING_EVENTS:
            return False
        if event in ("PostToolUse", "PostToolUseFailure"):
            reason = "answered in the terminal"
        elif event == "SessionEnd":
            reason = "the agent ended"
        else:
            reason = "the turn moved on"
        conversation = record.get("conversation")
        if record["t"] > self._closing.get(session_id, (0.0,))[0]:
            self._closing[session_id] = (record["t"], reason, conversation)
        return bool(self.requests.close_before(session_id, record["t"], reason, conversation))

    def _follow(self, session: Session, conversation: object, why: str | None) -> Session:
        """SessionStart names the exact conversation id (a new one after ``/clear``),
        of the shape the session's kind uses (a UUID, or e.g. OpenCode's ``ses_...``).
        ``why`` (an ACP proxy's note: why it did not go on as asked) is written in the
        same change as the new id, so nobody reads the id without it."""
        kind = self.kinds.get(session.kind)
        valid = kind.is_conversation_id(conversation) if kind else _is_uuid(conversation)
        if not valid or conversation == session.conversation_id:
            return session
        fields: dict[str, Any] = {"conversation_id": conversation, "ambiguous": False}
        if why is not None:
            fields["reason"] = why
        try:
            followed = self.change(
                session.id,
                "conversation",
                was={"conversation_id": session.conversation_id},  # not if a pass moved it
                **fields,
            )
            if followed is not None:
                if session.conversation_id:
                    self.conversation_left(session.id, session.conversation_id)
                session = followed
        except Conflict as e:
            self.log.warning("jupyter_agents: session %s: %s", session.id, e)
        return session


def _another_thread(session: Session, record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is a turn's end of a conversation that is not the session's:
    Codex runs a title-generation thread of its own, whose ``notify`` fires too (DESIGN
    section 16)."""
    conversation = record.get("conversation")
    return (
        record.get("event") == "agent-turn-complete"
        and bool(session.conversation_id)
        and isinstance(conversation, str)
        and conversation != session.conversation_id
    )


def _is_uuid(value: object) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False
