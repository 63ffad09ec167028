"""Restore after a reboot: what a restored terminal shows before its new process.

A restored session comes back in a new process (the old one is gone), so its terminal
would start blank. Instead it first shows the tail of the old transcript and a marker
line, then the resumed agent. The tail is an *honest bounded raw replay*: the last
bytes of the raw transcript, cut at a line start, with the sequences removed that
would misbehave when replayed (terminal queries whose answers would be typed into the
new process, alternate-screen and mode switches, full resets). Pure functions here; the
TerminalManager writes the prelude file and spawns :func:`prelude_argv`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

#: bytes of the old transcript shown by default
TAIL_BYTES = 32 * 1024

_UNSAFE = re.compile(
    rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (titles, colour queries, hyperlinks)
    rb"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS / PM / APC / SOS strings
    rb"|\x1b\[[?>=]?[0-9;]*[hlnc]"  # mode switches, device status/attribute queries
    rb"|\x1b\[[0-9;]*t"  # window ops (some report back)
    rb"|\x1bc"  # full reset (would clear what we replay)
)
#: after the replay: normal attributes, main screen, visible cursor, no mouse/paste modes
_SANE = (
    b"\x1b[0m\x1b[?1049l\x1b[?25h\x1b[?1l\x1b>"
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

    >>> banner("claude", "c0ffee", "s1", datetime(2026, 11, 29, 17, 5, tzinfo=timezone.utc))
    '--- restored claude session c0ffee (previous run ended 2026-11-29 17:05 UTC) ---'
    """
    when = ended.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ended else "unknown"
    name = conversation_id or session_id
    return f"--- restored {kind} session {name} (previous run ended {when}) ---"


def transcript_end(path: Path) -> datetime | None:
    """When the transcript was last written (the old run's last output), if it exists."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return None


def prelude(transcript: Path, marker: str, limit: int = TAIL_BYTES) -> bytes:
    """The bytes a restored terminal shows first: old tail, then the marker line."""
    try:
        with transcript.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - limit - 1))
            data = f.read()
    except OSError:
        data = b""
    return sanitize_tail(data, limit) + b"\x1b[1m" + marker.encode() + b"\x1b[0m\r\n"


def prelude_argv(prelude_file: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped to print and delete ``prelude_file`` first (no shell parsing of
    either: both travel as arguments)."""
    script = 'cat -- "$0" 2>/dev/null; rm -f -- "$0"; exec "$@"'
    return ["/bin/sh", "-c", script, str(prelude_file), *argv]
