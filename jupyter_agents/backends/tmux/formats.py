"""tmux's formats and quoting, pure: the config we write, command-line escaping,
control-mode ``%output`` unescaping, pane-death and version parsing, the environment
file sessions read, the transcript writer ``pipe-pane`` runs, and a snapshot's commands,
the decoding of their replies and composing a replay from its pieces.

Facts these rely on (tmux >= 3.2, checked on 3.3a):

- A command-line argument ending in ``;`` ends a tmux command; :func:`tmux_arg`
  escapes it. ``new-session -c`` is format-expanded (``#`` must be doubled);
  ``-e`` values and the shell command are not.
- ``window-size manual`` in the config crashes tmux 3.3a on ``new-session -d``; we
  size windows with ``resize-window`` instead.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from ...segments import segmenting

MIN_TMUX_VERSION = (3, 2)
#: longest input chunk per ``send-keys`` command (hex doubles it, plus separators)
SEND_CHUNK = 1024
#: unix socket paths are limited to ~108 bytes by the kernel
MAX_SOCKET_PATH = 100

CONFIG = """\
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
set -g detach-on-destroy off
set -g escape-time 0
set -g focus-events on
set -g set-clipboard off
set -gw aggressive-resize off
"""

#: The writer of a session's transcript (the layout of :mod:`jupyter_agents.segments`,
#: its timing index included), run by ``pipe-pane -O`` with the pane's output on stdin:
#: ``perl -e TRANSCRIPT_WRITER DIR SEGMENT_BYTES KEEP`` (:func:`transcript_pipe`). It
#: appends to the newest segment in DIR (continuing an earlier run's) and rolls to a new
#: one every SEGMENT_BYTES, deleting the oldest beyond KEEP (with their indexes, and gap
#: markers before the first kept byte), or earlier when its index is full. Index entries
#: follow the rules of the module :mod:`jupyter_agents.segments` (100 ms, 1/8 of the
#: segment: :data:`~jupyter_agents.segments.INDEX_INTERVAL`, ``INDEX_SHARE``). A failed write
#: (e.g. a full disk) loses that read's output and leaves one empty
#: ``gap-<offset>-<unixtime>`` marker per episode; every later read tries again, so the
#: pane never blocks and tmux never buffers a flood. It ends when the pipe ends. Perl
#: because POSIX sh cannot tell the time below a second and one process per session is
#: the cost wanted (perl-base is Essential on Debian; ``Time::HiRes`` from the ``perl``
#: package gives milliseconds, else the index has whole seconds).
TRANSCRIPT_WRITER = r"""
use strict;
use warnings;
BEGIN { eval { require Time::HiRes; Time::HiRes->import('time'); 1 } }
umask 077;
my ($dir, $seg, $keep) = @ARGV;
chdir $dir or die "transcript writer: cannot enter $dir: $!\n";
binmode STDIN;
sub starts {
    opendir(my $dh, '.') or return ();
    my @s = sort { $a <=> $b } map { /\A(0|[1-9][0-9]*)\.log\z/ ? $1 : () } readdir $dh;
    closedir $dh;
    return @s;
}
my @starts = starts();
@starts = (0) unless @starts;
my $start = $starts[-1];
my ($log, $idx);
sub open_segment {
    open($log, '>>', "$start.log") or die "transcript writer: $start.log: $!\n";
    binmode $log;
    $idx = undef unless open($idx, '>>', "$start.idx");
}
open_segment();
my $size = -s $log || 0;
my ($last_o, $last_ms, $isize, $failing) = (-1, 0, 0, 0);
sub roll {
    close $log;
    close $idx if $idx;
    $start += $size;
    ($size, $last_o, $isize) = (0, -1, 0);
    open_segment();
    push @starts, $start;
    while (@starts > $keep) {
        my $old = shift @starts;
        unlink "$old.log", "$old.idx";
    }
    opendir(my $dh, '.') or return;
    for (readdir $dh) {
        unlink $_ if /\Agap-([0-9]+)-[0-9]+\z/ && $1 < $starts[0];
    }
    closedir $dh;
}
sub stamp {
    my ($o, $ms) = ($start + $size, int($_[0] * 1000));
    return if !$idx || ($last_o >= 0 && $ms - $last_ms < 100);
    my $line = $last_o < 0 ? "$o $ms\n" : ($o - $last_o) . ' ' . ($ms - $last_ms) . "\n";
    my $w = syswrite($idx, $line);
    ($last_o, $last_ms, $isize) = ($o, $ms, $isize + $w) if $w;
}
my $buf;
while (1) {
    my $n = sysread(STDIN, $buf, 65536);
    if (!defined $n) { next if $!{EINTR}; last; }
    last if $n == 0;
    my $now = time;
    my $pos = 0;
    while ($pos < $n) {
        roll() if $size >= $seg || $isize >= $seg / 8;
        stamp($now);
        my $room = $seg - $size;
        my $w = syswrite($log, $buf, $n - $pos < $room ? $n - $pos : $room, $pos);
        if (!$w) {
            $size = -s "$start.log" || 0;
            if (!$failing) {
                $failing = 1;
                my $gap = $start + $size;
                if (open(my $g, '>', sprintf('gap-%d-%d', $gap, $now))) { close $g }
            }
            last;
        }
        $failing = 0;
        $pos += $w;
        $size += $w;
    }
}
"""
#: what the transcript writer runs
TRANSCRIPT_WRITER_TOOLS = ("perl",)


def transcript_pipe(directory: Path, max_bytes: int) -> str:
    """The ``pipe-pane`` shell command writing a session's transcript into
    ``directory`` with the cap ``max_bytes``: :data:`TRANSCRIPT_WRITER` with every path
    and number an argument of its own (to pass to tmux through :func:`tmux_format_arg`).

    >>> transcript_pipe(Path("/s/t/a b"), 1 << 20).endswith("' '/s/t/a b' 131072 8")
    True
    """
    size, keep = segmenting(max_bytes)
    argv = ["perl", "-e", TRANSCRIPT_WRITER, str(directory), str(size), str(keep)]
    return "exec " + shlex.join(argv)


#: the pane's state a replay needs besides its text, in the order of :data:`META_FORMAT`
META_FIELDS = (
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
    "pane_width",
)
META_FORMAT = " ".join(f"#{{{f}}}" for f in META_FIELDS)


@dataclasses.dataclass(frozen=True)
class TmuxCommand:
    """How this process runs tmux against the server of a state dir: ``executable``
    on ``socket`` with the config file ``config``, each tmux process with the
    environment ``env`` (a minimal one: the tmux server passes its own to every session
    it starts). The backend's control plane and the control clients (:mod:`.control`)
    run tmux alike through it.

    >>> TmuxCommand("tmux", Path("/s/socket"), Path("/s/tmux.conf"), {}).argv("ls")
    ['tmux', '-u', '-S', '/s/socket', '-f', '/s/tmux.conf', 'ls']
    """

    executable: str
    socket: Path
    config: Path
    env: Mapping[str, str]

    def argv(self, *args: str) -> list[str]:
        """The command line of tmux running ``args`` (UTF-8 always, ``-u``)."""
        return [self.executable, "-u", "-S", str(self.socket), "-f", str(self.config), *args]


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


def tmux_pipe_arg(value: str) -> str:
    """Like :func:`tmux_format_arg`, for the command of ``pipe-pane``, which tmux also
    passes through ``strftime`` (``%`` doubled; ``new-session -c`` is not).

    >>> tmux_pipe_arg("printf '%d' #1")
    "printf '%%d' ##1"
    """
    return tmux_format_arg(value.replace("%", "%%"))


def tmux_quote_path(path: Path) -> str:
    """``path`` as one argument of a command line sent to tmux (a control client's
    input), for a command that expands formats in it (``save-buffer``): single-quoted,
    each ``'`` as ``'\\''`` (tmux's parser joins the pieces, as a shell does), ``#``
    doubled. It must hold no newline, which would end the line (the state dirs of
    :class:`~.TmuxBackend` hold none).

    >>> print(tmux_quote_path(Path("/s/it's #1")))
    '/s/it'\\''s ##1'
    """
    return "'" + str(path).replace("#", "##").replace("'", "'\\''") + "'"


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
DEAD_FORMAT = "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}"


def parse_dead(value: str) -> tuple[bool, int | None]:
    """Parse ``DEAD_FORMAT`` -> (dead, exit code); a signal ``n`` reads as ``128 + n``.

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


#: what a stream asks of its session's pane first (:func:`parse_pane`)
PANE_FORMAT = "#{session_name} #{pane_id} #{pane_pid} #{pid} #{pane_pipe}"


def parse_pane(line: bytes, session_id: str) -> tuple[str, int | None, int | None, bool] | None:
    """Parse :data:`PANE_FORMAT` of ``session_id`` -> (pane id, its process's pid, the
    tmux server's pid, whether its transcript is piped); None if it is another session's
    (tmux answers for the client's own session when the target is gone) or not one.

    >>> parse_pane(b"s1 %3 42 7 1", "s1"), parse_pane(b"s2 %3 42 7 1", "s1")
    (('%3', 42, 7, True), None)
    """
    fields = line.decode(errors="replace").split()
    if len(fields) != 5 or fields[0] != session_id or not re.fullmatch(r"%[0-9]+", fields[1]):
        return None
    _, pane, pid, server_pid, piped = fields
    pids = [int(n) if n.isdigit() else None for n in (pid, server_pid)]
    return pane, pids[0], pids[1], piped == "1"


#: variables tmux sets for each pane itself; a session's environment never overrides them
TMUX_OWNED = frozenset({"TERM", "TMUX", "TMUX_PANE", "COLUMNS", "LINES"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """Write ``env`` as POSIX shell assignments to a new file only we can read.

    Names that are not shell identifiers (e.g. exported bash functions) are skipped.
    """
    lines = "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items() if _ENV_NAME.fullmatch(k))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(lines)


def default_terminal() -> str:
    for base in (
        "/usr/share/terminfo",
        "/lib/terminfo",
        "/etc/terminfo",
        os.path.expanduser("~/.terminfo"),
    ):
        if os.path.exists(os.path.join(base, "t", "tmux-256color")):
            return "tmux-256color"
    return "screen-256color"


def snapshot_commands(
    target: str, recent: int, history_into: tuple[str | None, str] | None = None
) -> str:
    """The commands of a snapshot of ``target``'s pane, five replies: the meta fields
    (:data:`META_FORMAT`), the history older than ``recent`` lines (plain text), the
    rest of the history and the screen (with escapes), and the normal screen under an
    alternate one (see :func:`compose_replay`). The last fails when there is no
    alternate screen, and a failed command ends its line. ``history_into``: the two
    captures of history go into these tmux buffers instead, with empty replies; no
    buffer for the older history (None: it is known, :mod:`.history`) leaves it
    uncaptured, its command only answering.

    >>> snapshot_commands("=s:", 5, ("a", "b")).split(" ; ")[1:3]
    ['capture-pane -b a -J -S - -E -6 -t =s:', 'capture-pane -b b -e -J -S -5 -E -1 -t =s:']
    >>> snapshot_commands("=s:", 5, (None, "b")).split(" ; ")[1]
    "display-message -p -t =s: ''"
    """
    old_into, recent_into = history_into or ("", "")
    capture_old = (
        f"display-message -p -t {target} ''"
        if old_into is None
        else f"capture-pane {_into(old_into)} -J -S - -E {-recent - 1} -t {target}"
    )
    return (
        f"display-message -p -t {target} '{META_FORMAT}' ; "
        f"{capture_old} ; "
        f"capture-pane {_into(recent_into)} -e -J -S {-recent} -E -1 -t {target} ; "
        f"capture-pane -p -e -J -S 0 -E - -t {target} ; "
        f"capture-pane -a -p -e -J -t {target}"
    )


def _into(buffer: str) -> str:
    """Where a capture goes: tmux buffer ``buffer``, or the reply (none given)."""
    return f"-b {buffer}" if buffer else "-p"


def decode_lines(lines: list[bytes] | None) -> list[str] | None:
    """The text of a reply's lines (None stays None), decoded in one piece.

    >>> decode_lines([b"a", b"\\xff"]), decode_lines([]), decode_lines(None)
    (['a', '\\ufffd'], [], None)
    """
    if lines is None:
        return None
    return b"\n".join(lines).decode("utf-8", "replace").split("\n") if lines else []


def snapshot_replay(
    parts: list[list[str] | None], recent: int, with_history: bool = True
) -> str | None:
    """The replay text of a snapshot from the decoded replies to
    :func:`snapshot_commands` (``recent`` as given there); None when the meta fields are
    missing (the session vanished meanwhile). ``with_history=False``: the screen only.

    >>> def meta(history_size):
    ...     return [" ".join([str(history_size)] + ["0"] * (META_FORMAT.count("#{") - 1))]
    >>> "old" in snapshot_replay([meta(9), ["old"], ["new"], ["$ "], None], 5)
    True
    >>> "old" in snapshot_replay([meta(2), ["old"], ["new"], ["$ "], None], 5)
    False
    >>> snapshot_replay([None] * 5, 5) is None
    True
    """
    meta, old, recent_lines, screen, saved = (p or [] for p in parts)
    fields = meta[0].split(" ") if meta else []
    if len(fields) != META_FORMAT.count("#{"):
        return None
    # the plain capture of older history holds the top line again when there is none
    history = (old if int(fields[0] or 0) > recent else []) + recent_lines
    saved_screen = saved if parts[4] else None
    return compose_replay(fields, history if with_history else [], screen, saved_screen)


def compose_replay(
    meta: list[str], history: list[str], screen: list[str], saved_screen: list[str] | None
) -> str:
    """Build the replay text from a snapshot's pieces (pure; see :meth:`Stream.snapshot`).

    ``meta`` is the fields of ``META_FORMAT``; ``history`` and ``screen`` are captured
    lines (with escapes); ``saved_screen`` is the normal screen when a full-screen
    program has the alternate screen active (``history`` empty: the screen only). The
    result starts with a full reset, so it can be written onto a terminal that already
    shows an older copy.
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
        _width,
    ) = (int(v or 0) for v in meta)

    def lines(block: list[str]) -> str:
        return "\x1b[0m\r\n".join(block) + "\x1b[0m"

    out = ["\x1bc\x1b[3J"]
    if history_size and history:
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
