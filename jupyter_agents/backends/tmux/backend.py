"""TmuxBackend: the control plane, one ``tmux`` command per call (spawn, list,
remove, kill-server), against the tmux server of a state dir."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

from traitlets import Int, Unicode, default

from jupyter_agents.backends.base import (
    DETACH_KEY_NAME,
    SESSION_ID,
    Backend,
    LiveSession,
    SpawnRequest,
    Stream,
    StreamListener,
    check_session_id,
)
from jupyter_agents.backends.tmux.control import HANDSHAKE_GATE, TmuxControl
from jupyter_agents.backends.tmux.formats import (
    CONFIG,
    MAX_SOCKET_PATH,
    MIN_TMUX_VERSION,
    TMUX_OWNED,
    ListedPane,
    TmuxCommand,
    env_assignments,
    format_of,
    parse_format,
    parse_version,
    tmux_arg,
    tmux_format_arg,
    tmux_pipe_arg,
)
from jupyter_agents.backends.tmux.history import HistoryCache
from jupyter_agents.backends.tmux.stream import TmuxStream
from jupyter_agents.backends.tmux.writer import WRITER_TOOLS, transcript_pipe
from jupyter_agents.core.errors import BackendUnavailable
from jupyter_agents.core.paths import (
    ensure_private_dir,
    safe_short_dir,
    socket_dir,
    socket_not_ours,
)
from jupyter_agents.core.procs import ended_within, identify, socket_holders, terminate_tree
from jupyter_agents.terminal.segments import migrate_legacy

#: how long :meth:`TmuxBackend.kill_server` lets the tmux server take to exit, before
#: and after signalling it
KILL_GRACE = 1.0
#: seconds a spawn waits for a tmux server that is exiting (its last session just ended,
#: or kill-server, with a client still to leave) to be gone, trying again every 0.1 s;
#: then it ends that server (:meth:`TmuxBackend._end_exiting_server`)
EXITING_WAIT = 5.0


def default_terminal() -> str:
    """$TERM inside sessions: tmux-256color where its terminfo is installed, else
    screen-256color."""
    for base in (
        "/usr/share/terminfo",
        "/lib/terminfo",
        "/etc/terminfo",
        os.path.expanduser("~/.terminfo"),
    ):
        if os.path.exists(os.path.join(base, "t", "tmux-256color")):
            return "tmux-256color"
    return "screen-256color"


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """Write ``env`` (:func:`~.formats.env_assignments`) to a new file only we can
    read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(env_assignments(env))


