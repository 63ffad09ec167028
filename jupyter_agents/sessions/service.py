"""The session service: the one place where sessions start, end and change state.

:class:`SessionService` owns the life of every terminal and agent session of a state
dir: create, restore (its :attr:`restorer`: one or many, with the resume check), adopt,
terminate, kill_server, the listing and process gc; its :attr:`refresh`
(:mod:`.refresh`) follows what changes outside requests (conversations, usage, modes,
activity, hook events). It is
synchronous and blocking (it waits on tmux, the broker, SQLite and the state lock), never
tornado-bound: the server calls it from worker threads, the CLI and kernels directly.
Every change it makes is published as a ``SessionEvent`` to the subscribers of its
:attr:`events` (the server turns them into jupyter_events and closes streams of sessions
that ended).

The store and the backends are the truth, shared with other processes on the same state
dir; the service keeps no session state of its own (only, in :class:`GapLog`, which
transcript gaps it has logged).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_agents.acp import proxy_argv
from jupyter_agents.agents.archive import ConversationArchive, ConversationFile
from jupyter_agents.agents.attention import AttentionTracker
from jupyter_agents.agents.base import AgentKind, Launch
from jupyter_agents.backends import Backends
from jupyter_agents.backends.base import SpawnRequest
from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError, Conflict, InvalidRequest, NotFound
from jupyter_agents.core.events import EventAction, EventHub
from jupyter_agents.core.launch import NAME_PATTERN, EnvPolicy, next_free_name, validate_name
from jupyter_agents.core.paths import state_lock
from jupyter_agents.core.procs import (
    SESSION_MARKER,
    MarkedProcess,
    ProcessIdentity,
    identify,
    session_marker,
    stale_processes,
    terminate_tree,
)
from jupyter_agents.core.records import MODES, Session, Status, utcnow_iso
from jupyter_agents.core.store import CLOSE_TIMEOUT, SessionStore, ShareTable, new_session_id
from jupyter_agents.sessions.models import Models
from jupyter_agents.sessions.reconcile import Action, apply_plan
from jupyter_agents.sessions.refresh import Refresh
from jupyter_agents.sessions.requests import PermissionDesk
from jupyter_agents.sessions.restore import (
    TAIL_BYTES,
    Restorer,
    fresh_banner,
    last_words,
    prelude_argv,
    write_prelude,
)
from jupyter_agents.sessions.review import WorktreeReview
from jupyter_agents.sessions.worktrees import Worktree, Worktrees, worktree_of
from jupyter_agents.spend.ledger import UsageLedger
from jupyter_agents.terminal.state import ModeFollower
from jupyter_agents.terminal.transcripts import Transcript
from jupyter_agents.terminal.vt import check_title

ENDED: tuple[Status, ...] = ("exited", "interrupted", "killed")
#: the shortest id prefix :meth:`SessionService.lookup` takes for a whole id
MIN_PREFIX = 4
#: an agent that fails within this many seconds of its start is said to have failed to
#: start (its record gets a reason)
EARLY_EXIT = 10.0


@dataclasses.dataclass
class Report:
    """The actions of one reconcile and when it ran."""

    time: str | None = None
    actions: list[Action] = dataclasses.field(default_factory=list)


class SessionService:
    """Sessions of one state dir (module docstring)."""

    def __init__(
        self,
        store: SessionStore,
        backends: Backends,
        state_dir: Path,
        kinds: dict[str, AgentKind],
        env: EnvPolicy,
        restore_tail_bytes: int = TAIL_BYTES,
        resume_check: float = 3.0,
        log: logging.Logger | None = None,
        archive: ConversationArchive | None = None,
        usage: UsageLedger | None = None,
        worktrees: Worktrees | None = None,
        acp_client_tools: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.backends = backends
        self.state_dir = state_dir
        self.kinds = kinds
        for kind in kinds.values():
            kind.state_dir = state_dir  # where kinds that keep records there find them
        self.env = env
        self.log = log or logging.getLogger("jupyter_agents")
        #: the store's SQLite journal mode (``wal``, or ``delete`` on a network filesystem)
        self.journal = store.journal
        #: the read-only shares and who was admitted through them (:mod:`~.sharing`)
        self.shares: ShareTable = store
        self.last_report = Report()
        #: the reconcile at server start (clients report reattachments from it)
        self.boot_report = Report()
        #: its changes are published here, and other processes' (``publish_external``)
        self.events = EventHub(self.log)
        self.publish = self.events.publish
        #: copies of the agents' conversation files (:mod:`jupyter_agents.agents.archive`)
        self.archive = archive or ConversationArchive(state_dir, log=self.log)
        #: the git worktrees of sessions started in one (:mod:`.worktrees`)
        self.worktrees = worktrees or Worktrees(log=self.log)
        #: what a worktree session did, and its finish (:mod:`.review`)
        self.review = WorktreeReview(store, self.worktrees, self.change, self.terminate, self.log)
        self.restorer = Restorer(
            store,
            backends,
            kinds,
            env,
            self,
            state_dir,
            restore_tail_bytes,
            resume_check,
            self.log,
            archive=self.archive,
            worktrees=self.worktrees,
            acp_client_tools=acp_client_tools,
        )
        #: the client tools ACP sessions started from now on may use (``acp_client_tools``)
        self.acp_client_tools = tuple(acp_client_tools)
        self.attention = AttentionTracker(
            state_dir,
            store,
            kinds,
            self.change,
            self.log,
            self._requests_changed,
            # a /clear seen first by its hook: the conversation left is archived too,
            # as when follow_conversations sees it first
            conversation_left=self.archive.note,
        )
        #: the agents' pending permission requests (their files)
        self.requests = self.attention.requests
        #: what people do with them: list, answer, hand over (:mod:`.requests`)
        self.permissions = PermissionDesk(store, self.requests, self._requests_changed)
        #: what agent sessions spent, and who watched (:mod:`jupyter_agents.spend.ledger`)
        self.usage = usage or UsageLedger(store, log=self.log, kinds=kinds)
        #: the kinds whose CLIs record what they spend
        self.usage_kinds = [name for name, kind in kinds.items() if kind.reports_usage]
        #: the REST models of sessions, with what they spent (:mod:`.models`)
        self.models = Models(
            store,
            kinds,
            env,
            self.usage,
            self.usage_kinds,
            self._transcript,
            self.events.publish,
        )
        #: what each running session's program has set, followed from its transcript
        self.modes = ModeFollower()
        #: what the records learn from outside requests (:mod:`.refresh`)
        self.refresh = Refresh(
            store=store,
            kinds=kinds,
            change=self.change,
            events=self.events,
            reconcile=self.reconcile,
            transcript_of=self._transcript,
            conversation_files=self.conversation_files,
            archive=self.archive,
            attention=self.attention,
            usage=self.usage,
            modes=self.modes,
            log=self.log,
        )
        backends.follow_modes(self.refresh.modes_at)

    def close(self) -> bool:
        """Close the store, and with it the usage ledger's use of it, once the statement
        in flight ends (the backends' sessions keep running); False, with a warning
        logged, if it did not end within
        :data:`~jupyter_agents.core.store.CLOSE_TIMEOUT` (the store is then left open:
        :meth:`~jupyter_agents.core.store.SessionStore.close`)."""
        if self.store.close(CLOSE_TIMEOUT):
            return True
        self.log.warning(
            "jupyter_agents: the session store was still in use after %.0f s; "
            "left open (never closed under a running statement)",
            CLOSE_TIMEOUT,
        )
        return False

    # -- events ------------------------------------------------------------------------

    def change(
        self,
        session_id: str,
        action: EventAction | None = None,
        *,
        expect: Iterable[Status] | None = None,
        was: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Session | None:
        """The one place a session record changes (a :class:`~jupyter_agents.core.events.
        Changer`): set ``fields`` (compare-and-set while its status is one of ``expect``
        and the fields in ``was`` still hold those values) and, with ``action``, publish
        the record as it is now (a ``status`` event with the status it had). The new
        record, or None when nothing changed (an unknown id, another status, another
        value): then nothing is published. :class:`Conflict` for a live name or
        conversation id of another session."""
        expected = None if expect is None else tuple(expect)
        previous: Status | None = None
        if action == "status":
            with contextlib.suppress(NotFound):
                previous = self.store.get(session_id).status
        if not self.store.update(session_id, expect=expected, was=was, **fields):
            return None
        session = self.store.get(session_id)
        if action is not None:
            self.publish(action, session, previous)
        return session

    def set_status(
        self, session_id: str, status: Status, expect: Iterable[Status], **fields: Any
    ) -> Session | None:
        """Change a record's status (compare-and-set on ``expect``) and publish it; the
        new record, or None when it was not in an expected status."""
        before = self.store.get(session_id)
        after = self.change(session_id, "status", status=status, expect=tuple(expect), **fields)
        if after is None:
            return None
        ended = before.status == "running" and status != "running"
        if ended and self.requests.close_session(session_id, "the session ended"):
            self.publish("request", after)
        return after

    # -- permission requests -----------------------------------------------------------

    def _requests_changed(self, session_id: str) -> None:
        with contextlib.suppress(NotFound):
            self.publish("request", self.store.get(session_id))

    # -- reading -----------------------------------------------------------------------

    def reconcile(self, boot: bool = False) -> list[Action]:
        """Match the store with the backends now (:mod:`~jupyter_agents.sessions.reconcile`); log
        and publish what changed. At boot every decision is logged."""
        actions = apply_plan(
            self.store,
            self.change,
            self.backends,
            self.state_dir,
            self.log,
            exit_reason=self._early_exit,
        )
        self.last_report = Report(utcnow_iso(), actions)
        if boot:
            self.boot_report = self.last_report
            counts = {
                k: sum(a.kind == k for a in actions)
                for k in ("reattach", "interrupt", "orphan", "exit", "release")
            }
            self.log.info("jupyter_agents: reconciled at start: %s", counts)
            self._note_lost_worktrees()
        changed = {a.session_id: a for a in actions if a.kind in ("exit", "interrupt", "orphan")}
        for action in actions:
            if boot or action.session_id in changed:
                self.log.info("jupyter_agents: %s", action.describe())
        self.requests.sweep()  # left by hooks killed with their CLI
        for session in self.store.get_many(changed):
            was = changed[session.id].was
            self.publish("created" if was is None else "status", session, was)
            if session.status != "running":
                self.requests.close_session(session.id, "the session ended")
        return actions

    def list(
        self, statuses: Iterable[Status] | None = None, kinds: Iterable[str] | None = None
    ) -> builtins.list[Session]:
        """Every record (of ``statuses`` and ``kinds``), oldest first, as the store holds
        it: a read, which writes and publishes nothing (what ended or changed unwatched is
        found by :attr:`refresh` and the server's exit watch)."""
        return self.store.list(statuses, kinds)

    def terminals(self) -> builtins.list[Session]:
        """The running sessions (the terminals), as the store holds them."""
        return self.store.list(["running"])

    def get(self, session_id: str) -> Session:
        """The record with this id; :class:`NotFound` if there is none."""
        return self.store.get(session_id)

    def terminal(self, name: str) -> Session:
        """The running session whose terminal is called ``name``; :class:`NotFound`."""
        if (session := self.store.find_live(name)) is None:
            raise NotFound(f"no terminal named {name!r}")
        return session

    def lookup(self, ref: str) -> Session:
        """A session by id; else the running session whose terminal is called ``ref``;
        else the newest session whose terminal was called so; else the one session whose
        id starts with ``ref`` (at least :data:`MIN_PREFIX` characters, as git takes
        hashes). :class:`NotFound` otherwise, naming the ids when a prefix fits several."""
        try:
            return self.store.get(ref)
        except NotFound:
            pass
        if (session := self.store.find_live(ref)) is not None:
            return session
        records = self.store.list()
        named = [s for s in records if s.name == ref]
        if named:
            return max(named, key=lambda s: (s.created, s.id))
        fits = [s for s in records if len(ref) >= MIN_PREFIX and s.id.startswith(ref)]
        if len(fits) > 1:
            raise NotFound(
                f"{ref!r} is the start of {len(fits)} session ids: "
                + ", ".join(s.id for s in fits[:5])
                + (", ..." if len(fits) > 5 else "")
            )
        if not fits:
            raise NotFound(f"no session with id, id prefix or terminal name {ref!r}")
        return fits[0]

    def interrupted(self, kinds: Iterable[str] | None = None) -> builtins.list[Session]:
        """The ``interrupted`` sessions (of ``kinds`` if given), oldest first."""
        return self.store.list(["interrupted"], kinds)

    def interrupted_terminal(self, name: str) -> Session | None:
        """The newest session whose terminal was called ``name``, if it is
        ``interrupted`` and no running terminal has that name now."""
        if self.store.find_live(name) is not None:
            return None
        named = [s for s in self.store.list() if s.name == name]
        return named[-1] if named and named[-1].status == "interrupted" else None

    def _kind(self, name: object) -> AgentKind:
        """The agent kind called ``name``; :class:`InvalidRequest` listing the known ones."""
        if isinstance(name, str) and name in self.kinds:
            return self.kinds[name]
        raise InvalidRequest(
            f"unknown session kind {str(name)[:40]!r}; known kinds: {', '.join(self.kinds)}"
        )

    def transcript(self, session_id: str) -> Transcript:
        """The transcript of a recorded session (:class:`NotFound` for unknown ids)."""
        return self._transcript(self.store.get(session_id))

    def _transcript(self, session: Session) -> Transcript:
        return Transcript(
            session.id, self.backends.get(session.backend).transcript_path(session.id)
        )

    def conversation_files(self, session: Session) -> builtins.list[ConversationFile]:
        """The files ``session``'s conversations are read from, oldest first, by the
        archive's one rule (:meth:`~jupyter_agents.agents.archive.ConversationArchive.files`):
        the CLI's own, or their archived copies where those hold more (e.g. the CLI
        deleted its file). Search, the export and the usage ledger read these."""
        kind = self.kinds.get(session.kind)
        live = [] if kind is None else kind.conversation_files(session)
        return self.archive.files(session, live)

    def rename(self, session_id: str, title: object) -> Session:
        """Give a session a person's title (:func:`~jupyter_agents.terminal.vt.check_title`;
        None or empty: clear it, so the program's shows again); published."""
        title = check_title(title)
        return self.change(session_id, "title", title=title) or self.store.get(session_id)

    # -- starting ----------------------------------------------------------------------

    def create(
        self,
        name: str | None = None,
        cwd: object = None,
        kind: str = "shell",
        args: object = None,
        strict: bool = False,
        after: Session | None = None,
        worktree: object = None,
        mode: object = "terminal",
    ) -> tuple[Session, bool]:
        """Start a session of ``kind`` (a shell by default), or return the running one
        already called ``name`` (``strict``: refuse with :class:`Conflict`; a ``cwd``
        that is not a directory is refused too instead of falling back to the root).

        ``after``: an earlier session whose transcript's tail the new terminal shows
        first, with a marker line (:meth:`start_fresh`). ``worktree``: True (or a branch
        name) starts it in a new git worktree of ``cwd``'s repository
        (:meth:`~.worktrees.Worktrees.add`), in the same folder within it; removed
        again if the session cannot start. A :class:`~.worktrees.Worktree`: it goes on
        in that existing worktree, in its folder (``cwd`` ignored; made again from its
        branch if it was removed by hand), which is never removed here.

        ``mode``: ``terminal`` (the default) or ``acp``: the kind's ACP agent held by
        a proxy (:mod:`jupyter_agents.acp`), which is then the session's program;
        :class:`InvalidRequest` for a kind with no ACP mode.

        Returns ``(session, created)``. Everything is validated before anything runs;
        the process is started and recorded under the state lock, so a concurrent
        reconcile never sees one without the other.
        """
        if name is not None:
            validate_name(name)
        inherited = worktree if isinstance(worktree, Worktree) else None
        loose = worktree not in (None, False, True) and not isinstance(worktree, str)
        if inherited is None and loose:
            raise InvalidRequest("worktree must be true, false or a branch name")
        if mode not in MODES:
            raise InvalidRequest(f"mode must be 'terminal' or 'acp', got {mode!r}")
        agent = self._kind(kind)
        checked = agent.check_args(args)
        acp_agent = agent.acp_launch(checked) if mode == "acp" else None
        if inherited is not None:
            self.worktrees.revive(inherited)  # its folder removed by hand: made again
            cwd = inherited.cwd
        workdir = self.env.resolve_cwd(cwd, strict=strict or bool(worktree))
        launch = agent.launch(checked) if acp_agent is None else Launch(acp_agent)
        env = self.env.environment()
        why = agent.unavailable(env.get("PATH"), str(mode))
        if why is not None:
            raise Conflict(f"cannot start a {agent.name} session: {why}")
        backend = self.backends.default()
        if name is not None and self.store.find_live(name) is not None and (strict or worktree):
            raise Conflict(f"a running session is already called {name!r}")
        session_id = new_session_id()
        made: Worktree | None = None
        if worktree and inherited is None:
            branch = worktree if isinstance(worktree, str) else None
            made = self.worktrees.add(workdir, session_id, branch)
            workdir = made.cwd
        tree = made or inherited
        try:
            with state_lock(self.state_dir):
                if name is not None:
                    existing = self.store.find_live(name)
                    if existing is not None:
                        if strict or made is not None:
                            raise Conflict(f"a running session is already called {name!r}")
                        return existing, False
                else:
                    name = next_free_name(self.store.live_names())
                session = Session(
                    id=session_id,
                    name=name,
                    status="running",
                    backend=backend.name,
                    kind=agent.name,
                    cwd=workdir,
                    args=checked,
                    env=env,
                    rows=24,
                    cols=80,
                    worktree=None if tree is None else tree.to_record(),
                    mode=str(mode),
                )
                session.attention_source = agent.reports
                argv = agent.with_reporting(launch.argv, self.state_dir, session.id)
                if acp_agent is not None:  # its proxy spools what hooks would
                    session.attention_source = "acp"
                    argv = proxy_argv(
                        self.state_dir, session.id, workdir, acp_agent, None, self.acp_client_tools
                    )
                if after is not None:
                    shown = write_prelude(
                        self.state_dir,
                        session,
                        self._transcript(after),
                        self.restorer.tail_bytes,
                        fresh_banner(agent.name, after),
                    )
                    self._transcript(session).mark_replay(shown.read_bytes())
                    argv = prelude_argv(shown, argv)
                self.launch(session, launch, argv, was=None)
        except BaseException:
            if made is not None:
                self.worktrees.remove(made, force=True)
            raise
        if agent.reports_usage:
            self.usage.track(session)
        self.publish("created", session)
        return self.launched(session), True

    # -- worktrees ---------------------------------------------------------------------

    def _note_lost_worktrees(self) -> None:
        """At boot: a session whose worktree was removed outside jupyter_agents says so
        in its reason (a restore makes the worktree again from its branch)."""
        for session in self.store.list(["running", "interrupted", "exited", "orphaned"]):
            worktree = worktree_of(session.worktree)
            if worktree is None or worktree.ended is not None or Path(worktree.path).is_dir():
                continue
            reason = (
                f"its worktree {worktree.path} was removed outside jupyter_agents; a restore "
                f"makes it again from branch {worktree.branch}"
            )
            if session.reason != reason:
                self.change(session.id, reason=reason)
                self.log.warning("jupyter_agents: session %s: %s", session.id, reason)

    def start_fresh(self, session_id: str) -> Session:
        """A new session of an ended session's kind, in its folder, with its launch
        args, whose terminal first shows the end of the old one's transcript: a fresh
        start where a conversation cannot be resumed. The old record stays as it is
        (its id, conversation id and reason), except that an unfinished worktree passes
        to the new session (the old one's says it was handed on); :class:`Conflict`
        while it still runs."""
        earlier = self.store.get(session_id)
        if earlier.status not in ENDED:
            raise Conflict(f"session {session_id} is {earlier.status}; it has not ended")
        tree = worktree_of(earlier.worktree)
        if tree is not None and tree.ended is not None:
            tree = None  # merged or discarded: nothing to go on in; its folder is asked
        session, _ = self.create(
            cwd=earlier.cwd,
            kind=earlier.kind,
            args=earlier.args,
            strict=True,
            after=earlier,
            worktree=tree,
        )
        if tree is not None:  # one session owns a worktree: the new one reviews, finishes
            handed = dataclasses.replace(tree, ended=f"handed on to session {session.id}")
            self.change(session_id, "updated", worktree=handed.to_record())
        self.log.info(
            "jupyter_agents: session %s started fresh after session %s", session.id, session_id
        )
        return session

    def launch(
        self, session: Session, launch: Launch, argv: builtins.list[str], was: Status | None
    ) -> None:
        """Spawn ``argv`` for ``session`` in its backend and record it running (under the
        state lock). ``was`` None: a new record; else (a restore) the record is updated
        only while its status is still ``was``, and what its agent needed is cleared:
        the new process has been asked nothing (its start hook says ``ready``), and hook
        events of the old one, older than the launch, are not applied any more."""
        backend = self.backends.get(session.backend)
        launched = utcnow_iso()  # before the process runs: its first hook event is newer
        self.attention.launching(session.id)
        marker = session_marker(session.id, str(self.state_dir))
        kind = self.kinds.get(session.kind)
        reporting = {} if kind is None else kind.reporting_env(self.state_dir, session.id)
        live = backend.spawn(
            SpawnRequest(
                session.id,
                argv,
                session.cwd or str(Path.home()),
                {
                    **(session.env or {}),
                    **reporting,
                    SESSION_MARKER: marker,
                },
                session.rows or 24,
                session.cols or 80,
            )
        )
        try:
            ident = identify(live.pid) if live.pid else None
            fields: dict[str, Any] = {
                "status": "running",
                "argv": launch.argv,
                "pid": live.pid,
                "pid_created": ident.created if ident else None,
                "conversation_id": launch.conversation_id or session.conversation_id,
                "ambiguous": launch.ambiguous,
                "exit_code": None,
                "reason": None,
                "last_activity": utcnow_iso(),
            }
            if was is None:
                for key, value in fields.items():
                    setattr(session, key, value)
                self.store.add(session)
            else:
                fields.update(
                    name=session.name,
                    attention=None,
                    attention_reason=None,
                    attention_since=launched,
                )
                if not self.change(session.id, expect=(was,), **fields):
                    raise Conflict(f"session {session.id} changed while it was being restored")
                for key, value in fields.items():
                    setattr(session, key, value)
        except BaseException:
            backend.remove(session.id)
            raise
        self.log.info(
            "jupyter_agents: %s %s session %s (terminal %r, pid %s%s) in %s",
            "spawned" if was is None else "restored",
            session.kind,
            session.id,
            session.name,
            live.pid,
            f", conversation {launch.conversation_id}" if launch.conversation_id else "",
            session.cwd,
        )

    def launched(self, session: Session) -> Session:
        """``session`` once the hook events its new process spooled while it was launched
        are applied (:meth:`~.attention.AttentionTracker.launched`): call it after the
        launch's own event is published, so that subscribers see the record first."""
        if not self.attention.launched(session.id):
            return session
        return self.store.get(session.id)

    # -- changing ----------------------------------------------------------------------

    def adopt(self, session_id: str) -> Session:
        """Make an ``orphaned`` session (live in its backend, not recorded as running) a
        normal running terminal, keeping its name when free. :class:`Conflict` if it is
        not orphaned or no longer live."""
        with state_lock(self.state_dir):
            session = self.store.get(session_id)
            if session.status != "orphaned":
                raise Conflict(f"session {session_id} is {session.status}, not orphaned")
            backend = self.backends.get(session.backend)
            held = {s.session_id: s for s in backend.list_live()}.get(session_id)
            if held is None or held.dead:
                raise Conflict(f"session {session_id} has no live process to adopt")
            name = session.name
            if not NAME_PATTERN.fullmatch(name) or self.store.find_live(name) is not None:
                name = next_free_name(self.store.live_names())
            adopted = self.set_status(session_id, "running", ("orphaned",), name=name)
            if adopted is None:
                raise Conflict(f"session {session_id} changed while being adopted")
        self.log.info("jupyter_agents: adopted session %s as terminal %r", session_id, name)
        return adopted

    def terminate(self, session_id: str, reason: str | None = None) -> Session:
        """End a running or orphaned session: record ``killed`` (with ``reason``), end
        its process tree (only if pid and start time still match), release it."""
        session = self.store.get(session_id)
        if session.status not in ("running", "orphaned"):
            raise Conflict(f"session {session_id} is {session.status}, not running")
        with state_lock(self.state_dir):
            ended = self.set_status(
                session.id, "killed", (session.status,), last_activity=utcnow_iso(), reason=reason
            )
        if ended is None:
            raise Conflict(f"session {session.id} changed; not killed")
        if session.pid and session.pid_created:
            terminate_tree(ProcessIdentity(session.pid, session.pid_created))
            self.requests.sweep()  # its hooks died with it: what they showed goes too
        self.backends.get(session.backend).remove(session.id)
        self.log.info(
            "jupyter_agents: killed session %s (terminal %r, pid %s)%s",
            session.id,
            session.name,
            session.pid,
            f": {reason}" if reason else "",
        )
        return ended

    def record_exit(self, session_id: str, exit_code: int) -> None:
        """A streamed session's process ended with ``exit_code``: record it, release it.
        An agent that failed within :data:`EARLY_EXIT` seconds of its start gets a
        ``reason``: its exit code and what it printed last (``aider: not found``)."""
        reason = self._early_exit(session_id, exit_code)
        with state_lock(self.state_dir):
            ended = self.set_status(
                session_id, "exited", ("running",), exit_code=exit_code, reason=reason
            )
            if ended is not None:
                self.backends.get(ended.backend).remove(session_id)
        if ended is not None:
            self.requests.sweep()
            self.log.info(
                "jupyter_agents: session %s (terminal %r) exited (code %s)",
                session_id,
                ended.name,
                exit_code,
            )

    def _early_exit(self, session_id: str, exit_code: int) -> str | None:
        """The reason of an agent (not a shell) that exited with an error within
        :data:`EARLY_EXIT` seconds of its start; None otherwise. Blocking (waits up to
        3 s for its last output to reach the transcript: a loaded machine's writer)."""
        session = self.store.get(session_id)
        if session.kind == "shell" or exit_code == 0 or session.reason:
            return None
        try:  # this process's start (a restore's), else the session's first
            started = (
                clock.from_epoch(session.pid_created)
                if session.pid_created is not None
                else clock.parse(session.created)
            )
        except ValueError:
            return None
        lived = (clock.now() - started).total_seconds()
        if lived > EARLY_EXIT:
            return None
        transcript = self._transcript(session)
        deadline = time.monotonic() + 3.0  # its last output may land a moment later
        while (words := last_words(transcript.tail(16 * 1024), None)) is None:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        said = f": {words}" if words else ""
        return f"{session.kind} exited {lived:.0f} s after it started (code {exit_code}){said}"

    def kill_server(self) -> builtins.list[str]:
        """Emergency stop of every backend of this state dir: every session ends,
        running and orphaned records become ``killed``, transcripts stay. Their ids."""
        with state_lock(self.state_dir):
            ended = self.store.list(["running", "orphaned"])
            names = {s.backend for s in ended} | {b.name for b in self.backends.present()}
            for name in sorted(names):
                try:
                    self.backends.get(name).kill_server()
                except AgentsError as e:
                    self.log.error("jupyter_agents: could not stop backend %s: %s", name, e)
            for session in ended:
                self.set_status(
                    session.id,
                    "killed",
                    ("running", "orphaned"),
                    last_activity=utcnow_iso(),
                    reason="backend stopped by kill-server",
                )
        self.log.warning(
            "jupyter_agents: backends %s killed; %d sessions ended", sorted(names), len(ended)
        )
        return [s.id for s in ended]

    def stale_processes(self) -> builtins.list[MarkedProcess]:
        """Processes left by sessions that no longer run (:func:`procs.stale_processes`)."""
        live = {s.session_id for b in self.backends.present() for s in b.list_live() if not s.dead}
        records = {s.id: s.status for s in self.store.list()}
        return stale_processes(str(self.state_dir), live, records)

    def gc(self, stale: Iterable[MarkedProcess]) -> builtins.list[MarkedProcess]:
        """End the process trees of ``stale``, each only if its pid still has the
        recorded create time. Returns the ones signalled."""
        ended = [m for m in stale if terminate_tree(m.identity)]
        for m in ended:
            self.log.info(
                "jupyter_agents: gc ended pid %s of session %s", m.identity.pid, m.session_id
            )
        return ended
