"""tmux's formats and quoting, pure: the config we write, command-line escaping,
control-mode ``%output`` unescaping, pane-death and version parsing, the environment
file sessions read, the transcript writer ``pipe-pane`` runs, and composing a replay
from a snapshot's pieces.

Facts these rely on (tmux >= 3.2, checked on 3.3a):

- A command-line argument ending in ``;`` ends a tmux command; :func:`tmux_arg`
  escapes it. ``new-session -c`` is format-expanded (``#`` must be doubled);
  ``-e`` values and the shell command are not.
- ``window-size manual`` in the config crashes tmux 3.3a on ``new-session -d``; we
  size windows with ``resize-window`` instead.
"""

from __future__ import annotations

import codecs
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from ...transcripts import segmenting

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
set -g escape-time 0
set -g focus-events on
set -g set-clipboard off
set -gw aggressive-resize off
"""

#: The writer of a session's transcript (the layout of :mod:`jupyter_agents.transcripts`),
#: run by ``pipe-pane -O`` with the pane's output on stdin: ``sh -c TRANSCRIPT_WRITER sh
#: DIR SEGMENT_BYTES KEEP`` (:func:`transcript_pipe`). It appends to the newest segment
#: in DIR (continuing an earlier run's) and rolls to a new one every SEGMENT_BYTES,
#: deleting the oldest beyond KEEP (and gap markers before the first kept byte); it ends
#: when the pipe ends (head copied less than asked, exit 0). A failed write (head exits
#: non-zero, e.g. a full disk) leaves one empty ``gap-<offset>-<unixtime>`` marker per
#: episode, then the input is discarded a second at a time between retries, so the pane
#: never blocks and tmux never buffers a flood. GNU ``head -c`` reads no more than it
#: copies (no byte of the pipe is lost at a segment boundary); ``stdbuf -o0`` makes it
#: write each read at once (stdio would hold output back until it exits). Per session:
#: this sh and one head; a few short processes per segment.
TRANSCRIPT_WRITER = """\
umask 077
cd "$1" || exit 1
seg=$2 keep=$3 start=-1 gap=-1
for f in *.log; do
    n=${f%.log}
    case $n in ''|*[!0-9]*|0?*) continue ;; esac
    [ "$n" -gt "$start" ] && start=$n
done
[ "$start" -ge 0 ] || start=0
measure() { size=$(wc -c 2>/dev/null <"$start.log") || size=0; }
drop() {
    while :; do
        n=0 first=
        for f in *.log; do
            o=${f%.log}
            case $o in ''|*[!0-9]*|0?*) continue ;; esac
            n=$((n + 1))
            [ -n "$first" ] && [ "$first" -lt "$o" ] || first=$o
        done
        [ "$n" -gt "$keep" ] || break
        rm -f "$first.log"
    done
    [ -n "$first" ] || return 0
    for f in gap-*; do
        o=${f#gap-}
        o=${o%%-*}
        case $o in ''|*[!0-9]*) continue ;; esac
        [ "$o" -ge "$first" ] || rm -f "$f"
    done
}
measure
while :; do
    if [ "$size" -ge "$seg" ]; then
        start=$((start + size)) size=0
        true >>"$start.log"
        drop
    fi
    if stdbuf -o0 head -c $((seg - size)) >>"$start.log"; then
        measure
        [ "$size" -ge "$seg" ] || exit 0
    else
        measure
        if [ $((start + size)) != "$gap" ]; then
            gap=$((start + size))
            true >"gap-$gap-$(date +%s)"
        fi
        timeout 1 cat >/dev/null
        [ $? = 124 ] || exit 0
    fi
done
"""
#: what the transcript writer runs besides sh (GNU coreutils)
TRANSCRIPT_WRITER_TOOLS = ("stdbuf", "head", "wc", "timeout", "cat", "date", "rm")


def transcript_pipe(directory: Path, max_bytes: int) -> str:
    """The ``pipe-pane`` shell command writing a session's transcript into
    ``directory`` with the cap ``max_bytes``: :data:`TRANSCRIPT_WRITER` with every path
    and number an argument of its own (to pass to tmux through :func:`tmux_format_arg`).

    >>> transcript_pipe(Path("/s/t/a b"), 1 << 20).endswith("sh '/s/t/a b' 131072 8")
    True
    """
    size, keep = segmenting(max_bytes)
    argv = ["/bin/sh", "-c", TRANSCRIPT_WRITER, "sh", str(directory), str(size), str(keep)]
    return "exec " + shlex.join(argv)


META_FORMAT = " ".join(
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


def compose_replay(
    meta: list[str], history: list[str], screen: list[str], saved_screen: list[str] | None
) -> str:
    """Build the replay text from a snapshot's pieces (pure; see :meth:`Stream.snapshot`).

    ``meta`` is the fields of ``META_FORMAT``; ``history`` and ``screen`` are captured
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
