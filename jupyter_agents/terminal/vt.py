r"""The terminal control sequences a replay must know about, in one place for every
replay (the broker's, the restore tail's).

:data:`QUERIES` are the sequences a terminal *answers*: xterm.js (JupyterLab's terminal)
replies through its input to device status and attribute requests, mode and setting
queries, colour and clipboard queries. Replayed into a browser, each would make it type
its answer into the running program, so no replay carries them.

:data:`CLIPBOARD` is every OSC 52 sequence, reads and writes: a write replayed (a
reconnect, a reload) would replace the clipboard again with what a program copied once,
maybe long ago. :data:`REPLAYED_NOT` is both: what no replay carries.

>>> QUERIES.sub(b"", b"a\x1b[6nb\x1b[?2004$pc\x1b[>qd\x1b]11;?\x07e\x1b]4;1;?\x1b\\f\x1b[1mg")
b'abcdef\x1b[1mg'
"""

from __future__ import annotations

import dataclasses
import re

from jupyter_agents.core.errors import InvalidRequest

QUERIES = re.compile(
    rb"\x1b\[[?>=]?[0-9;]*[nc]"  # device status, cursor position, device attributes
    rb"|\x1b\[[0-9;]*t"  # window ops (some report back)
    rb"|\x1b\[\??[0-9;]*\$p"  # mode queries (DECRQM, ANSI and private)
    rb"|\x1b\[>[0-9;]*q"  # terminal name and version (XTVERSION)
    rb"|\x1b\[\?u"  # keyboard protocol flags (kitty)
    rb"|\x1bP[+$]q[^\x1b]*(?:\x1b\\)?"  # terminfo / setting queries (XTGETTCAP, DECRQSS)
    rb"|\x1b\][0-9]+;(?:[0-9]+;)*\?(?:\x07|\x1b\\)"  # colour queries (OSC 4/10/11/12...;?)
    rb"|\x1b\]52;[^;\x07\x1b]*;\?(?:\x07|\x1b\\)"  # clipboard reads (OSC 52 ;?)
)
#: OSC 52, reads and writes (``ESC ] 52 ; Pc ; Pd`` ended by BEL or ST)
CLIPBOARD = re.compile(rb"\x1b\]52;[^\x07\x1b]*(?:\x07|\x1b\\)")
#: what no replay carries: :data:`QUERIES` and :data:`CLIPBOARD`
#:
#: >>> REPLAYED_NOT.sub(b"", b"a\x1b]52;c;Y3VybCBldmls\x07b\x1b]52;;?\x1b\\c\x1b[6nd")
#: b'abcd'
REPLAYED_NOT = re.compile(QUERIES.pattern + b"|" + CLIPBOARD.pattern)


#: the longest OSC 52 a :class:`ClipboardFilter` holds back while waiting for its end
MAX_CLIPBOARD_HELD = 1 << 20
_CLIPBOARD_TEXT = re.compile(CLIPBOARD.pattern.decode("latin-1"))


class ClipboardFilter:
    r"""Drops OSC 52 sequences (:data:`CLIPBOARD`) from text that arrives in pieces: a
    sequence split across pieces is held back until it ends (at most
    :data:`MAX_CLIPBOARD_HELD` characters, then let through: it is no sequence a
    terminal would take).

    >>> f = ClipboardFilter()
    >>> f.feed("a\x1b]52;c;Y3Vy"), f.feed("bA==\x07b"), f.feed("\x1b]52;c;"), f.end()
    ('a', 'b', '', '\x1b]52;c;')
    """

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        """``text`` without the OSC 52 sequences that end in it or before it."""
        text = _CLIPBOARD_TEXT.sub("", self._held + text)
        self._held = ""
        start = text.rfind("\x1b]52;")
        if start >= 0 and len(text) - start <= MAX_CLIPBOARD_HELD:
            self._held, text = text[start:], text[:start]
        return text

    def end(self) -> str:
        """What is still held back (a sequence that never ended)."""
        held, self._held = self._held, ""
        return held


