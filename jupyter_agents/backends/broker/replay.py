"""The broker's replay: an honest *bounded raw* replay of each session's output.

Chosen by measurement over a headless terminal model (pyte 0.8.2, 80x24) on this 2-core
machine, feeding ~1 MB each of ``seq``-like lines, coloured ``ls``-like lines and
full-screen TUI redraws: pyte's ``Screen`` rendered 0.35-0.50 MB/s and its
``HistoryScreen`` (20000 lines, needed to replay history) 0.11-0.18 MB/s, while a pty
delivers ~32 MB/s and this replay takes 86-725 MB/s (feed, trim and
one snapshot). Feeding every byte to pyte would make the broker the bottleneck of every
busy terminal (a 200 MB flood would take 20-30 minutes of a core instead of ~6 s).

What a replay is: a full reset, the modes (:class:`~jupyter_agents.terminal.vt.TerminalModes`:
alternate screen, cursor keys, mouse, bracketed paste, focus, insert, cursor style,
scroll region, title...) that were in force where the kept bytes start, then the
last :data:`REPLAY_BYTES` to ``2 * REPLAY_BYTES`` bytes of raw output, cut at a line
start, with terminal *queries* removed (their answers would be typed into the running
program). Written into a fresh terminal, it redraws what those bytes
drew: the screen of a full-screen program that redraws itself (most do, often), and
the recent history of a shell. What it cannot redraw is older than the kept bytes
(e.g. a TUI's screen that has not been repainted since), and output produced at
another terminal width wraps at the new one.
"""

from __future__ import annotations

import re

from jupyter_agents.terminal.vt import REPLAYED_NOT, TerminalModes

#: raw output kept per session is between this and twice this (trimmed in whole lines)
REPLAY_BYTES = 512 * 1024

RESET = b"\x1bc\x1b[3J"


class Replay:
    """The bounded raw replay of one session (module docstring).

    >>> r = Replay(limit=8)
    >>> r.feed(b"\\x1b[?1049hold line\\r\\n")
    >>> r.feed(b"next\\r\\nlast\\x1b[6n")
    >>> r.snapshot()
    b'\\x1bc\\x1b[3J\\x1b[?1049h\\x1b[?25hnext\\r\\nlast'
    """

    def __init__(self, limit: int = REPLAY_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()
        #: the modes in force where ``_buf`` starts
        self._modes = TerminalModes()

    def feed(self, data: bytes) -> None:
        """Append output; trims to :attr:`limit` (at a line start) past ``2 * limit``."""
        self._buf += data
        if len(self._buf) > 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        cut = len(self._buf) - self.limit
        newline = self._buf.find(b"\n", cut, cut + 4096)
        cut = newline + 1 if newline >= 0 else cut
        self._modes.feed(bytes(self._buf[:cut]))
        del self._buf[:cut]

    def snapshot(self) -> bytes:
        """Reset, the modes where the kept bytes start, the kept bytes without queries
        and clipboard writes (:data:`~jupyter_agents.terminal.vt.REPLAYED_NOT`)."""
        modes = self._modes.sequences(buffers=True) + self._modes.layout()
        return RESET + modes + REPLAYED_NOT.sub(b"", self._buf)


#: the reset and the modes (:meth:`~jupyter_agents.terminal.vt.TerminalModes.sequences`, ``layout``)
_PREFIX = re.compile(
    "\x1bc\x1b\\[3J(?:\x1b\\[\\??[0-9;]*[hlr]|\x1b[=>]|\x1b\\[[0-9]* q|\x1b\\]2;[^\x07]*\x07)*"
)
#: what wipes the screen: what came before it is not on the screen any more
_WIPE = re.compile("\x1bc|\x1b\\[[23]J|\x1b\\[\\?(?:1049|1047|47)h")


def screen_only(replay: str, rows: int) -> str:
    r"""A replay (:meth:`Replay.snapshot`, decoded) cut to what a terminal ``rows``
    high shows at its end: the reset and modes, then the last ``rows`` lines, from the
    last screen wipe (clear, reset, alternate screen) if one is among them. An
    approximation where lines wrap or a full-screen program moved the cursor, but never
    more than that: no history, nothing cleared.

    >>> screen_only("\x1bc\x1b[3J\x1b[?25lold\r\nsecret\r\nscreen 1\r\nscreen 2", 2)
    '\x1bc\x1b[3J\x1b[?25lscreen 1\r\nscreen 2'
    >>> screen_only("\x1bc\x1b[3Jpassword: hunter2\r\n\x1b[H\x1b[2J$ ", 5)
    '\x1bc\x1b[3J\x1b[2J$ '
    """
    m = _PREFIX.match(replay)
    head = m.end() if m else 0
    start = len(replay)
    for _ in range(rows):
        start = replay.rfind("\n", head, start)
        if start < 0:
            start = head - 1
            break
    start += 1
    wipes = [w.start() for w in _WIPE.finditer(replay, start)]
    if wipes:
        start = wipes[-1]
    return replay[:head] + replay[start:]
