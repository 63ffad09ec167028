"""The tmux backend: sessions live in a tmux server on a private socket in the state dir.

Control plane (spawn, list, remove) runs one ``tmux`` command per call. The data plane
is one tmux *control-mode* client per streamed session (:class:`TmuxStream`): input
goes in as ``send-keys -H`` (hex, so no byte is ever parsed as tmux syntax), output
comes back as ``%output`` lines, and snapshots are command replies that tmux orders
exactly against that output. The raw transcript is written by ``pipe-pane`` from
tmux itself, so it stays complete while no Jupyter server runs.

Facts this relies on (tmux >= 3.2, checked on 3.3a):

- A command-line argument ending in ``;`` ends a tmux command; :func:`tmux_arg`
  escapes it. ``new-session -c`` is format-expanded (``#`` must be doubled);
  ``-e`` values and the shell command are not.
- ``window-size manual`` in the config crashes tmux 3.3a on ``new-session -d``; we
  size windows with ``resize-window`` instead.
- Commands sent on one control-mode line run back to back, each with its own
  ``%begin``/``%end`` block, with no pane output processed in between.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from traitlets import Int, Unicode, default

from ..errors import BackendUnavailable
from ..paths import create_private_file, ensure_private_dir
from .base import (
    Backend,
    LiveSession,
    QueuedStream,
    SpawnRequest,
    Stream,
    StreamListener,
    check_session_id,
)

MIN_TMUX_VERSION = (3, 2)
#: longest input chunk per ``send-keys`` command (hex doubles it, plus separators)
_SEND_CHUNK = 1024
#: unix socket paths are limited to ~108 bytes by the kernel
_MAX_SOCKET_PATH = 100

_CONFIG = """\
# written by jupyter_agents; the tmux server of this state dir reads it at start
set -g status off
set -g prefix None
set -g prefix2 None
set -g mouse off
set -g remain-on-exit on
set -g history-limit {history_limit}
set -g default-terminal "{default_terminal}"
set -g update-environment ""
set -g exit-empty on
set -g escape-time 0
set -g focus-events on
set -g set-clipboard off
set -gw aggressive-resize off
"""

_META_FORMAT = " ".join(
    f"#{{{f}}}"
    for f in (
        "history_size",
        "alternate_on",
        "cursor_x",
        "cursor_y",
        "cursor_flag",
        "keypad_cursor_flag",
        "keypad_flag",
        "mouse_standard_flag",
        "mouse_button_flag",
        "mouse_any_flag",
        "mouse_sgr_flag",
        "scroll_region_upper",
        "scroll_region_lower",
        "pane_height",
    )
)


def tmux_arg(value: str) -> str:
    """Escape one argv element so tmux takes it literally as one argument.

    >>> tmux_arg("a;")
    'a\\\\;'
    >>> tmux_arg("plain")
    'plain'
    """
    return value[:-1] + "\\;" if value.endswith(";") else value


def tmux_format_arg(value: str) -> str:
    """Like :func:`tmux_arg`, for arguments tmux expands as formats (``#`` doubled)."""
    return tmux_arg(value.replace("#", "##"))


def parse_version(text: str) -> tuple[int, int]:
    """``"tmux 3.3a"`` -> ``(3, 3)``; ``"tmux next-3.4"`` -> ``(3, 4)``; else ``(0, 0)``."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def unescape_output(data: bytes) -> bytes:
    r"""Undo control mode's escaping of ``%output`` data (``\ooo`` octal bytes).

    tmux escapes every byte below 32 and the backslash itself, so the data holds no other
    backslash sequence and C's escape decoder can do the work.
    """
    return codecs.escape_decode(data)[0]  # type: ignore[attr-defined,no-any-return]


#: pane death as tmux reports it; the status appears a moment after ``pane_dead``
_DEAD_FORMAT = "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}"


def parse_dead(value: str) -> tuple[bool, int | None]:
    """Parse ``_DEAD_FORMAT`` -> (dead, exit code); a signal ``n`` reads as ``128 + n``.

    >>> parse_dead("1:3:"), parse_dead("1::9"), parse_dead("1::"), parse_dead("0::")
    ((True, 3), (True, 137), (True, None), (False, None))
    """
    dead, _, rest = value.partition(":")
    status, _, signal = rest.partition(":")
    if status.lstrip("-").isdigit():
        return dead == "1", int(status)
    if signal.isdigit():
        return dead == "1", 128 + int(signal)
    return dead == "1", None


#: variables tmux sets for each pane itself; a session's environment never overrides them
_TMUX_OWNED = frozenset({"TERM", "TMUX", "TMUX_PANE", "COLUMNS", "LINES"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """Write ``env`` as POSIX shell assignments to a new file only we can read.

    Names that are not shell identifiers (e.g. exported bash functions) are skipped.
    """
    lines = "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items() if _ENV_NAME.fullmatch(k))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(lines)


def _default_terminal() -> str:
    for base in (
        "/usr/share/terminfo",
        "/lib/terminfo",
        "/etc/terminfo",
        os.path.expanduser("~/.terminfo"),
    ):
        if os.path.exists(os.path.join(base, "t", "tmux-256color")):
            return "tmux-256color"
    return "screen-256color"


def compose_replay(
    meta: list[str], history: list[str], screen: list[str], saved_screen: list[str] | None
) -> str:
    """Build the replay text from a snapshot's pieces (pure; see :meth:`Stream.snapshot`).

    ``meta`` is the fields of ``_META_FORMAT``; ``history`` and ``screen`` are captured
    lines (with escapes); ``saved_screen`` is the normal screen when a full-screen
    program has the alternate screen active. The result starts with a full reset, so it
    can be written onto a terminal that already shows an older copy.
    """
    (
        history_size,
        alternate_on,
        cursor_x,
        cursor_y,
        cursor_flag,
        keypad_cursor,
        keypad,
        mouse_standard,
        mouse_button,
        mouse_any,
        mouse_sgr,
        region_upper,
        region_lower,
        height,
    ) = (int(v or 0) for v in meta)

    def lines(block: list[str]) -> str:
        return "\x1b[0m\r\n".join(block) + "\x1b[0m"

    out = ["\x1bc\x1b[3J"]
    if history_size:
        out.append(lines(history) + "\r\n")
    if alternate_on and saved_screen is not None:
        out.append(lines(saved_screen))
        out.append("\x1b[?1049h\x1b[H\x1b[2J")
    out.append(lines(screen))
    if not cursor_flag:
        out.append("\x1b[?25l")
    if keypad_cursor:
        out.append("\x1b[?1h")
    if keypad:
        out.append("\x1b=")
    for flag, mode in (
        (mouse_standard, 1000),
        (mouse_button, 1002),
        (mouse_any, 1003),
        (mouse_sgr, 1006),
    ):
        if flag:
            out.append(f"\x1b[?{mode}h")
    if (region_upper, region_lower) != (0, height - 1) and region_lower > region_upper:
        out.append(f"\x1b[{region_upper + 1};{region_lower + 1}r")
    out.append(f"\x1b[{cursor_y + 1};{cursor_x + 1}H")
    return "".join(out)


class TmuxBackend(Backend):
    """Sessions in one tmux server per state dir, on ``<state_dir>/tmux/socket``."""

    name = "tmux"

    tmux_command = Unicode("tmux", config=True, help="The tmux executable to use.")
    history_limit = Int(
        20000,
        config=True,
        help="Lines of history tmux keeps per session (replayed to reconnecting clients).",
    )
    default_terminal = Unicode(
        config=True,
        help="$TERM inside sessions (tmux's default-terminal); tmux-256color if its "
        "terminfo is installed, else screen-256color.",
    )

    @default("default_terminal")
    def _default_default_terminal(self) -> str:
        return _default_terminal()

    def __init__(self, state_dir: Path, **kwargs: object) -> None:
        super().__init__(state_dir, **kwargs)
        self.tmux_dir = state_dir / "tmux"
        self.socket_path = self.tmux_dir / "socket"
        self.config_path = self.tmux_dir / "tmux.conf"
        # tmux itself runs with a minimal environment; each session gets its own (-e)
        self._env = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR")
        }
        self._env["LC_ALL"] = "C.UTF-8"

    # -- control plane ---------------------------------------------------------------

    def _argv(self, *args: str) -> list[str]:
        return [
            self.tmux_command,
            "-u",
            "-S",
            str(self.socket_path),
            "-f",
            str(self.config_path),
            *args,
        ]

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(
                self._argv(*args),
                env=self._env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=30,
                check=False,
            )
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
        if len(str(self.socket_path)) > _MAX_SOCKET_PATH:
            raise BackendUnavailable(
                f"tmux socket path {self.socket_path} is too long for a unix socket; "
                "choose a shorter AgentsApp.state_dir"
            )
        ensure_private_dir(self.tmux_dir)
        ensure_private_dir(self.transcript_dir)
        self.config_path.write_text(
            _CONFIG.format(history_limit=self.history_limit, default_terminal=self.default_terminal)
        )

    def spawn(self, request: SpawnRequest) -> LiveSession:
        sid = check_session_id(request.session_id)
        log = self.transcript_path(sid)
        create_private_file(log)
        # The environment travels in a private file the session's first process reads
        # and deletes: as ``-e`` arguments it would sit in the tmux server's command line,
        # readable by every user of the machine (secrets included).
        env_file = self.tmux_dir / f"env-{sid}"
        write_env_file(env_file, {k: v for k, v in request.env.items() if k not in _TMUX_OWNED})
        command = (
            'exec env -i TERM="$TERM" TMUX="$TMUX" TMUX_PANE="$TMUX_PANE" /bin/sh -c '
            + shlex.quote('set -a; . "$0"; rm -f "$0"; set +a; exec "$@"')
            + " "
            + shlex.join([str(env_file), *request.argv])
        )
        pipe = "exec cat >> " + shlex.quote(str(log))
        try:
            proc = self._run(
                "new-session", "-d", "-s", sid, "-x", str(request.cols), "-y",
                str(request.rows), "-c", tmux_format_arg(request.cwd), "--",
                tmux_arg(command), ";",
                "pipe-pane", "-O", "-t", f"={sid}:", tmux_format_arg(pipe), ";",
                "display-message", "-p", "-t", f"={sid}:", "#{pane_pid}",
            )  # fmt: skip
        except BackendUnavailable:
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
        proc = self._run(
            "list-panes",
            "-a",
            "-F",
            f"#{{pane_pid}}\t{_DEAD_FORMAT}\t#{{pane_dead_time}}\t#{{session_name}}",
            check=False,
        )
        if proc.returncode:
            gone = ("no server running", "error connecting", "server exited unexpectedly")
            if any(reason in proc.stderr for reason in gone):  # none, or dying right now
                return []
            raise BackendUnavailable(f"tmux list-panes failed: {proc.stderr.strip()}")
        seen: dict[str, LiveSession] = {}
        for line in proc.stdout.splitlines():
            pid, dead_value, dead_time, name = line.split("\t", 3)
            if name not in seen:  # first pane of a session is the one we started
                dead, exit_code = parse_dead(dead_value)
                seen[name] = LiveSession(
                    name,
                    int(pid) if pid.isdigit() else None,
                    dead,
                    exit_code,
                    float(dead_time) if dead and dead_time.isdigit() else None,
                )
        return list(seen.values())

    def nudge(self, server_pid: int | None = None) -> None:
        """Make the tmux server reap its exited children: send it SIGCHLD, the signal it
        missed. Harmless to any process (SIGCHLD's default is to be ignored)."""
        if server_pid is None:
            proc = self._run("display-message", "-p", "#{pid}", check=False)
            if proc.returncode or not proc.stdout.strip().isdigit():
                return
            server_pid = int(proc.stdout.strip())
        with contextlib.suppress(OSError):
            os.kill(server_pid, signal.SIGCHLD)

    def remove(self, session_id: str) -> None:
        self._run("kill-session", "-t", tmux_arg(f"={session_id}"), check=False)

    def kill_server(self) -> None:
        """Stop the tmux server of this state dir and everything in it."""
        self._run("kill-server", check=False)

    def attach(self, session_id: str, listener: StreamListener) -> Stream:
        return TmuxStream(self, check_session_id(session_id), listener)

    def debug_attach_command(self, session_id: str) -> list[str]:
        return [self.tmux_command, "-S", str(self.socket_path), "attach", "-t", f"={session_id}"]


_Reply = Callable[[bool, list[bytes]], None]


class TmuxStream(QueuedStream[_Reply]):
    """One control-mode client attached to one session (see module docstring)."""

    def __init__(self, backend: TmuxBackend, session_id: str, listener: StreamListener) -> None:
        super().__init__(listener)
        self._backend = backend
        self._target = f"={session_id}:"
        self._proc: asyncio.subprocess.Process | None = None
        argv = backend._argv("-C", "attach-session", "-f", "ignore-size", "-t", f"={session_id}")
        # subscribe to pane death first thing: reported within a second by tmux
        self._command(f"refresh-client -B 'dead:%*:{_DEAD_FORMAT}'")
        self._start(self._connect(argv, backend._env))

    # -- Stream API ------------------------------------------------------------------

    def snapshot(self, callback: Callable[[str], None]) -> None:
        parts: list[list[bytes]] = []

        def collect(ok: bool, lines: list[bytes]) -> None:
            parts.append(lines if ok else [])
            if len(parts) < 4:
                return
            meta, history, screen, saved = (
                [line.decode("utf-8", "replace") for line in p] for p in parts
            )
            fields = meta[0].split(" ") if meta else []
            if len(fields) != _META_FORMAT.count("#{"):
                return  # session vanished between request and reply; on_exit follows
            callback(compose_replay(fields, history, screen, saved if parts[3] else None))

        t = self._target
        self._command(
            f"display-message -p -t {t} '{_META_FORMAT}' ; "
            f"capture-pane -p -e -J -S - -E -1 -t {t} ; "
            f"capture-pane -p -e -J -S 0 -E - -t {t} ; "
            f"capture-pane -a -p -e -J -t {t}",
            collect,
            replies=4,
        )

    def write(self, data: str) -> None:
        raw = data.encode("utf-8", "surrogateescape")
        for i in range(0, len(raw), _SEND_CHUNK):
            chunk = raw[i : i + _SEND_CHUNK]
            self._command(f"send-keys -t {self._target} -H {chunk.hex(' ')}")

    def resize(self, rows: int, cols: int) -> None:
        self._command(f"resize-window -t {self._target} -x {int(cols)} -y {int(rows)}")

    # -- internals -------------------------------------------------------------------

    def _command(self, line: str, reply: _Reply | None = None, replies: int = 1) -> None:
        # commands sent before the attach completes would run before it, and output
        # between a snapshot and the attach would reach nobody: the skeleton holds them
        # until %session-changed
        self._send(line.encode() + b"\n", *([reply or _ignore_reply] * replies))

    def _transmit(self, data: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(data)

    def _hang_up(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()  # EOF detaches the control client

    def _abort(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def _connect(self, argv: list[str], env: dict[str, str]) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            if self._closed:
                self._proc.stdin.close()
            await self._read(self._proc.stdout)
        finally:
            if self._proc.stdin is not None and not self._proc.stdin.is_closing():
                self._proc.stdin.close()
            await self._proc.wait()

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        """Parse control-mode lines as they come, in big reads: the ``%output`` lines of
        one read go to the listener as one piece (fewer websocket frames), and any other
        line first flushes the output before it, so replies stay ordered against it."""
        block: list[bytes] | None = None
        head: list[bytes] = []
        ours = False
        rest = b""
        output: list[bytes] = []

        def flush() -> None:
            if output:
                self._deliver(unescape_output(b"".join(output)))
                output.clear()

        while True:
            chunk = await stdout.read(1 << 16)
            if not chunk:
                flush()
                return
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if block is None and line.startswith(b"%output "):
                    output.append(line[8:].partition(b" ")[2])
                    continue
                flush()
                if block is not None:
                    if line.startswith((b"%end ", b"%error ")) and line.split(b" ")[1:] == head:
                        if ours and self._pending:
                            self._pending.popleft()(line.startswith(b"%end"), block)
                        block = None
                    else:
                        block.append(line)
                elif line.startswith(b"%begin "):
                    head = line.split(b" ")[1:]
                    ours = head[-1:] == [b"1"]
                    block = []
                elif line.startswith(b"%subscription-changed dead "):
                    dead, exit_code = parse_dead(line.rpartition(b" : ")[2].decode())
                    if dead and exit_code is not None:
                        self._report_exit(exit_code)
                    elif dead:  # no status yet: tmux may have missed the SIGCHLD
                        self._command("display-message -p '#{pid}'", self._nudge_later)
                elif line.startswith(b"%session-changed") and not self._ready:
                    self._flush_outbox()  # attached: output from here on reaches us
                elif line.startswith(b"%exit"):
                    return
            flush()

    def _nudge_later(self, ok: bool, lines: list[bytes]) -> None:
        """Reply to ``display-message -p '#{pid}'`` after a death without a status: if
        none has come a second later, nudge the tmux server (:meth:`TmuxBackend.nudge`)."""
        if ok and lines and lines[0].strip().isdigit():
            pid = int(lines[0])
            asyncio.get_running_loop().call_later(
                1.0, lambda: None if self._exit_reported else self._backend.nudge(pid)
            )


def _ignore_reply(ok: bool, lines: list[bytes]) -> None:
    """Replies to input and resize commands carry nothing we need."""
