"""Configuration, read the same way by the server, the CLI and kernels.

:class:`AgentsSettings` holds every ``c.AgentsApp`` trait (``AgentsApp``, the server
extension, inherits them, so ``jupyter server --help-all`` lists them). Outside the
server, :func:`load_settings` reads the user's Jupyter Server config files, and
:func:`open_sessions` turns settings into a :class:`~jupyter_agents.sessions.service.SessionService`
on a state dir. Nothing here imports jupyter_server or tornado: ``%load_ext
jupyter_agents`` and ``jupyter agents list`` stay light.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    Int,
    List,
    TraitError,
    Type,
    Unicode,
    Union,
    default,
    validate,
)
from traitlets.config import Config, LoggingConfigurable

from jupyter_agents.acp.tools import TOOLS
from jupyter_agents.agents import archive
from jupyter_agents.agents.kinds import BUILTIN, builtin_env, make_kinds
from jupyter_agents.backends import Backends
from jupyter_agents.backends.base import Backend
from jupyter_agents.core.errors import NotFound
from jupyter_agents.core.launch import EnvPolicy
from jupyter_agents.core.paths import default_state_dir, ensure_private_dir
from jupyter_agents.core.store import JOURNAL_MODES, SessionStore
from jupyter_agents.sessions import restore
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sessions.worktrees import Worktrees
from jupyter_agents.spend import limits
from jupyter_agents.spend.ledger import UsageLedger
from jupyter_agents.spend.prices import DEFAULT_PRICES, PRICES_AS_OF, PriceTable, check_prices
from jupyter_agents.terminal import segments

#: the built-in agent kinds' names, for help texts
BUILTIN_NAMES = [kind.name for kind in BUILTIN]
#: a price pattern of the defaults, for help texts
PATTERN = next(model for model in DEFAULT_PRICES if "*" in model)
#: removed from every session's environment unless configured otherwise
DEFAULT_SCRUB_ENV = [
    # agent CLIs' markers for their own children: inherited, they break the agent inside
    *builtin_env(),
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


class AgentsSettings(LoggingConfigurable):
    """The traits of ``c.AgentsApp``, usable without a server."""

    state_dir = Unicode(
        config=True,
        help="Directory of the session store, transcripts and backend sockets (made 0700). "
        "Default: $JUPYTER_AGENTS_STATE_DIR, else <jupyter_data_dir>/agents.",
    )
    backend = Union(
        [Enum(["auto", "tmux", "broker"]), Type(klass=Backend)],
        default_value="auto",
        config=True,
        help="Who owns new terminals: 'tmux' (>= 3.2), 'broker' (the pty broker daemon), "
        "'auto' (tmux when a usable one is on PATH, else the broker), or a Backend "
        "subclass (import string). Existing sessions stay with the backend that owns them.",
    )
    journal_mode = Enum(
        ["auto", *JOURNAL_MODES],
        default_value="auto",
        config=True,
        help="SQLite journal mode of the session store: 'auto' is 'wal' on a local "
        "filesystem and 'delete' on a network one (NFS, SMB/CIFS: SQLite's WAL needs "
        "memory shared on one host), where sockets also move to a local private folder. "
        "Every process using the state dir must agree.",
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
        help=f"Extra agent kinds, or where the {'/'.join(BUILTIN_NAMES)} CLIs are: "
        f'{{"{BUILTIN_NAMES[0]}": {{"command": ["/opt/bin/{BUILTIN_NAMES[0]}"]}}, '
        '"aider": {"command": ["aider"], '
        '"resume": ["aider", "--restore-chat-history"], "id": "none"}}. '
        "id is 'none' or 'assign' (a UUID replaces '{conversation_id}' in command and "
        "resume).",
    )
    worktree_dir = Unicode(
        "",
        config=True,
        help="Where the git worktrees of agents started in a worktree go, as "
        "<worktree_dir>/<repository name>/<branch>; empty: beside each repository, in "
        "<repository>.worktrees. Never inside the repository.",
    )
    worktree_setup = Unicode(
        "",
        config=True,
        help="A command run by /bin/sh in each new worktree before its agent starts (e.g. "
        "'npm ci'); a failure removes the worktree and says why. Empty: none. Only this "
        "setting runs a command: nothing in the repository does.",
    )
    restore_on_open = Bool(
        True,
        config=True,
        help="When JupyterLab reopens a terminal tab whose session was interrupted (after "
        "a reboot), restore that session in place (old tail, marker line, agents resumed) "
        "instead of starting an unrelated shell.",
    )
    permission_wait = Float(
        120.0,
        config=True,
        help="Seconds an agent whose CLI shows no dialog while it asks permission "
        "elsewhere (Codex) waits for an answer from the panel, a notification, the CLI or "
        "a phone before it shows its own dialog; it shows it at once when a person typed "
        "into its open tab in the last two minutes. 0: always its own dialog at once. "
        "Claude Code shows its dialog all along; the first answer wins.",
    )
    refresh_interval = Float(
        5.0,
        config=True,
        help="Seconds between refreshes: running agents' conversation ids (e.g. after "
        "/clear), copies of what they added to their conversation files into the "
        "conversation archive, what they spent, their programs' modes and titles, when "
        "they last printed, sessions that ended while nobody watched (also found when "
        "their process ends), and changes other processes made to the store. 0 turns "
        "the refresh off (nothing is archived; hook events still apply as they come). "
        "A listing only reads.",
    )
    restore_tail_bytes = Int(
        restore.TAIL_BYTES,
        config=True,
        help="Bytes of the old transcript a restored terminal shows before the new process.",
    )
    resume_check = Float(
        3.0,
        config=True,
        help="Seconds a restored process is watched: exiting within them marks the "
        "restore as failed (with the reason; the conversation id is kept).",
    )
    transcript_max_bytes = Int(
        segments.DEFAULT_MAX_BYTES,
        config=True,
        help="The most bytes of raw output kept per session (its transcript): it is "
        "written in segments of an eighth of this (at least 64 KiB each, at least two "
        "kept), and the oldest segment is dropped when a new one starts. The REST log "
        "and the CLI read what is kept. Sessions started before a change keep the old "
        "cap until restored.",
    )
    conversation_archive_max_bytes = Int(
        archive.DEFAULT_MAX_BYTES,
        config=True,
        help="The most bytes of agents' conversation files kept in the state dir's "
        "conversation archive (copies that survive the CLI deleting its own files, used "
        "to resume them). When a copy needs room, the copies of sessions that are not "
        "running are dropped, the least recently written first; a running session's "
        "copies are never dropped.",
    )
    conversation_archive_session_max_bytes = Int(
        archive.DEFAULT_SESSION_MAX_BYTES,
        config=True,
        help="The most bytes of conversation files archived per session; beyond it the "
        "session's newest bytes are not archived (logged once).",
    )
    prices = Dict(
        DEFAULT_PRICES,
        config=True,
        help="What agents' tokens cost, for the estimated cost of each session: model id "
        f"(or a pattern with *, e.g. '{PATTERN}'; the exact id wins, else the "
        "longest pattern) -> US dollars per million tokens of each kind: "
        '{"my-model": {"input": 3, "output": 15, "cache_creation": 3.75, '
        '"cache_read": 0.3}} (input and output required). A model in none of them shows '
        "its tokens only. The default holds Anthropic's and OpenAI's list prices as of "
        f"{PRICES_AS_OF}: check your provider (contracts, regions and tiers differ). "
        "Add a model with c.AgentsApp.prices.update({...}).",
    )
    unattended_limit = Dict(
        {},
        config=True,
        help="What an agent may spend while nobody watches, since the last input a person "
        'typed into it: {"tokens": N, "cost": US dollars, "seconds": working time}, any '
        "of them; {} (the default): no limit. Past it, while the agent works and no "
        "viewer that can type is connected, its turn is interrupted as a person would "
        "(Escape), its attention becomes 'error' with the reason and JupyterLab says so; "
        "nothing is killed, and the next input starts a fresh allowance. Recommended to "
        'start with: {"cost": 5, "seconds": 3600}. A session can have its own (PATCH '
        "/api/agents/sessions/<id>, jupyter agents limit, the panel). Checked every "
        "refresh_interval.",
    )
    activity_interval = Float(
        10.0,
        config=True,
        help="Seconds between writes (and events) of a streamed session's last_activity "
        "and notes of terminal activity as the server's activity (for idle culling), "
        "and between checks of which agents keep the server active (agent_keepalive).",
    )
    agent_keepalive = Float(
        7200.0,
        min=0.0,
        config=True,
        help="Seconds an agent at work (attention 'working') keeps the server active for "
        "idle culling (jupyterhub-idle-culler, ServerApp.shutdown_no_activity_timeout) "
        "after the last input a person typed into its terminal (or after its process or "
        "this server started, whichever is later); 0: agents never do. Terminal input "
        "and output count as activity regardless; waiting agents and idle shells do not.",
    )

    acp_client_tools = List(
        Enum(list(TOOLS)),
        default_value=[],
        config=True,
        help="The client tools an agent in ACP mode may ask jupyter-agents for: 'fs' "
        "(fs/read_text_file, fs/write_text_file: files inside the session's working "
        "directory, none outside it or through a symbolic link out of it) and 'terminal' "
        "(terminal/*: commands run without a shell in that directory, their output "
        "bounded, ended with the session's proxy). [] (the default): none; such a request "
        "is refused. Each is a hole beside the agent's own tools, which already read, "
        "write and run commands in its working directory under its own permission "
        "prompts: allow one only for an agent that needs it. A write is not asked about "
        "again. A change applies to ACP sessions started or restored after it (a running "
        "session's proxy keeps what it started with).",
    )

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return default_state_dir()

    @validate("prices")
    def _valid_prices(self, proposal: Any) -> dict[str, dict[str, float]]:
        try:
            return check_prices(proposal["value"])
        except ValueError as e:
            raise TraitError(f"The 'prices' trait of {type(self).__name__}: {e}") from None

    @validate("unattended_limit")
    def _valid_limit(self, proposal: Any) -> dict[str, float]:
        try:
            return limits.check_limit(proposal["value"])
        except ValueError as e:
            raise TraitError(
                f"The 'unattended_limit' trait of {type(self).__name__}: {e}"
            ) from None

    def open_sessions(
        self,
        root_dir: str | None = None,
        shell: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
        create: bool = True,
    ) -> SessionService:
        """The session service of this config's state dir.

        ``shell`` is the argv of new shells (default: :func:`default_shell`),
        ``root_dir`` where relative cwds resolve (default: the current directory).
        Without ``create``, a state dir that does not exist is :class:`NotFound` (no
        session was ever started there). Raises ``ValueError`` for a bad ``agents``
        config and :class:`~jupyter_agents.core.errors.AgentsError` for an unusable state dir.
        """
        path = Path(self.state_dir).expanduser().absolute()
        if not create and not path.is_dir():
            raise NotFound(
                f"no state dir at {path}: no session was started there "
                "(give --state-dir, or set JUPYTER_AGENTS_STATE_DIR)"
            )
        state_dir = ensure_private_dir(path)
        shell = shell or default_shell()
        kinds = make_kinds(shell, self.agents, self.permission_wait)
        store = SessionStore(state_dir / "sessions.db", self.journal_mode)
        return SessionService(
            store=store,
            backends=Backends(
                state_dir,
                self.backend,
                parent=self,
                log=self.log,
                transcript_max_bytes=self.transcript_max_bytes,
            ),
            state_dir=state_dir,
            kinds=kinds,
            env=EnvPolicy(list(self.scrub_env), extra_env or {}, root_dir or os.getcwd()),
            restore_tail_bytes=self.restore_tail_bytes,
            resume_check=self.resume_check,
            log=self.log,
            archive=archive.ConversationArchive(
                state_dir,
                self.conversation_archive_max_bytes,
                self.conversation_archive_session_max_bytes,
                self.log,
            ),
            usage=UsageLedger(
                store, PriceTable(self.prices), self.unattended_limit, self.log, kinds
            ),
            worktrees=Worktrees(self.worktree_dir, self.worktree_setup, self.log),
            acp_client_tools=list(self.acp_client_tools),
        )


def _login_shell() -> str | None:
    """The user's shell in the password database, if it is there and runs."""
    try:
        import pwd

        shell = pwd.getpwuid(os.getuid()).pw_shell
    except (ImportError, KeyError):  # Windows; a uid without an entry (containers)
        return None
    return shell if shell and os.access(shell, os.X_OK) else None


