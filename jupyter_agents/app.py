"""AgentsApp: the Jupyter Server extension. It only wires: config traits -> store,
backend and TerminalManager -> reconcile at start -> handlers."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_server._tz import utcnow
from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Dict, Enum, Float, List, Type, Unicode, default

from .agents import make_kinds
from .backends.base import Backend
from .backends.broker import BrokerBackend
from .backends.tmux import TmuxBackend
from .errors import AgentsError, BackendUnavailable
from .handlers import agents_handlers
from .paths import default_state_dir, ensure_private_dir
from .store import Session, SessionStore
from .terminals import TerminalManager, terminal_handlers

#: removed from every session's environment unless configured otherwise (DESIGN.md 5, 10)
DEFAULT_SCRUB_ENV = [
    # agent CLIs' markers for their own children: inherited, they break the agent inside
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_CHILD_SESSION",
    "CLAUDE_CODE_SESSION_ATTENDED",
    "CLAUDE_PID",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_ENV_FILE",
    "CLAUDE_CODE_CHILD_NOTES_DIR",
    "CLAUDE_CODE_MESSAGING_SOCKET",
    "CLAUDE_CODE_MESSAGING_SOCKET_TOKEN",
    "AI_AGENT",
    "CLAUDE_CODE_LAUNCHED_BY_SESSION_IDS",
    "CLAUDE_CODE_BRIDGE_SESSION_ID",
    "CLAUDE_CODE_HOST_WORKTREE",
    "CODEX_THREAD_ID",
    # secrets of the server and the hub
    "JUPYTER_TOKEN",
    "JPY_API_TOKEN",
    "JUPYTERHUB_API_TOKEN",
    "JUPYTERHUB_CLIENT_ID",
    "JUPYTERHUB_OAUTH_*",
    "JUPYTERHUB_COOKIE_*",
    # the server's own tmux, if it runs inside one
    "TMUX",
    "TMUX_PANE",
]


class AgentsApp(ExtensionApp):
    """Persistent terminals and agent sessions, owned by tmux or the pty broker."""

    name = "jupyter_agents"
    description = __doc__ or ""
    load_other_extensions = True

    state_dir = Unicode(
        config=True,
        help="Directory of the session store, transcripts and backend sockets (made 0700). "
        "Default: $JUPYTER_AGENTS_STATE_DIR, else <jupyter_data_dir>/agents.",
    )
    backend = Enum(
        ["auto", "tmux", "broker"],
        default_value="auto",
        config=True,
        help="Who owns the terminals: 'tmux' (>= 3.2), 'broker' (the pty broker daemon) or "
        "'auto' (tmux when a usable one is on PATH, else the broker).",
    )
    on_shutdown = Enum(
        ["detach", "kill"],
        default_value="detach",
        config=True,
        help="On server shutdown, 'detach' leaves every session running for the next "
        "server; 'kill' ends them all.",
    )
    scrub_env = List(
        Unicode(),
        default_value=DEFAULT_SCRUB_ENV,
        config=True,
        help="Environment variable names (fnmatch patterns allowed) removed from every "
        "session's environment.",
    )
    restore_on_start = Enum(
        ["none", "agents", "all"],
        default_value="none",
        config=True,
        help="At start, after reconcile, restore the interrupted sessions: 'agents' "
        "(every kind but shell), 'all' (shells too) or 'none'.",
    )
    agents = Dict(
        config=True,
        help="Extra agent kinds, or where the claude/codex CLIs are: "
        '{"claude": {"command": ["/opt/bin/claude"]}, "aider": {"command": ["aider"], '
        '"resume": ["aider", "--restore-chat-history"], "id": "none"}}. '
        "id is 'none' or 'assign' (a UUID replaces '{conversation_id}' in command and "
        "resume).",
    )
    refresh_interval = Float(
        5.0,
        config=True,
        help="Seconds between checks of running agents' conversation ids (e.g. after "
        "/clear); 0 turns the periodic check off (it still runs on every listing).",
    )
    terminal_manager_class = Type(
        TerminalManager,
        klass=TerminalManager,
        config=True,
        help="The TerminalManager class to use.",
    )

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return default_state_dir()

    manager: TerminalManager | None = None
    _restored: list[Session]

    def _link_jupyter_server_extension(self, serverapp: Any) -> None:
        """Take the terminal routes over from jupyter_server_terminals.

        Extensions link in alphabetical order, so this runs before the stock extension
        links; disabling it here means its manager is never created and can never spawn.
        """
        super()._link_jupyter_server_extension(serverapp)
        stock = serverapp.extension_manager.extensions.get("jupyter_server_terminals")
        if stock is not None and stock.enabled:
            stock.enabled = False
            self.log.info("jupyter_agents: replacing jupyter_server_terminals' terminals")

    def make_backend(self, state_dir: Path) -> Backend:
        """The configured backend, started. :class:`BackendUnavailable` if it can't be.

        ``auto`` is tmux when a usable one (>= 3.2) is on PATH, else the pty broker.
        """
        backend: Backend | None = None
        if self.backend in ("auto", "tmux"):
            tmux = TmuxBackend(state_dir, parent=self, log=self.log)
            try:
                tmux.start()
                backend = tmux
            except BackendUnavailable as e:
                if self.backend == "tmux":
                    raise
                self.log.info("jupyter_agents: backend auto: %s; using the pty broker", e)
        if backend is None:
            backend = BrokerBackend(state_dir, parent=self, log=self.log)
            backend.start()
        self.log.info(
            "jupyter_agents: backend %s (%s; debug: %s)",
            backend.name,
            "chosen by backend=auto" if self.backend == "auto" else "configured",
            " ".join(backend.debug_attach_command("<session id>")),
        )
        return backend

    def shell_command(self) -> list[str]:
        """The shell of new terminals, chosen as jupyter_server_terminals does."""
        settings = self.serverapp.terminado_settings if self.serverapp is not None else {}
        override = settings.get("shell_command")
        if isinstance(override, str):
            override = shlex.split(override)
        if override:
            return list(override)
        shell = [os.environ.get("SHELL") or shutil.which("sh") or "/bin/sh"]
        if not sys.stdout.isatty():
            shell.append("-l")  # not started from a terminal: let the shell set up the env
        return shell

    def create_manager(
        self,
        root_dir: str,
        extra_env: dict[str, str] | None = None,
        on_activity: Callable[[], None] | None = None,
    ) -> TerminalManager:
        """The TerminalManager of this config's state dir and backend.

        The server, the CLI and kernels (magics, widgets) all go through this, so they
        share one store and one backend. Raises :class:`AgentsError` or ``ValueError``
        (bad ``agents`` config) with a message for the user.
        """
        state_dir = ensure_private_dir(self.state_dir)
        store = SessionStore(state_dir / "sessions.db")
        backend = self.make_backend(state_dir)
        shell = self.shell_command()
        return self.terminal_manager_class(  # type: ignore[no-any-return]
            store=store,
            backend=backend,
            state_dir=state_dir,
            on_activity=on_activity,
            kinds=make_kinds(shell, self.agents),
            parent=self,
            log=self.log,
            shell_command=shell,
            scrub_env=list(self.scrub_env),
            root_dir=root_dir,
            extra_env=extra_env or {},
        )

    def initialize_settings(self) -> None:
        assert self.serverapp is not None
        if not self.serverapp.terminals_enabled:
            self.settings["terminals_available"] = False
            return
        activity = self.serverapp.web_app.settings.setdefault("last_activity_times", {})

        def on_activity() -> None:
            activity[self.name] = utcnow()

        try:
            self.manager = self.create_manager(
                root_dir=self.serverapp.root_dir,
                extra_env={
                    "JUPYTER_SERVER_ROOT": self.serverapp.root_dir,
                    "JUPYTER_SERVER_URL": self.serverapp.connection_url,
                },
                on_activity=on_activity,
            )
        except (AgentsError, ValueError) as e:
            self.log.error("jupyter_agents: terminals are unavailable: %s", e)
            self.settings["terminals_available"] = False
            return
        # before the first request: the first GET /api/terminals must list survivors
        self.manager.reconcile(boot=True)
        self._restored = self._restore_on_start(self.manager)
        self.settings.update({"terminals_available": True, "terminal_manager": self.manager})

    def _restore_on_start(self, manager: TerminalManager) -> list[Session]:
        if self.restore_on_start == "none":
            return []
        kinds = None if self.restore_on_start == "all" else set(manager.kinds) - {"shell"}
        restored = []
        for session in manager.interrupted(kinds):
            try:
                restored.append(manager.restore(session.id))
            except AgentsError as e:
                self.log.warning("jupyter_agents: could not restore %s: %s", session.id, e)
        self.log.info("jupyter_agents: restored %d interrupted sessions at start", len(restored))
        return restored

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Once the loop runs: watch sessions restored at start; follow conversation ids;
        watch the backend's liveness."""
        if self.manager is None:
            return
        manager = self.manager

        def refresh() -> None:
            try:
                manager.refresh_conversations()
            except AgentsError as e:
                self.log.warning("jupyter_agents: conversation check failed: %s", e)

        if self.refresh_interval > 0:
            self._refresher = PeriodicCallback(refresh, self.refresh_interval * 1000)
            self._refresher.start()
        # a dead or hung backend owner is replaced; reconcile then marks its sessions
        self._unwatch = manager.backend.watch(lambda: manager.reconcile())
        await asyncio.gather(*(asyncio.to_thread(manager.watch_resumed, s) for s in self._restored))

    def initialize_handlers(self) -> None:
        if self.manager is None:
            return
        self.handlers.extend(terminal_handlers(self.manager))
        self.handlers.extend(agents_handlers(self.manager))

    def current_activity(self) -> dict[str, Any] | None:
        """Running sessions count as activity for idle culling."""
        if self.manager is None:
            return None
        running = self.manager.store.list(["running"])
        return {s.name: s.to_model() for s in running} or None

    async def stop_extension(self) -> None:
        refresher = getattr(self, "_refresher", None)
        if refresher is not None:
            refresher.stop()
        unwatch = getattr(self, "_unwatch", None)
        if unwatch is not None:
            unwatch()
        if self.manager is not None:
            kill = self.on_shutdown == "kill"
            self.log.info(
                "jupyter_agents: shutting down (%s sessions)",
                "killing" if kill else "detaching from",
            )
            await self.manager.shutdown(kill=kill)