#: DEC private modes a replay restores: the screen buffers (1049, 1047, 47: the caller
#: switches those), cursor keys (1), origin (6), wraparound (7), cursor visibility
#: (25), reverse wraparound (45), focus reporting (1004), bracketed paste (2004); and
#: the mouse's (:data:`MOUSE_MODES`) and the keypad's (66, as ``ESC =``: one flag)
PRIVATE_MODES = (1049, 1047, 47, 1, 6, 7, 25, 45, 1004, 2004)
#: the mouse tracking modes (one at a time: setting one replaces the other, resetting
#: any ends tracking) and the mouse encodings xterm.js knows (the same; 1005 and 1015
#: it ignores)
MOUSE_MODES, MOUSE_ENCODINGS = (9, 1000, 1002, 1003), (1006,)
#: DECSCUSR's shapes: parameter -> (shape, blinks)
_CURSOR_STYLES = {0: ("block", True), 1: ("block", True), 2: ("block", False)}
_CURSOR_STYLES |= {3: ("underline", True), 4: ("underline", False)}
_CURSOR_STYLES |= {5: ("bar", True), 6: ("bar", False)}
#: the alternate screen modes among them
BUFFER_MODES = (1049, 1047, 47)
#: what a private mode is after a reset (the others are off)
_ON_AT_RESET = {7: True, 25: True}
#: the longest title kept (characters)
MAX_TITLE = 256

#: the sequences that set a mode a replay restores (each group named by what it sets);
#: one literal first, so the engine skips from ESC to ESC
_SETTERS = re.compile(
    rb"\x1b(?:"
    # one branch for every CSI: its parameters scanned once, then its final byte (a
    # colour or a cursor move, most of a TUI's output, fails there at once)
    rb"\[(?P<private>\??)(?P<params>[0-9;]*+)(?P<final>[hlr]| q)"
    rb"|(?P<keypad>[=>])"
    rb"|\][02];(?P<title>[^\x07\x1b]*+)(?:\x07|\x1b\\)"
    rb"|(?P<reset>c)"
    rb"|(?P<soft_reset>\[!p)"
    rb")"
)
_TITLE_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def _cursor_style(shape: str, blink: bool | None) -> int:
    """DECSCUSR's parameter for a cursor ``shape`` that blinks or not."""
    return min(n for n, style in _CURSOR_STYLES.items() if style == (shape, bool(blink)))


def clean_title(title: str) -> str:
    """A title as plain text: control characters dropped, at most :data:`MAX_TITLE`.

    >>> clean_title("build\\x07 \\x1b[31mred\\u009b ok")
    'build [31mred ok'
    """
    return _TITLE_CONTROLS.sub("", title)[:MAX_TITLE]