def default_shell(terminado_settings: dict[str, Any] | None = None) -> list[str]:
    """The shell of new terminals: ``ServerApp.terminado_settings["shell_command"]``,
    else ``$SHELL``, a login shell when the process asking was not started from a
    terminal (neither its input nor its output is one), as jupyter_server_terminals
    chooses; so ``jupyter agents new shell`` typed in a terminal and
    ``$(jupyter agents new shell)`` start the same shell. Without ``$SHELL`` (a service,
    a container's entry point), the user's login shell from the password database, as
    tmux chooses, and only then ``sh``."""
    override = (terminado_settings or {}).get("shell_command")
    if isinstance(override, str):
        override = shlex.split(override)
    if override:
        return list(override)
    shell = [os.environ.get("SHELL") or _login_shell() or shutil.which("sh") or "/bin/sh"]
    if not (sys.stdin.isatty() or sys.stdout.isatty()):
        shell.append("-l")  # not started from a terminal: let the shell set up the env
    return shell


def load_config() -> Config:
    """The user's Jupyter Server config files (where ``c.AgentsApp`` lives)."""
    from jupyter_core.application import JupyterApp

    class _ConfigReader(JupyterApp):  # type: ignore[misc]
        name = "jupyter-agents"
        config_file_name = "jupyter_server_config"

    reader = _ConfigReader()
    reader.load_config_file()
    return reader.config  # type: ignore[no-any-return]


def load_settings(state_dir: str | None = None, config: Config | None = None) -> AgentsSettings:
    """Settings from ``config`` (default: the config files), ``c.AgentsApp`` applied;
    ``state_dir`` overrides the configured one."""
    config = load_config() if config is None else config
    section = Config()
    section.merge(config.get("AgentsSettings", Config()))
    section.merge(config.get("AgentsApp", Config()))
    settings = AgentsSettings(config=Config({"AgentsSettings": section}))
    if state_dir:
        settings.state_dir = str(Path(state_dir).expanduser().absolute())
    return settings


def open_sessions(state_dir: str | None = None, create: bool = True) -> SessionService:
    """The session service of the user's config (or of ``state_dir``), for the CLI and
    kernels: the same store and backends the server uses."""
    config = load_config()
    terminado = config.get("ServerApp", Config()).get("terminado_settings", {})
    settings = load_settings(state_dir, config)
    return settings.open_sessions(shell=default_shell(dict(terminado)), create=create)
