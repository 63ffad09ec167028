"""The terminals front: a TerminalManager over the store and a backend, and the
``/api/terminals`` + ``/terminals/websocket/<name>`` handlers that speak the terminado
protocol the way JupyterLab expects (DESIGN.md section 4).

Protocol, in one place: JSON text frames ``[type, ...]``. Server -> client:
``["setup", {}]`` first, then ``["stdout", text]`` (the first one a replay that redraws
the screen from a reset), ``["disconnect", 1]`` when the process ended. Client ->
server: ``["stdin", text]``, ``["set_size", rows, cols, height_px, width_px]``; anything
else is ignored.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Protocol

import psutil
from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.utils import warn_disabled_authorization
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler
from traitlets import Dict, Float, Int, List, Unicode
from traitlets.config import LoggingConfigurable

from . import restore
from .agents import AgentKind, Launch, make_kinds
from .backends.base import Backend, SpawnRequest
from .errors import AgentsError, Conflict, InvalidRequest, NotFound, http_error
from .paths import create_private_file, state_lock
from .procs import (
    SESSION_MARKER,
    MarkedProcess,
    ProcessIdentity,
    children_map,
    descendants,
    identify,
    marked_processes,
    matches,
    session_marker,
    terminate_tree,
)
from .reconcile import Action, plan
from .store import Session, SessionStore, Status, new_session_id, utcnow_iso

AUTH_RESOURCE = "terminals"
NAME_PATTERN = re.compile(r"\w{1,64}")
MAX_ROWS, MAX_COLS = 1000, 2000


# -- pure helpers -----------------------------------------------------------------------


def validate_name(name: object) -> str:
    """A terminal name as given by a client, or :class:`InvalidRequest`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        shown = repr(name)[:80]
        raise InvalidRequest(
            f"invalid terminal name {shown}: use 1-64 letters, digits or underscores"
        )
    return name


def next_free_name(taken: Iterable[str]) -> str:
    """The smallest positive integer not in ``taken``, as a string ("1" first)."""
    used = set(taken)
    n = 1
    while str(n) in used:
        n += 1
    return str(n)


def parse_message(raw: str | bytes) -> tuple[str, Any, Any] | None:
    """Validate one client frame -> ``("stdin", text, None)`` or ``("set_size", rows,
    cols)``; None for anything malformed or unknown (which the socket ignores)."""
    if not isinstance(raw, str):
        return None
    try:
        msg = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
        return None
    if msg[0] == "stdin" and len(msg) >= 2 and isinstance(msg[1], str):
        return ("stdin", msg[1], None)
    if msg[0] == "set_size" and len(msg) >= 3:
        rows, cols = msg[1], msg[2]
        if (
            type(rows) is int
            and type(cols) is int
            and 0 < rows <= MAX_ROWS
            and 0 < cols <= MAX_COLS
        ):
            return ("set_size", rows, cols)
    return None


