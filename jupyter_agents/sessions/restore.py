"""Restore after a reboot: relaunching ended sessions, and what a restored terminal shows
before its new process.

A restored session comes back in a new process (the old one is gone), so its terminal
would start blank. Instead it first shows the tail of the old transcript and a marker
line, then the resumed agent. The tail is an *honest bounded raw replay*: the last
bytes of the raw transcript, cut at a line start, with the sequences removed that
would misbehave when replayed (terminal queries whose answers would be typed into the
new process, alternate-screen and mode switches, full resets). :func:`sanitize_tail`,
:func:`banner`, :func:`prelude` and :func:`prelude_argv` compute it from bytes and
strings alone; :func:`write_prelude` writes it to the file the new process prints first.

:class:`Restorer` relaunches sessions (one or many) and watches that the resumed process
stays up. It takes the few collaborators it needs: the store, the backends, the agent
kinds, the environment policy, and the changes of the session service that record and
publish (:class:`SessionChanges`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_agents.acp import proxy_argv
from jupyter_agents.agents.base import FolderConversation, Launch
from jupyter_agents.backends import Backend
from jupyter_agents.core.errors import AgentsError, BackendUnavailable, Conflict
from jupyter_agents.core.launch import next_free_name
from jupyter_agents.core.paths import create_private_file, state_lock
from jupyter_agents.core.records import Session, Status
from jupyter_agents.sessions.worktrees import Worktrees, worktree_of
from jupyter_agents.terminal.render import clean_text
from jupyter_agents.terminal.transcripts import Transcript
from jupyter_agents.terminal.vt import QUERIES

if TYPE_CHECKING:
    from jupyter_agents.agents.archive import ConversationArchive
    from jupyter_agents.agents.base import AgentKind, Launch
    from jupyter_agents.backends import Backends
    from jupyter_agents.core.events import EventAction
    from jupyter_agents.core.launch import EnvPolicy
    from jupyter_agents.core.store import SessionStore

#: ``progress(done, total, session_id, error)``: ``error`` is why that session could not
#: be restored, None when it was launched
Progress = Callable[[int, int, str, "str | None"], None]

#: bytes of the old transcript shown by default
TAIL_BYTES = 32 * 1024

#: what a replayed tail must not hold: every query a replay strips (:data:`~.vt.QUERIES`:
#: the browser would type its answers into the new process), and OSC strings (titles,
#: hyperlinks), DCS/PM/APC/SOS strings, mode switches and full resets
_UNSAFE = re.compile(
    QUERIES.pattern
    + rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (titles, colour queries, hyperlinks)
    rb"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS / PM / APC / SOS strings
    rb"|\x1b\[[?>=]?[0-9;]*[hl]"  # mode switches
    rb"|\x1bc"  # full reset (would clear what we replay)
)
#: after the replay: normal attributes, main screen, visible cursor, no mouse/paste modes.
#: The main screen by 1047, not 1049: leaving by 1049 also restores the saved cursor,
#: which a terminal that saved none (xterm.js) puts at the top left, and the marker line
#: would overwrite the replay's second line on a tab that watches the restore live
_SANE = (
    b"\x1b[0m\x1b[?1047l\x1b[?25h\x1b[?1l\x1b>"
    b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\r\n"
)


def sanitize_tail(data: bytes, limit: int = TAIL_BYTES) -> bytes:
    """The last ``limit`` bytes of ``data`` (a raw transcript) fit to replay.

    Starts at a line start, drops unsafe sequences (module docstring), ends in a sane
    terminal state on a fresh line.

    >>> out = sanitize_tail(b"first line\\r\\nline \\x1b[6n\\x1b[?1049hkept\\x1b]11;?\\x07", 35)
    >>> out.split(b"\\x1b[0m")[0]
    b'line kept'
    """
    if not data or limit <= 0:
        return b""
    tail = data[-limit:]
    if len(data) > limit:
        newline = tail.find(b"\n")
        tail = tail[newline + 1 :] if newline >= 0 else b""
    tail = _UNSAFE.sub(b"", tail)
    # a sequence cut off at the end would swallow what follows
    cut = tail.rfind(b"\x1b")
    if cut >= 0 and cut > len(tail) - 32 and not re.search(rb"[@-~]", tail[cut + 2 :]):
        tail = tail[:cut]
    return tail + _SANE if tail else b""


def banner(kind: str, conversation_id: str | None, session_id: str, ended: datetime | None) -> str:
    """The marker line between the old transcript and the new process.

    >>> banner("aider", "c0ffee", "s1", datetime(2026, 11, 29, 17, 5, tzinfo=timezone.utc))
    '--- restored aider session c0ffee (previous run ended 2026-11-29 17:05 UTC) ---'
    """
    when = ended.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ended else "unknown"
    name = conversation_id or session_id
    return f"--- restored {kind} session {name} (previous run ended {when}) ---"


def prelude(tail: bytes, marker: str, limit: int = TAIL_BYTES) -> bytes:
    """The bytes a restored terminal shows first: the old transcript's ``tail`` (its last
    ``limit`` + 1 bytes), then the marker line.

    >>> prelude(b"", "--- m ---")
    b'\\x1b[1m--- m ---\\x1b[0m\\r\\n'
    """
    return sanitize_tail(tail, limit) + b"\x1b[1m" + marker.encode() + b"\x1b[0m\r\n"


def fresh_banner(kind: str, earlier: Session) -> str:
    """The marker line between an earlier session's transcript and a fresh session
    started after it (its conversation could not be resumed).

    >>> fresh_banner("aider", Session("s1", "1", "interrupted", "tmux", conversation_id="c0"))
    '--- new aider session; above: the end of session s1 (conversation c0, not resumed) ---'
    """
    about = (
        f" (conversation {earlier.conversation_id}, not resumed)" if earlier.conversation_id else ""
    )
    return f"--- new {kind} session; above: the end of session {earlier.id}{about} ---"


def fresh_note(
    kind: str, session_id: str, offered: Sequence[FolderConversation], empty: bool = False
) -> str:
    """What a session restored without its conversation says (its ``reason`` and the
    marker line): that it started fresh and why (its conversation was never known, or,
    ``empty``, held no message to resume), and the folder's conversations to continue
    instead.

    >>> when = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
    >>> note = fresh_note("aider", "s1", [FolderConversation("c0ffee", when)])
    >>> note.startswith("started fresh"), note.split("instead: ")[1]
    (True, 'jupyter agents restore s1 --conversation ID (c0ffee, 2026-12-01 09:30 UTC)')
    """
    note = (
        f"started fresh: its {kind} conversation held no message, so there was nothing to resume"
        if empty
        else f"started fresh: its {kind} conversation was never known, and the newest one "
        "here may be someone else's"
    )
    if not offered:
        return note
    listed = ", ".join(
        f"{c.conversation_id}, {c.modified.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC"
        for c in offered
    )
    return (
        f"{note}; to continue one of this folder's instead: jupyter agents restore "
        f"{session_id} --conversation ID ({listed})"
    )


def write_prelude(
    state_dir: Path, session: Session, transcript: Transcript, limit: int, marker: str | None = None
) -> Path:
    """Write a restored session's prelude (old tail and marker: :func:`banner` unless
    ``marker`` is given) to a private file in ``state_dir``; :func:`prelude_argv` prints
    and deletes it."""
    if marker is None:
        marker = banner(session.kind, session.conversation_id, session.id, transcript.ended_at())
    path = state_dir / f"prelude-{session.id}"
    create_private_file(path)
    path.write_bytes(prelude(transcript.tail(limit + 1), marker, limit))
    return path


#: a line that says what went wrong (preferred to, e.g., the backtrace after it)
_COMPLAINT = re.compile(r"(?i)\b(error|failed|not found|no \w+ found|refus|invalid|denied)")


def last_words(tail: bytes, marker: str | None, width: int = 300) -> str | None:
    """What a process printed in ``tail`` (raw transcript bytes) after the last
    ``marker`` (the restore's marker line): its last line that says what went wrong
    (an error, something not found...), else its last line; at most ``width``
    characters. None when nothing was printed after the marker. Without a ``marker``,
    what the whole tail says.

    >>> last_words(b"old\\r\\n--- m ---\\r\\n\\x1b[31mNo conversation found\\x1b[0m\\r\\n", "--- m")
    'No conversation found'
    >>> last_words(b"--- m ---\\nError: no rollout found\\nStack backtrace:\\n  0: ?\\n", "--- m")
    'Error: no rollout found'
    """
    if marker is None:
        after = tail
    else:
        cut = tail.rfind(marker.encode())
        if cut < 0:
            return None
        after = tail[cut:].split(b"\n", 1)[1] if b"\n" in tail[cut:] else b""
    lines = [line.strip() for line in clean_text(after.decode("utf-8", "replace")).splitlines()]
    lines = [line for line in lines if line]
    told = [line for line in lines if _COMPLAINT.search(line)]
    return (told or lines)[-1][:width] if lines else None


def prelude_argv(prelude_file: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped to print and delete ``prelude_file`` first (no shell parsing of
    either: both travel as arguments)."""
    script = 'cat -- "$0" 2>/dev/null; rm -f -- "$0"; exec "$@"'
    return ["/bin/sh", "-c", script, str(prelude_file), *argv]


@dataclasses.dataclass
class RestoreResult:
    """What a restore of several sessions did: the records after the resume check, and
    ``(id, message)`` for those that could not be launched."""

    restored: list[Session]
    failed: list[tuple[str, str]]


class SessionChanges(Protocol):
    """The changes a restore asks of the session service
    (:class:`~jupyter_agents.sessions.service.SessionService`), each with all it implies there:
    the record, the published event, the log line."""

    def launch(self, session: Session, launch: Launch, argv: list[str], was: Status | None) -> None:
        """Spawn ``argv`` for ``session`` in its backend and record it running (a
        restore: only while its status is still ``was``)."""

    def launched(self, session: Session) -> Session:
        """``session`` once the hook events its new process spooled while it was
        launched are applied (after the launch's event is published)."""

    def set_status(
        self, session_id: str, status: Status, expect: Iterable[Status], **fields: Any
    ) -> Session | None:
        """Change a record's status (compare-and-set on ``expect``) and publish it."""

    def publish(
        self, action: EventAction, session: Session, previous: Status | None = None
    ) -> None:
        """Tell the subscribers of the service's events."""

    def change(
        self,
        session_id: str,
        action: EventAction | None = None,
        *,
        expect: Iterable[Status] | None = None,
        was: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Session | None:
        """Change a record's fields (:class:`~jupyter_agents.core.events.Changer`)."""


class Restorer:
    """Relaunches ended sessions of ``store`` in ``backends`` as their ``kinds`` resume
    them, with environments by ``env``, through ``changes``; the terminal first shows the
    last ``tail_bytes`` of the old transcript; a resumed process is watched for
    ``resume_check`` seconds. ``state_dir``'s lock is held while a restore launches."""

    def __init__(
        self,
        store: SessionStore,
        backends: Backends,
        kinds: Mapping[str, AgentKind],
        env: EnvPolicy,
        changes: SessionChanges,
        state_dir: Path,
        tail_bytes: int = TAIL_BYTES,
        resume_check: float = 3.0,
        log: logging.Logger | None = None,
        archive: ConversationArchive | None = None,
        worktrees: Worktrees | None = None,
        acp_client_tools: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.backends = backends
        #: what makes a worktree session's worktree again when it was removed by hand
        self.worktrees = worktrees
        #: where a conversation whose file is gone is put back from before a resume
        self.archive = archive
        self.kinds = kinds
        self.env = env
        self.changes = changes
        self.state_dir = state_dir
        self.tail_bytes = tail_bytes
        self.resume_check = resume_check
        self.log = log or logging.getLogger("jupyter_agents")
        #: the client tools a restored ACP session's new proxy lets its agent use
        self.acp_client_tools = tuple(acp_client_tools)

    def restore_checked(self, session_id: str, conversation: str | None = None) -> Session:
        """What a person asking for one restore waits for: :meth:`restore`, then
        :meth:`check_resumed`: the record after the resume check (``interrupted`` with
        the reason when the resumed process failed at once). Blocking."""
        return self.check_resumed(self.restore(session_id, conversation))

    def restore(self, session_id: str, conversation: str | None = None) -> Session:
        """Relaunch an ended session in its cwd with its recorded environment: agents
        resume their conversation, shells start fresh; the terminal first shows the old
        transcript's tail and a marker line (:mod:`jupyter_agents.sessions.restore`). It runs in
        the backend that owned it (the default one if that cannot start any more).

        :class:`Conflict` if it still runs (or is orphaned: adopt it instead), its cwd is
        gone, its kind is no longer configured or its program is not installed. Under the
        state lock, so two concurrent restores of one session launch one process.

        An agent whose conversation was never known starts a new one (never the CLI's
        "most recent", which may be another's) and its ``reason`` says so
        (:func:`fresh_note`); ``conversation``: resume that one of its folder's
        conversations instead (:meth:`~.agents.AgentKind.folder_conversations`).
        """
        with state_lock(self.state_dir):
            session = self.store.get(session_id)
            if session.status in ("running", "orphaned"):
                hint = " (adopt an orphaned one)" if session.status == "orphaned" else ""
                raise Conflict(
                    f"session {session_id} is {session.status}; only ended sessions can be "
                    f"restored{hint}"
                )
            backend = self._restore_backend(session)
            held = {s.session_id: s for s in backend.list_live()}.get(session_id)
            if held is not None and not held.dead:
                raise Conflict(f"session {session_id} still has a live process (pid {held.pid})")
            if held is not None:
                backend.remove(session_id)
            if session.kind not in self.kinds:
                raise Conflict(f"session {session_id}: kind {session.kind!r} is not configured")
            if self._revive_worktree(session):  # its commits are on its branch
                self.log.warning(
                    "jupyter_agents: session %s: its worktree was removed outside "
                    "jupyter_agents; made again from its branch",
                    session_id,
                )
            if not session.cwd or not Path(session.cwd).is_dir():
                reason = f"cannot restore: its working directory {session.cwd!r} is gone"
                self.changes.change(session_id, reason=reason)
                raise Conflict(f"session {session_id}: {reason}")
            previous = session.status
            session.env = self.env.environment(session.env)
            kind = self.kinds[session.kind]
            missing = kind.unavailable(session.env.get("PATH"), session.mode)
            if missing is not None:
                reason = f"cannot restore: {missing}"
                self.changes.change(session_id, reason=reason)
                raise Conflict(f"session {session_id}: {reason}")
            if conversation is not None:
                self._choose(session, kind, conversation)
            # a conversation file the CLI lost comes back from the archive first
            had_file = self.archive is not None and self.archive.put_back(session)
            note = None
            if session.mode == "acp":  # its proxy again, going on with its ACP session
                agent = kind.acp_launch(session.args)
                launch = Launch(agent, conversation_id=session.conversation_id)
                resumed = session.conversation_id
                argv = proxy_argv(
                    self.state_dir, session.id, session.cwd, agent, resumed, self.acp_client_tools
                )
            else:
                launch = kind.resume(session, session.env, had_file)
                if launch.fresh:
                    note = fresh_note(
                        kind.name, session.id, kind.folder_conversations(session), launch.empty
                    )
                argv = kind.with_reporting(launch.argv, self.state_dir, session.id)
            if self.store.find_live(session.name) is not None:
                session.name = next_free_name(self.store.live_names())
            transcript = Transcript(session.id, backend.transcript_path(session.id))
            marker = None if note is None else f"--- {note} ---"
            prelude = write_prelude(self.state_dir, session, transcript, self.tail_bytes, marker)
            transcript.mark_replay(prelude.read_bytes())  # searched once, where it was
            try:
                if session.backend != backend.name:
                    session.backend = backend.name
                    self.changes.change(session.id, backend=backend.name)
                self.changes.launch(session, launch, prelude_argv(prelude, argv), previous)
            except BaseException:
                prelude.unlink(missing_ok=True)
                raise
            if note is not None:
                session.reason = note
                self.changes.change(session.id, reason=note)
                self.log.info("jupyter_agents: session %s %s", session.id, note)
        self.changes.publish("status", session, previous)
        return self.changes.launched(session)

    def _revive_worktree(self, session: Session) -> bool:
        """Whether the worktree of ``session`` (a worktree session not finished) was gone
        and is made again (:meth:`~.worktrees.Worktrees.revive`)."""
        worktree = worktree_of(session.worktree)
        if worktree is None or worktree.ended is not None or self.worktrees is None:
            return False
        return self.worktrees.revive(worktree)

    def _choose(self, session: Session, kind: AgentKind, conversation: str) -> None:
        """Make ``conversation`` the one ``session`` resumes: it must be one of its
        folder's (:class:`Conflict` otherwise, or when another session has it)."""
        offered = {c.conversation_id for c in kind.folder_conversations(session, limit=1000)}
        if conversation not in offered:
            raise Conflict(
                f"session {session.id}: {conversation!r} is not a {kind.name} conversation "
                f"of its folder {session.cwd}"
            )
        self.changes.change(session.id, conversation_id=conversation, ambiguous=False)
        session.conversation_id = conversation

    def _restore_backend(self, session: Session) -> Backend:
        """The backend a restore runs in: the session's own, started; the default one
        when that cannot start (e.g. tmux was uninstalled)."""
        try:
            backend = self.backends.get(session.backend)
            backend.start()
        except BackendUnavailable as e:
            backend = self.backends.default()
            self.log.warning(
                "jupyter_agents: restoring session %s in backend %s: %s",
                session.id,
                backend.name,
                e,
            )
        return backend

    def check_resumed(self, session: Session) -> Session:
        """Watch a just-restored session for ``resume_check`` seconds; if it exits in that
        time, it is ``interrupted`` again with why (the last line it printed, e.g. the
        CLI's "No conversation found with session ID", and its exit code; the
        conversation id is kept). Returns the record. Blocking (it sleeps)."""
        backend = self.backends.get(session.backend)
        deadline = time.monotonic() + self.resume_check
        status_deadline: float | None = None
        while True:
            held = {s.session_id: s for s in backend.list_live()}.get(session.id)
            now = time.monotonic()
            if held is None:  # already released by a reconcile elsewhere
                exit_code = self.store.get(session.id).exit_code
                break
            if held.dead:
                # the exit status can lag behind the death (or never come): wait a little
                status_deadline = status_deadline or now + 2.0
                if held.exit_code is not None or now >= status_deadline:
                    exit_code = held.exit_code
                    break
            elif now >= deadline:
                return self.store.get(session.id)
            time.sleep(0.1)
        words = self._last_words(session, backend)
        reason = (
            f"resume failed: {words + ' (' if words else ''}{session.kind} exited at once, "
            f"code {exit_code}{')' if words else ''}; "
            f"conversation id {session.conversation_id or 'unknown'} kept. "
            f"Launched: {' '.join(session.argv)}"
        )
        # interrupted again, not ended: nothing of the old conversation was lost or
        # replaced, and it can be restored once the cause is fixed
        with state_lock(self.state_dir):
            self.changes.set_status(
                session.id,
                "interrupted",
                ("running", "exited"),
                exit_code=exit_code,
                reason=reason,
            )
            backend.remove(session.id)
        self.log.warning("jupyter_agents: session %s: %s", session.id, reason)
        return self.store.get(session.id)

    def _last_words(self, session: Session, backend: Backend, wait: float = 1.0) -> str | None:
        """What the resumed process said last (e.g. ``No conversation found with session
        ID: ...``), from its transcript after the restore's marker line; the output can
        reach the transcript a moment after the process ended, so it waits up to
        ``wait`` seconds for some."""
        transcript = Transcript(session.id, backend.transcript_path(session.id))
        marker = banner(session.kind, session.conversation_id, session.id, None).split(" (")[0]
        deadline = time.monotonic() + wait
        while True:
            words = last_words(transcript.tail(16 * 1024), marker)
            if words is not None or time.monotonic() >= deadline:
                return words
            time.sleep(0.1)

    def restore_many(
        self, session_ids: Sequence[str], progress: Progress | None = None
    ) -> RestoreResult:
        """Restore each of ``session_ids`` (:meth:`restore`), then check them all at once
        (:meth:`check_resumed`). One failure never stops the others. ``progress`` is
        called after each launch (:data:`Progress`)."""
        started: list[Session] = []
        failed: list[tuple[str, str]] = []
        for done, sid in enumerate(session_ids, 1):
            error = None
            try:
                started.append(self.restore(sid))
            except AgentsError as e:
                failed.append((sid, str(e)))
                error = str(e)
            if progress is not None:
                progress(done, len(session_ids), sid, error)
        if not started:
            return RestoreResult([], failed)
        with ThreadPoolExecutor(max_workers=min(8, len(started))) as pool:
            return RestoreResult(list(pool.map(self.check_resumed, started)), failed)