class TmuxBackend(Backend):
    """Sessions in one tmux server per state dir, on ``<state_dir>/tmux/socket`` (in a
    local folder when the state dir is on a network filesystem:
    :func:`~jupyter_agents.core.paths.socket_dir`)."""

    name = "tmux"

    tmux_command = Unicode("tmux", config=True, help="The tmux executable to use.")
    history_limit = Int(
        20000,
        config=True,
        help="Lines of history tmux keeps per session (replayed to reconnecting clients). "
        "A full history of 80-column lines takes about 10 MB of the tmux server's memory.",
    )
    replay_color_lines = Int(
        1000,
        min=1,
        config=True,
        help="History lines, counted back from the screen, that a replay sends with their "
        "colours and attributes; older history is replayed as plain text. tmux spends "
        "2.5-4.5 ms per 1,000 lines formatting escapes, and serves no pane meanwhile; "
        "JupyterLab's terminal keeps 1,000 lines of scrollback by default (raise both "
        "together).",
    )
    default_terminal = Unicode(
        config=True,
        help="$TERM inside sessions (tmux's default-terminal); tmux-256color if its "
        "terminfo is installed, else screen-256color.",
    )

    @default("default_terminal")
    def _default_default_terminal(self) -> str:
        return default_terminal()

    def __init__(self, state_dir: Path, **kwargs: object) -> None:
        super().__init__(state_dir, **kwargs)
        self.tmux_dir = state_dir / "tmux"
        self.socket_path = socket_dir(state_dir, "tmux") / "socket"
        self.config_path = self.tmux_dir / "tmux.conf"
        # tmux itself runs with a minimal environment; each session gets its own (-e)
        self._env = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR")
        }
        self._env["LC_ALL"] = "C.UTF-8"
        self._controls: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TmuxControl] = (
            weakref.WeakKeyDictionary()
        )
        #: the older history of replays, sent again while a session prints nothing
        self.history = HistoryCache()
        #: held while one of this process's control clients identifies itself to tmux,
        #: and around each command that makes or ends sessions: tmux 3.3a to 3.6 sends a
        #: client still identifying itself the news of a session made or closed, and
        #: crashes on it (control_write on a NULL control state; fixed in tmux 3.7),
        #: taking every session with it (:class:`~.control.TmuxControl`)
        self.handshake_gate = threading.Lock()

    @property
    def tmux(self) -> TmuxCommand:
        """How tmux is run here, by the control plane and the control clients alike."""
        return TmuxCommand(self.tmux_command, self.socket_path, self.config_path, self._env)

    # -- control plane ---------------------------------------------------------------

    #: commands that make or end sessions: tmux notifies every control client of them
    SESSION_CHANGING = frozenset({"new-session", "kill-session", "kill-server"})

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """tmux running ``args`` against our server; :class:`BackendUnavailable` if it
        cannot run, fails (with ``check``), or the socket is not ours: then nothing is
        sent to whoever listens there. A command that makes or ends sessions waits
        while a control client of ours identifies itself (:attr:`handshake_gate`)."""
        tmux = self.tmux
        why = socket_not_ours(tmux.socket)
        if why is not None:
            self.log.warning("jupyter_agents: not connecting to tmux: %s", why)
            raise BackendUnavailable(f"refusing the tmux socket: {why}")
        # bounded: a gate left shut (a client cancelled as it took it) must not stop
        # every spawn for good
        gated = args[0] in self.SESSION_CHANGING and self.handshake_gate.acquire(
            timeout=HANDSHAKE_GATE
        )
        try:
            try:
                proc = subprocess.run(
                    tmux.argv(*args),
                    env=tmux.env,
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=30,
                    check=False,
                )
            finally:
                if gated:
                    self.handshake_gate.release()
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BackendUnavailable(f"cannot run tmux ({self.tmux_command}): {e}") from e
        if check and proc.returncode:
            raise BackendUnavailable(f"tmux {args[0]} failed: {proc.stderr.strip()}")
        return proc

    def present(self) -> bool:
        return self.socket_path.exists()

    def start(self) -> None:
        exe = shutil.which(self.tmux_command)
        if exe is None:
            raise BackendUnavailable(
                f"tmux ({self.tmux_command!r}) is not on PATH; install tmux >= 3.2 "
                "or use AgentsApp.backend='broker'"
            )
        version = subprocess.run([exe, "-V"], capture_output=True, text=True, check=False).stdout
        if parse_version(version) < MIN_TMUX_VERSION:
            raise BackendUnavailable(f"{version.strip() or exe} is too old; need tmux >= 3.2")
        path = self._env.get("PATH")
        missing = [t for t in WRITER_TOOLS if shutil.which(t, path=path) is None]
        if missing:
            raise BackendUnavailable(
                f"the tmux transcript writer needs {', '.join(missing)} on PATH "
                "(perl-base on Debian)"
            )
        if "\n" in str(self.tmux_dir):
            raise BackendUnavailable(f"the state dir {str(self.tmux_dir.parent)!r} has a newline")
        if len(str(self.socket_path)) > MAX_SOCKET_PATH:
            raise BackendUnavailable(
                f"tmux socket path {self.socket_path} is too long for a unix socket; "
                f"choose a shorter AgentsApp.state_dir, such as {safe_short_dir()}"
            )
        ensure_private_dir(self.tmux_dir)
        ensure_private_dir(self.transcript_dir)
        self.config_path.write_text(
            CONFIG.format(history_limit=self.history_limit, default_terminal=self.default_terminal)
        )

    def spawn(self, request: SpawnRequest) -> LiveSession:
        sid = check_session_id(request.session_id)
        transcript = self.transcript_path(sid)
        migrate_legacy(transcript)
        ensure_private_dir(transcript)
        # The environment travels in a private file the session's first process reads
        # and deletes: as ``-e`` arguments it would sit in the tmux server's command line,
        # readable by every user of the machine (secrets included).
        env_file = self.env_file(sid)
        write_env_file(env_file, {k: v for k, v in request.env.items() if k not in TMUX_OWNED})
        command = (
            'exec env -i TERM="$TERM" TMUX="$TMUX" TMUX_PANE="$TMUX_PANE" /bin/sh -c '
            + shlex.quote('set -a; . "$0"; rm -f "$0"; set +a; exec "$@"')
            + " "
            + shlex.join([str(env_file), *request.argv])
        )
        pipe = transcript_pipe(transcript, self.transcript_max_bytes)
        deadline = time.monotonic() + EXITING_WAIT
        ended_exiting = False
        while True:
            try:
                proc = self._run(
                    "new-session", "-d", "-s", sid, "-x", str(request.cols), "-y",
                    str(request.rows), "-c", tmux_format_arg(request.cwd), "--",
                    tmux_arg(command), ";",
                    "pipe-pane", "-O", "-t", f"={sid}:", tmux_pipe_arg(pipe), ";",
                    "display-message", "-p", "-t", f"={sid}:", "#{pane_pid}",
                )  # fmt: skip
                break
            except BackendUnavailable as e:
                # the server was exiting as it took the command (its last session had
                # just ended: exit-empty; or kill-server, and it waits for its clients to
                # leave, as long as a stopped or slow one takes): nothing was made; a try
                # once it is gone starts a new server
                exiting = "server exited unexpectedly" in str(e)
                if exiting and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                if exiting and not ended_exiting and self._end_exiting_server():
                    ended_exiting = True
                    continue
                env_file.unlink(missing_ok=True)
                raise
        return LiveSession(sid, int(proc.stdout.strip().splitlines()[-1]))

    def list_live(self) -> list[LiveSession]:
        live = self._list_panes()
        if any(s.dead and s.exit_code is None for s in live):
            # tmux (3.3a, seen in about 1 of 4 quick exits here) can miss a SIGCHLD and
            # leave a dead pane's process unreaped with no status; nudge it and look again
            self.nudge()
            time.sleep(0.05)
            live = self._list_panes()
        return live

    def _list_panes(self) -> list[LiveSession]:
        if not self.socket_path.exists():
            return []
        proc = self._run("list-panes", "-a", "-F", format_of(ListedPane), check=False)
        if proc.returncode:
            # none, dying right now, or ("no current target") no session left in it
            gone = (
                "no server running",
                "error connecting",
                "server exited unexpectedly",
                "no current target",
            )
            if any(reason in proc.stderr for reason in gone):
                return []
            raise BackendUnavailable(f"tmux list-panes failed: {proc.stderr.strip()}")
        seen: dict[str, LiveSession] = {}
        for line in proc.stdout.splitlines():
            pane = parse_format(ListedPane, line)
            if pane is not None and pane.session_name not in seen:
                # the first pane of a session is the one we started
                dead, died = pane.pane_dead, pane.pane_dead_time
                seen[pane.session_name] = LiveSession(
                    pane.session_name,
                    pane.pane_pid,
                    dead,
                    pane.exit_code,
                    float(died) if dead and died is not None else None,
                )
        return list(seen.values())

    def nudge(self, server_pid: int | None = None) -> None:
        """Make the tmux server reap its exited children: send it SIGCHLD, the signal it
        missed. Harmless to any process (SIGCHLD's default is to be ignored)."""
        server_pid = server_pid or self._server_pid()
        if server_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(server_pid, signal.SIGCHLD)

    def _server_pid(self) -> int | None:
        """The tmux server's pid (None when none answers)."""
        proc = self._run("display-message", "-p", "#{pid}", check=False)
        pid = proc.stdout.strip()
        return int(pid) if not proc.returncode and pid.isdigit() else None

    def env_file(self, session_id: str) -> Path:
        """Where :meth:`spawn` leaves a session's environment for its first process,
        which deletes it as it starts."""
        return self.tmux_dir / f"env-{check_session_id(session_id)}"

    def session_files(self, session_id: str) -> list[Path]:
        """Its environment file, when its first process never ran to delete it (ended
        first, or its tmux server did)."""
        return [self.env_file(session_id)]

    def remove(self, session_id: str) -> None:
        self.history.drop(session_id)
        self._run("kill-session", "-t", tmux_arg(f"={session_id}"), check=False)
        # its first process is gone; if it ended before reading its environment (secrets
        # included), that file goes now, not with the state dir (a session made by hand
        # on our socket, whatever its name, has none)
        if SESSION_ID.fullmatch(session_id):
            self.env_file(session_id).unlink(missing_ok=True)

    def kill_server(self) -> None:
        """Stop the tmux server of this state dir and everything in it (blocking).

        After ``kill-server`` tmux (3.3a) ends every session at once, but its server
        exits only when every client has gone, and a control client that still has
        output queued when its reader dies (a Jupyter server killed a moment before)
        never goes (tmux 3.6b and later give up on it after 10 s). A server still running
        :data:`KILL_GRACE` seconds later is ended by its pid and start time (its socket,
        left behind, is removed)."""
        if not self.present():
            return
        pid = self._server_pid()
        server = identify(pid) if pid is not None else None
        self._run("kill-server", check=False)
        if server is not None and not ended_within(server, KILL_GRACE):
            terminate_tree(server, grace=KILL_GRACE)
            self.socket_path.unlink(missing_ok=True)

    def _end_exiting_server(self) -> bool:
        """End the tmux server on our socket that has been exiting for
        :data:`EXITING_WAIT` seconds; whether one was ended.

        An exiting server has no session left (``kill-server`` or SIGTERM ended them all)
        and refuses every new client, but tmux (3.3a) exits only once each client has
        gone, and a stopped client, or a control client whose reader died with output
        queued, never goes. It is found by the socket it holds and ended by pid and
        start time; its socket, left behind, is removed."""
        ended = False
        for server in socket_holders(str(self.socket_path)):
            self.log.warning(
                "jupyter_agents: the tmux server on %s (pid %d) has refused new clients "
                "for %.0f s, waiting for old ones to leave; ending it",
                self.socket_path,
                server.pid,
                EXITING_WAIT,
            )
            ended = terminate_tree(server, grace=KILL_GRACE) or ended
        if ended:
            self.socket_path.unlink(missing_ok=True)
        return ended

    def attach(self, session_id: str, listener: StreamListener) -> Stream:
        return TmuxStream(self, check_session_id(session_id), listener)

    def control(self) -> TmuxControl:
        """The control client the streams of the running IO loop share (:mod:`.control`);
        a new one once the last was closed."""
        loop = asyncio.get_running_loop()
        control = self._controls.get(loop)
        if control is None or control.closed:
            control = self._controls[loop] = TmuxControl(
                self.tmux, self.log, gate=self.handshake_gate
            )
        return control

    async def detach_streams(self, timeout: float = 2.0) -> None:
        control = self._controls.pop(asyncio.get_running_loop(), None)
        if control is not None:
            await control.aclose(timeout)

    #: tmux's ``tty_start_tty`` does ``tcflush(TCOFLUSH)`` on the client's terminal
    attach_flushes_output = True

    def debug_attach_command(self, session_id: str) -> list[str]:
        why = socket_not_ours(self.socket_path)
        if why is not None:
            raise BackendUnavailable(f"refusing the tmux socket: {why}")
        # the binding is in the root table of our own server: only an attached client
        # reads keys through it (viewers' input arrives by send-keys, which bypasses
        # bindings), so the browser tabs still give the key to the program. No paste
        # guess: a key within assume-paste-time of the one before skips the bindings
        return [
            *(self.tmux_command, "-S", str(self.socket_path)),
            *("set-option", "-g", "assume-paste-time", "0", ";"),
            *("bind-key", "-n", DETACH_KEY_NAME, "detach-client", ";"),
            *("attach-session", "-t", f"={session_id}"),
        ]