def scrubbed_env(environ: dict[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """``environ`` without the names matching any of ``patterns`` (fnmatch, case-sensitive)."""
    pats = list(patterns)
    return {k: v for k, v in environ.items() if not any(fnmatchcase(k, p) for p in pats)}


# -- live terminals in this process ---------------------------------------------------


class Viewer(Protocol):
    """A connected client (the websocket handler)."""

    def send(self, message: str) -> None: ...

    def close(self) -> None: ...


class Terminal:
    """The streaming side of one session in this server process: its backend stream
    and its connected viewers. Exists while at least one viewer is connected."""

    def __init__(self, manager: TerminalManager, session: Session) -> None:
        self.manager = manager
        self.session = session
        self.viewers: dict[Viewer, tuple[int, int] | None] = {}
        self._active: list[Viewer] = []
        self._size: tuple[int, int] | None = None
        self.stream = manager.backend.attach(session.id, self)

    def add_viewer(self, viewer: Viewer) -> None:
        """Send ``setup``, then the replay in stream order, then live output."""
        self.viewers[viewer] = None
        viewer.send(json.dumps(["setup", {}]))

        def replay(text: str) -> None:
            if viewer in self.viewers:
                viewer.send(json.dumps(["stdout", text]))
                self._active.append(viewer)

        self.stream.snapshot(replay)

    def remove_viewer(self, viewer: Viewer) -> None:
        if viewer not in self.viewers:
            return
        del self.viewers[viewer]
        if viewer in self._active:
            self._active.remove(viewer)
        if self.viewers:
            self._apply_size()
        else:
            self.manager.release(self)

    def set_size(self, viewer: Viewer, rows: int, cols: int) -> None:
        """Remember this viewer's size; the session gets the smallest of all viewers."""
        if viewer in self.viewers:
            self.viewers[viewer] = (rows, cols)
            self._apply_size()

    def _apply_size(self) -> None:
        sizes = [s for s in self.viewers.values() if s is not None]
        if not sizes:
            return
        size = (min(r for r, _ in sizes), min(c for _, c in sizes))
        if size != self._size:
            self._size = size
            self.stream.resize(*size)
            self.manager.store.update(self.session.id, rows=size[0], cols=size[1])

    def write(self, data: str) -> None:
        self.stream.write(data)
        self.manager.touch(self.session)

    def close(self, disconnect: bool) -> None:
        """Stop streaming; tell viewers the process ended (``disconnect``) or just drop
        them (they reconnect by themselves)."""
        viewers = list(self.viewers)
        self.viewers.clear()
        self._active.clear()
        self.stream.close()
        for viewer in viewers:
            if disconnect:
                viewer.send(json.dumps(["disconnect", 1]))
            viewer.close()

    # StreamListener
    def on_output(self, data: str) -> None:
        if self._active:
            message = json.dumps(["stdout", data])
            for viewer in self._active:
                viewer.send(message)
        self.manager.touch(self.session)

    def on_exit(self, exit_code: int | None) -> None:
        self.manager.stream_ended(self, exit_code)


# -- the manager ----------------------------------------------------------------------


class TerminalManager(LoggingConfigurable):
    """Terminals as records in the store plus sessions in a backend.

    The store and the backend are the truth, shared with other processes on the same
    state dir; this object holds only the streams of terminals that have viewers here.
    """

    shell_command = List(Unicode(), help="argv of a new terminal's shell.").tag(config=True)
    extra_env = Dict(Unicode(), help="Variables added to every session's environment.").tag(
        config=True
    )
    scrub_env = List(
        Unicode(),
        help="Variable names (fnmatch patterns) removed from every session's environment.",
    )
    root_dir = Unicode(help="Default cwd of new terminals; relative cwds resolve against it.")
    activity_interval = Float(
        10.0, help="Seconds between writes of a session's last_activity to the store."
    )
    restore_tail_bytes = Int(
        restore.TAIL_BYTES,
        help="Bytes of the old transcript a restored terminal shows before the new process.",
    ).tag(config=True)
    resume_check = Float(
        3.0,
        help="Seconds a restored process is watched: exiting within them marks the "
        "restore as failed (with the reason; the conversation id is kept).",
    ).tag(config=True)

    def __init__(
        self,
        store: SessionStore,
        backend: Backend,
        state_dir: Path,
        on_activity: Callable[[], None] | None = None,
        kinds: dict[str, AgentKind] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.backend = backend
        self.state_dir = state_dir
        self.kinds = kinds if kinds is not None else make_kinds(self.shell_command, {})
        self.terminals: dict[str, Terminal] = {}
        self.last_report: list[Action] = []
        self.last_reconcile: str | None = None
        #: the decisions of the reconcile at server start (clients report re-adoptions)
        self.boot_report: list[Action] = []
        self.boot_reconcile: str | None = None
        self._on_activity = on_activity
        self._flushed: dict[str, float] = {}

    # -- reconcile ---------------------------------------------------------------------

    def reconcile(self, boot: bool = False) -> list[Action]:
        """Apply :func:`reconcile.plan` under the state lock; log and keep the report.

        At boot every decision is logged; later only the changes.
        """
        with state_lock(self.state_dir):
            live = self.backend.list_live()
            records = self.store.list(["running", "orphaned"])
            known = {r.id for r in records}
            records += self.store.get_many(s.session_id for s in live if s.session_id not in known)
            actions = plan(records, live, datetime.now(timezone.utc))
            for action in actions:
                self._apply(action)
        self.last_report = actions
        self.last_reconcile = utcnow_iso()
        if boot:
            self.boot_report, self.boot_reconcile = actions, self.last_reconcile
        for action in actions:
            if boot or action.kind != "adopt":
                self.log.info("jupyter_agents: %s", action.describe())
        if boot:
            counts = {
                k: sum(a.kind == k for a in actions)
                for k in ("adopt", "interrupt", "orphan", "exit", "release")
            }
            self.log.info("jupyter_agents: reconciled at start: %s", counts)
        for action in actions:
            term = self.terminals.get(action.session_id)
            if term is not None and action.kind in ("exit", "interrupt", "orphan"):
                self.terminals.pop(action.session_id, None)
                term.close(disconnect=action.kind != "orphan")
        return actions

    def _apply(self, action: Action) -> None:
        sid = action.session_id
        if action.kind == "exit":
            self.store.update(
                sid, status="exited", exit_code=action.exit_code, expect=("running", "orphaned")
            )
            self.backend.remove(sid)
        elif action.kind == "interrupt":
            self.store.update(sid, status="interrupted", expect=("running", "orphaned"))
        elif action.kind == "release":
            self.backend.remove(sid)
        elif action.kind == "orphan":
            ident = identify(action.pid) if action.pid else None
            if action.was is None:
                self.store.add(
                    Session(
                        id=sid,
                        name=action.name,
                        status="orphaned",
                        backend=self.backend.name,
                        pid=action.pid,
                        pid_created=ident.created if ident else None,
                    )
                )
            else:
                self.store.update(sid, status="orphaned", expect=(action.was,))

    # -- terminals API -----------------------------------------------------------------

    def list(self) -> builtins.list[Session]:
        """Running terminals, after a quick reconcile so ended ones drop out."""
        self.reconcile()
        return self.store.list(["running"])

    def get(self, name: str) -> Session:
        """The running terminal called ``name``; :class:`NotFound` otherwise."""
        session = self.store.find_live(name)
        if session is None:
            raise NotFound(f"no terminal named {name!r}")
        return session

    def lookup(self, ref: str) -> Session:
        """A session by id, else the running session whose terminal is called ``ref``."""
        try:
            return self.store.get(ref)
        except NotFound:
            session = self.store.find_live(ref)
            if session is None:
                raise NotFound(f"no session with id or running terminal name {ref!r}") from None
            return session

    def model(self, session: Session) -> dict[str, Any]:
        """The stock terminals REST model."""
        return {"name": session.name, "last_activity": session.last_activity}

    def resolve_cwd(self, cwd: object, strict: bool = False) -> str:
        """Like jupyter_server_terminals: absolute, or relative to the server root; a
        path that does not exist (or is not a string) falls back to the root, or with
        ``strict`` is refused with :class:`InvalidRequest`."""
        root = Path(self.root_dir or os.getcwd()).expanduser()
        if cwd is None or cwd == "":
            return str(root.resolve())
        if isinstance(cwd, str) and "\0" not in cwd:
            for candidate in (Path(cwd), root / cwd):
                try:  # a name too long, "~nosuchuser"...: not an existing directory
                    candidate = candidate.expanduser()
                    if candidate.is_absolute() and candidate.is_dir():
                        return str(candidate.resolve())
                except (OSError, RuntimeError):
                    continue
        if strict:
            raise InvalidRequest(f"cwd {str(cwd)[:200]!r} is not an existing directory")
        self.log.info("jupyter_agents: requested cwd %r does not exist; using %s", cwd, root)
        return str(root.resolve())

    def session_env(self, recorded: dict[str, str] | None = None) -> dict[str, str]:
        """A new process's environment: this server's (or ``recorded``, a session's
        launch environment) scrubbed, plus ``extra_env``."""
        base = dict(os.environ) if recorded is None else recorded
        env = scrubbed_env(base, self.scrub_env)
        env.update(self.extra_env)
        return env

    def kind(self, name: object) -> AgentKind:
        """The agent kind called ``name``; :class:`InvalidRequest` listing the known ones."""
        if isinstance(name, str) and name in self.kinds:
            return self.kinds[name]
        raise InvalidRequest(
            f"unknown session kind {str(name)[:40]!r}; known kinds: {', '.join(self.kinds)}"
        )

    def create(
        self,
        name: str | None = None,
        cwd: object = None,
        kind: str = "shell",
        args: object = None,
        strict: bool = False,
    ) -> tuple[Session, bool]:
        """Start a session of ``kind`` (a shell by default), or return the running one
        already called ``name`` (``strict``: refuse with :class:`Conflict`; a ``cwd``
        that is not a directory is refused too instead of falling back to the root).

        Returns ``(session, created)``. Everything is validated before anything runs.
        The process is started and recorded under the state lock, so a concurrent
        reconcile never sees one without the other.
        """
        if name is not None:
            validate_name(name)
        agent = self.kind(kind)
        checked = agent.check_args(args)
        workdir = self.resolve_cwd(cwd, strict=strict)
        launch = agent.launch(checked)
        env = self.session_env()
        with state_lock(self.state_dir):
            if name is not None:
                existing = self.store.find_live(name)
                if existing is not None:
                    if strict:
                        raise Conflict(f"a running session is already called {name!r}")
                    return existing, False
            else:
                name = next_free_name(self.store.live_names())
            session = Session(
                id=new_session_id(),
                name=name,
                status="running",
                backend=self.backend.name,
                kind=agent.name,
                cwd=workdir,
                args=checked,
                env=env,
                rows=24,
                cols=80,
            )
            self._launch(session, launch, launch.argv, was=None)
        return session, True

    def _launch(
        self, session: Session, launch: Launch, argv: builtins.list[str], was: Status | None
    ) -> None:
        """Spawn ``argv`` for ``session`` and record it as running (under the state lock).

        ``was`` None: a new record is added. Otherwise (a restore) the record is updated
        only while its status is still ``was``.
        """
        live = self.backend.spawn(
            SpawnRequest(
                session.id,
                argv,
                session.cwd or str(Path.home()),
                {
                    **(session.env or {}),
                    SESSION_MARKER: session_marker(session.id, str(self.state_dir)),
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
                fields["name"] = session.name
                if not self.store.update(session.id, expect=(was,), **fields):
                    raise Conflict(f"session {session.id} changed while it was being restored")
                for key, value in fields.items():
                    setattr(session, key, value)
        except BaseException:
            self.backend.remove(session.id)
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

    # -- agent sessions ----------------------------------------------------------------

    def restore(self, session_id: str) -> Session:
        """Relaunch an ended session in its cwd with its recorded environment: agents
        resume their conversation, shells start fresh. The terminal first shows the old
        transcript's tail and a marker line (:mod:`jupyter_agents.restore`).

        :class:`Conflict` if the session still runs (or is orphaned: adopt it instead),
        its cwd is gone or its kind is no longer configured. Under the state lock, so
        two concurrent restores of one session launch one process.
        """
        with state_lock(self.state_dir):
            session = self.store.get(session_id)
            if session.status in ("running", "orphaned"):
                hint = " (adopt an orphaned one)" if session.status == "orphaned" else ""
                raise Conflict(
                    f"session {session_id} is {session.status}; only ended sessions can be "
                    f"restored{hint}"
                )
            held = {s.session_id: s for s in self.backend.list_live()}.get(session_id)
            if held is not None and not held.dead:
                raise Conflict(f"session {session_id} still has a live process (pid {held.pid})")
            if held is not None:
                self.backend.remove(session_id)
            if session.kind not in self.kinds:
                raise Conflict(f"session {session_id}: kind {session.kind!r} is not configured")
            if not session.cwd or not Path(session.cwd).is_dir():
                reason = f"cannot restore: its working directory {session.cwd!r} is gone"
                self.store.update(session_id, reason=reason)
                raise Conflict(f"session {session_id}: {reason}")
            env = self.session_env(session.env)
            launch = self.kinds[session.kind].resume(session, env)
            if self.store.find_live(session.name) is not None:
                session.name = next_free_name(self.store.live_names())
            marker = restore.banner(
                session.kind,
                session.conversation_id,
                session.id,
                restore.transcript_end(self.backend.transcript_path(session.id)),
            )
            prelude_file = self.state_dir / f"prelude-{session.id}"
            create_private_file(prelude_file)
            prelude_file.write_bytes(
                restore.prelude(
                    self.backend.transcript_path(session.id), marker, self.restore_tail_bytes
                )
            )
            session.env = env
            try:
                self._launch(
                    session,
                    launch,
                    restore.prelude_argv(prelude_file, launch.argv),
                    was=session.status,
                )
            except BaseException:
                prelude_file.unlink(missing_ok=True)
                raise
        return session

    def watch_resumed(self, session: Session) -> Session:
        """Watch a just-restored session for ``resume_check`` seconds; if it exits in that
        time, record why (exit code, the conversation id kept). Returns the record.

        Blocking (it sleeps): async code calls it in a thread."""
        deadline = time.monotonic() + self.resume_check
        status_deadline: float | None = None
        while True:
            held = {s.session_id: s for s in self.backend.list_live()}.get(session.id)
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
        reason = (
            f"resume failed: {session.kind} exited at once (code {exit_code}); "
            f"conversation id {session.conversation_id or 'unknown'} kept. "
            f"Launched: {' '.join(session.argv)}"
        )
        with state_lock(self.state_dir):
            self.store.update(
                session.id,
                status="exited",
                exit_code=exit_code,
                reason=reason,
                expect=("running", "exited"),
            )
            self.backend.remove(session.id)
        self.log.warning("jupyter_agents: session %s: %s", session.id, reason)
        return self.store.get(session.id)

    def refresh_conversations(self) -> int:
        """Follow the conversation id of every running agent session (``/clear``, a new
        codex thread, a codex id not captured yet). Returns how many changed."""
        changed = 0
        running = [
            s
            for s in self.store.list(["running"])
            if s.kind in self.kinds and self.kinds[s.kind].follows_conversation
        ]
        if not running:
            return 0
        held = {s.conversation_id: s.id for s in self.store.list() if s.conversation_id}
        tree = children_map()
        for session in running:
            agent = self.kinds[session.kind]
            if not session.pid or session.pid_created is None:
                continue
            if matches(ProcessIdentity(session.pid, session.pid_created)) is None:
                continue
            pids = [session.pid, *descendants(session.pid, tree)]
            taken = {cid for cid, sid in held.items() if sid != session.id}
            found = agent.discover(session, pids, session.env or {}, taken)
            if found is None or found == session.conversation_id:
                continue
            if found in taken:
                self.log.warning(
                    "jupyter_agents: session %s now shows conversation %s, which session %s "
                    "holds; keeping %s",
                    session.id,
                    found,
                    held[found],
                    session.conversation_id,
                )
                continue
            if self.store.update(
                session.id, conversation_id=found, ambiguous=False, expect=("running",)
            ):
                if session.conversation_id:
                    held.pop(session.conversation_id, None)
                held[found] = session.id
                changed += 1
                self.log.info(
                    "jupyter_agents: session %s (terminal %r) conversation %s -> %s",
                    session.id,
                    session.name,
                    session.conversation_id,
                    found,
                )
        return changed

    def adopt(self, session_id: str) -> Session:
        """Make an ``orphaned`` session (live in the backend, not recorded as running) a
        normal running terminal. Keeps its name when free, else gives the next free one.
        :class:`Conflict` if it is not orphaned or no longer live."""
        with state_lock(self.state_dir):
            session = self.store.get(session_id)
            if session.status != "orphaned":
                raise Conflict(f"session {session_id} is {session.status}, not orphaned")
            held = {s.session_id: s for s in self.backend.list_live()}.get(session_id)
            if held is None or held.dead:
                raise Conflict(f"session {session_id} has no live process to adopt")
            name = session.name
            if not NAME_PATTERN.fullmatch(name) or self.store.find_live(name) is not None:
                name = next_free_name(self.store.live_names())
            if not self.store.update(session_id, status="running", name=name, expect=("orphaned",)):
                raise Conflict(f"session {session_id} changed while being adopted")
        self.log.info("jupyter_agents: adopted session %s as terminal %r", session_id, name)
        return self.store.get(session_id)

    def kill_server(self) -> builtins.list[str]:
        """Emergency stop of the backend of this state dir: every session ends, running
        and orphaned records become ``killed``, transcripts stay. Returns their ids."""
        with state_lock(self.state_dir):
            ended = self.store.list(["running", "orphaned"])
            self.backend.kill_server()
            for session in ended:
                self.store.update(
                    session.id,
                    status="killed",
                    last_activity=utcnow_iso(),
                    reason="backend stopped by kill-server",
                    expect=("running", "orphaned"),
                )
        for term in list(self.terminals.values()):
            term.close(disconnect=True)
        self.terminals.clear()
        self.log.warning(
            "jupyter_agents: backend %s killed; %d sessions ended", self.backend.name, len(ended)
        )
        return [s.id for s in ended]

    def stale_processes(self) -> builtins.list[MarkedProcess]:
        """Processes started by sessions that no longer run (e.g. an agent's background
        daemon that outlived a backend crash): marked with one of this state dir's
        session ids (:data:`~jupyter_agents.procs.SESSION_MARKER`) whose session is
        neither running nor orphaned in the backend. This process and its ancestors are
        never listed."""
        live = {s.session_id for s in self.backend.list_live() if not s.dead}
        me = psutil.Process()
        ours = {me.pid, *(p.pid for p in me.parents())}  # never this process or its callers
        marked = [m for m in marked_processes(str(self.state_dir)) if m.identity.pid not in ours]
        records = {s.id: s for s in self.store.get_many({m.session_id for m in marked})}
        return [
            m
            for m in marked
            if m.session_id not in live
            or records.get(m.session_id) is None
            or records[m.session_id].status not in ("running", "orphaned")
        ]

    def gc(self, stale: Iterable[MarkedProcess]) -> builtins.list[MarkedProcess]:
        """End the process trees of ``stale`` (from :meth:`stale_processes`), each only
        if its pid still has the recorded create time. Returns the ones signalled."""
        ended = [m for m in stale if terminate_tree(m.identity)]
        for m in ended:
            self.log.info(
                "jupyter_agents: gc ended pid %s of session %s", m.identity.pid, m.session_id
            )
        return ended

    def interrupted(self, kinds: Iterable[str] | None = None) -> builtins.list[Session]:
        """The ``interrupted`` sessions (of ``kinds`` if given), oldest first."""
        wanted = None if kinds is None else set(kinds)
        return [s for s in self.store.list(["interrupted"]) if wanted is None or s.kind in wanted]

    async def terminate_session(self, session_id: str) -> Session:
        """End a running or orphaned session by id (see :meth:`terminate`)."""
        session = self.store.get(session_id)
        if session.status not in ("running", "orphaned"):
            raise Conflict(f"session {session_id} is {session.status}, not running")
        await self._terminate(session, expect=(session.status,))
        return self.store.get(session_id)

    async def terminate(self, name: str) -> None:
        """End a terminal: record ``killed``, end its process tree, release it."""
        await self._terminate(self.get(name), expect=("running",))

    async def _terminate(self, session: Session, expect: tuple[Status, ...]) -> None:
        with state_lock(self.state_dir):
            if not self.store.update(
                session.id, status="killed", last_activity=utcnow_iso(), expect=expect
            ):
                raise Conflict(f"session {session.id} changed; not killed")
        term = self.terminals.pop(session.id, None)
        if term is not None:
            term.close(disconnect=True)
        if session.pid and session.pid_created:
            await asyncio.to_thread(
                terminate_tree, ProcessIdentity(session.pid, session.pid_created)
            )
        self.backend.remove(session.id)
        self.log.info(
            "jupyter_agents: killed session %s (terminal %r, pid %s)",
            session.id,
            session.name,
            session.pid,
        )

    # -- streaming ---------------------------------------------------------------------

    def connect(self, name: str, viewer: Viewer) -> Terminal:
        """Add a viewer to the terminal ``name`` (setup, replay, then live output)."""
        session = self.get(name)
        term = self.terminals.get(session.id)
        if term is None:
            term = self.terminals[session.id] = Terminal(self, session)
        term.add_viewer(viewer)
        return term

    def release(self, term: Terminal) -> None:
        """The last viewer left: stop streaming (the session keeps running)."""
        if self.terminals.get(term.session.id) is term:
            del self.terminals[term.session.id]
        term.close(disconnect=False)

    def stream_ended(self, term: Terminal, exit_code: int | None) -> None:
        """The backend stream of ``term`` ended: the process exited, or we lost it."""
        if self.terminals.get(term.session.id) is term:
            del self.terminals[term.session.id]
        if exit_code is not None:
            with state_lock(self.state_dir):
                self.store.update(
                    term.session.id, status="exited", exit_code=exit_code, expect=("running",)
                )
                self.backend.remove(term.session.id)
            self.log.info(
                "jupyter_agents: session %s (terminal %r) exited (code %s)",
                term.session.id,
                term.session.name,
                exit_code,
            )
            term.close(disconnect=True)
            return
        self.reconcile()
        still_running = self.store.find_live(term.session.name) is not None
        term.close(disconnect=not still_running)

    def touch(self, session: Session) -> None:
        """Note activity (rate-limited write of ``last_activity``)."""
        now = time.monotonic()
        if now - self._flushed.get(session.id, 0.0) >= self.activity_interval:
            self._flushed[session.id] = now
            session.last_activity = utcnow_iso()
            self.store.update(session.id, last_activity=session.last_activity)
            if self._on_activity is not None:
                self._on_activity()

    async def shutdown(self, kill: bool) -> None:
        """Server shutdown: detach from every session, or (``kill``) end them all."""
        for term in list(self.terminals.values()):
            term.close(disconnect=kill)
        self.terminals.clear()
        if kill:
            for session in self.store.list(["running"]):
                await self.terminate(session.name)


# -- handlers -------------------------------------------------------------------------


class TerminalsAPIHandler(APIHandler):
    """Base of the REST handlers: authorized on the ``terminals`` resource."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, manager: TerminalManager) -> None:
        self.manager = manager


class TerminalRootHandler(TerminalsAPIHandler):
    """``/api/terminals``: list (GET) and create (POST)."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        try:
            sessions = self.manager.list()
        except AgentsError as e:
            raise http_error(e) from e
        self.finish(json.dumps([self.manager.model(s) for s in sessions]))

    @web.authenticated
    @authorized
    def post(self) -> None:
        data = self.get_json_body() or {}
        if not isinstance(data, dict):
            raise web.HTTPError(400, "expected a JSON object")
        try:
            session, _ = self.manager.create(name=data.get("name"), cwd=data.get("cwd"))
        except AgentsError as e:
            raise http_error(e) from e
        self.finish(json.dumps(self.manager.model(session)))


class TerminalHandler(TerminalsAPIHandler):
    """``/api/terminals/<name>``: GET and DELETE (ends the process tree, 204)."""

    SUPPORTED_METHODS = ("GET", "DELETE", "OPTIONS")  # type: ignore[assignment]

    @web.authenticated
    @authorized
    def get(self, name: str) -> None:
        try:
            self.finish(json.dumps(self.manager.model(self.manager.get(name))))
        except AgentsError as e:
            raise http_error(e) from e

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        try:
            await self.manager.terminate(name)
        except AgentsError as e:
            raise http_error(e) from e
        self.set_status(204)
        self.finish()


class TermSocket(WebSocketMixin, JupyterHandler, WebSocketHandler):  # type: ignore[misc]
    """``/terminals/websocket/<name>``: the terminado protocol (module docstring)."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, manager: TerminalManager) -> None:
        self.manager = manager
        self.terminal: Terminal | None = None

    async def get(self, *args: Any, **kwargs: Any) -> None:
        user = self.current_user
        if not user:
            raise web.HTTPError(403)
        if self.authorizer is None:
            warn_disabled_authorization()
        elif not await ensure_async(
            self.authorizer.is_authorized(self, user, "execute", self.auth_resource)
        ):
            raise web.HTTPError(403)
        try:
            self.manager.get(args[0])  # 404 for unknown names: never creates one
        except AgentsError as e:
            raise http_error(e) from e
        await super().get(*args, **kwargs)

    def open(self, name: str) -> None:  # type: ignore[override]
        super().open(name)
        try:
            self.terminal = self.manager.connect(name, self)
        except AgentsError:
            self.close(1011, "terminal is gone")

    def on_message(self, message: str | bytes) -> None:
        msg = parse_message(message)
        if msg is None or self.terminal is None:
            if msg is None:
                self.log.debug("jupyter_agents: ignored malformed terminal frame")
            return
        if msg[0] == "stdin":
            self.terminal.write(msg[1])
        else:
            self.terminal.set_size(self, msg[1], msg[2])

    def on_close(self) -> None:
        if self.terminal is not None:
            self.terminal.remove_viewer(self)
            self.terminal = None

    def send(self, message: str) -> None:
        with contextlib.suppress(WebSocketClosedError):
            self.write_message(message)


def terminal_handlers(manager: TerminalManager) -> list[tuple[str, type, dict[str, Any]]]:
    """The stock-compatible terminal routes, served by ``manager``."""
    kwargs = {"manager": manager}
    return [
        (r"/api/terminals", TerminalRootHandler, kwargs),
        (r"/api/terminals/(\w+)", TerminalHandler, kwargs),
        (r"/terminals/websocket/(\w+)", TermSocket, kwargs),
    ]