def check_title(title: object) -> str | None:
    """A person's title for a session: text of 1 to :data:`MAX_TITLE` characters, no
    control characters (surrounding blanks dropped); None or empty clears it.
    :class:`~jupyter_agents.core.errors.InvalidRequest` otherwise.

    >>> check_title("  Fix the flaky test "), check_title(""), check_title(None)
    ('Fix the flaky test', None, None)
    >>> check_title("a\x1b[31mb")
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: a title is plain text: no control characters
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise InvalidRequest("title must be a string or null")
    if _TITLE_CONTROLS.search(title):
        raise InvalidRequest("a title is plain text: no control characters")
    title = title.strip()
    if len(title) > MAX_TITLE:
        raise InvalidRequest(f"a title has at most {MAX_TITLE} characters, got {len(title)}")
    return title or None


@dataclasses.dataclass
class TerminalModes:
    """What a program set that decides what a key, a paste, the mouse or output does,
    and its title: the one description of "the modes that matter" for every replay.

    Follows raw output (:meth:`feed`, in any pieces that split no sequence), and gives
    back the sequences that set the same state in a terminal after a reset
    (:meth:`sequences`). ``private`` holds the DEC private modes of
    :data:`PRIVATE_MODES` that were set or reset, but the mouse's: ``mouse`` is the
    tracking mode in force and ``mouse_encoding`` its encoding (None: none);
    ``scroll_region`` is 1-based
    ``(top, bottom)``, None for the whole screen; ``cursor_shape`` (block, underline,
    bar) and ``cursor_blink`` are None until a program sets them (xterm.js keeps
    them through a reset, and so does this).

    >>> m = TerminalModes()
    >>> m.feed(b"\\x1b]0;agent\\x07\\x1b[?2004;1004h\\x1b[4h\\x1b[5 q\\x1b[?1000h\\x1b[?1000l")
    >>> m.sequences()
    b'\\x1b[?25h\\x1b[?1004h\\x1b[?2004h\\x1b[4h\\x1b[5 q\\x1b]2;agent\\x07'
    >>> m.feed(b"\\x1bc"); m.sequences(), m.title
    (b'\\x1b[?25h\\x1b[5 q\\x1b]2;agent\\x07', 'agent')
    """

    private: dict[int, bool] = dataclasses.field(default_factory=dict)
    mouse: int | None = None
    mouse_encoding: int | None = None
    insert: bool = False
    keypad: bool = False
    cursor_shape: str | None = None
    cursor_blink: bool | None = None
    scroll_region: tuple[int, int] | None = None
    title: str | None = None

    def feed(self, data: bytes) -> None:
        """Follow ``data``, the program's next output."""
        for m in _SETTERS.finditer(data):
            kind = m.lastgroup
            if kind == "final":
                self._csi(m["private"] == b"?", m["params"], m["final"])
            elif kind == "keypad":
                self.keypad = m["keypad"] == b"="
            elif kind == "title":
                self.title = clean_title(m["title"].decode("utf-8", "replace"))
            elif kind == "reset":  # RIS: as xterm.js (title, cursor look and visibility stay)
                visible = self.private.get(25)
                self.private.clear()
                if visible is not None:
                    self.private[25] = visible
                self.insert = self.keypad = False
                self.scroll_region = self.mouse = self.mouse_encoding = None
            elif kind == "soft_reset":  # DECSTR: as xterm.js does it (mouse modes stay)
                self.insert = self.keypad = False
                self.scroll_region = None
                for mode in (1, 6, 7, 25, 45, 1004, 2004):
                    self.private.pop(mode, None)

    def _csi(self, private: bool, params: bytes, final: bytes) -> None:
        """A mode setting (``h``/``l``), a cursor style (`` q``) or a scroll region
        (``r``); any other is none of ours (``CSI ? r`` restores modes in xterm)."""
        if final in (b"h", b"l"):
            on = final == b"h"
            if not private:
                if b"4" in params.split(b";"):
                    self.insert = on
                return
            for p in params.split(b";"):
                mode = int(p[:5]) if p.isdigit() else 0
                if mode == 66:
                    self.keypad = on
                elif mode == 12:
                    self.cursor_blink = on
                elif mode in MOUSE_MODES:
                    self.mouse = mode if on else None
                elif mode in MOUSE_ENCODINGS:
                    self.mouse_encoding = mode if on else None
                elif mode in PRIVATE_MODES:
                    self.private[mode] = on
        elif private:
            return
        elif final == b" q":
            style = (
                _CURSOR_STYLES.get(int(params[:2] or 0)) if params.isdigit() or not params else None
            )
            if style is not None:
                self.cursor_shape, self.cursor_blink = style
        else:  # r
            top, bottom, *_ = (*params.split(b";"), b"")
            rows = (int(top[:4] or 1), int(bottom[:4] or 0))
            self.scroll_region = rows if rows[1] > rows[0] else None

    def is_on(self, mode: int) -> bool:
        """Whether DEC private ``mode`` is set."""
        if mode in MOUSE_MODES or mode in MOUSE_ENCODINGS:
            return mode in (self.mouse, self.mouse_encoding)
        return self.private.get(mode, _ON_AT_RESET.get(mode, False))

    def sequences(self, buffers: bool = False) -> bytes:
        """What sets this state in a terminal just reset, every mode that differs from
        its default (with ``buffers``, the alternate screen ones first; else none of
        them) and the cursor's visibility (a reset keeps it in xterm.js), then the title.
        The scroll region and origin mode, which move the cursor, are :meth:`layout`'s."""
        modes = [
            m
            for m in PRIVATE_MODES
            if (buffers or m not in BUFFER_MODES) and m not in MOUSE_MODES + MOUSE_ENCODINGS
        ]
        out = [
            b"\x1b[?%d%s" % (m, b"h" if self.is_on(m) else b"l")
            for m in modes
            if m != 6 and (m == 25 or self.is_on(m) != _ON_AT_RESET.get(m, False))
        ]
        out += [b"\x1b[?%dh" % m for m in (self.mouse, self.mouse_encoding) if m is not None]
        out += [b"\x1b[4h"] if self.insert else []
        out += [b"\x1b="] if self.keypad else []
        if self.cursor_shape is not None:
            out.append(b"\x1b[%d q" % _cursor_style(self.cursor_shape, self.cursor_blink))
        elif self.cursor_blink is not None:
            out.append(b"\x1b[?12%s" % (b"h" if self.cursor_blink else b"l"))
        out += [b"\x1b]2;" + self.title.encode() + b"\x07"] if self.title else []
        return b"".join(out)

    def layout(self, cursor: tuple[int, int] | None = None) -> bytes:
        """The scroll region and origin mode, then the cursor at 0-based ``(x, y)`` of
        the screen (addressed within the region when origin mode is on), if given."""
        out = b""
        if self.scroll_region is not None:
            out += b"\x1b[%d;%dr" % self.scroll_region
        if self.is_on(6):
            out += b"\x1b[?6h"
        if cursor is not None:
            x, y = cursor
            top = self.scroll_region[0] - 1 if self.scroll_region and self.is_on(6) else 0
            out += b"\x1b[%d;%dH" % (y - top + 1, x + 1)
        return out
