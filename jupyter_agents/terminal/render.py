r"""Raw terminal output (a transcript) as people read it: plain text lines, HTML with
colours, and asciicast v2 with the transcript's timing. The renderers are pure and
streaming: they take chunks of bytes and give chunks back, never a whole transcript at
once; :func:`export` feeds them a transcript as it reads it.

Lines are rendered the way a terminal draws a line: ``\r`` goes back to its start and
what follows overwrites, ``\b`` steps back, tabs go to the next multiple of 8, ``ESC[K``
erases, ``ESC[nC``/``D``/``G`` move; every other escape sequence and control character
is dropped (cursor movement between lines cannot be replayed as lines: full-screen
programs render as the text they wrote, in order). ``\r\n`` and ``\n`` end lines.

Bounded: a move or a tab never takes the cursor past :data:`MAX_COLUMNS` or the end of
what the line wrote, whichever is further, so a line renders to at most that many cells
more than its own length (``ESC[200000000C`` is one of 11 bytes).

A fast path keeps the cost of plain output near that of ``bytes.decode``: only lines
holding ``\r``, ``\b`` or a cursor move go through the cell renderer.
"""

from __future__ import annotations

import bisect
import codecs
import html
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, cast

from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session
from jupyter_agents.terminal.segments import time_at
from jupyter_agents.terminal.transcripts import Transcript
from jupyter_agents.terminal.vt import ClipboardFilter

#: the column a cursor move or tab can reach past a line's text (a terminal never has
#: more; xterm.js caps its columns at 1000 too)
MAX_COLUMNS = 1000

#: export formats: their media type and file extension
FORMATS = {
    "txt": ("text/plain; charset=utf-8", "txt"),
    "html": ("text/html; charset=utf-8", "html"),
    "cast": ("application/x-asciicast", "cast"),
}

#: an escape sequence: CSI, OSC (ended by BEL or ST), DCS/PM/APC/SOS, a two-byte or
#: charset escape, or a lone ESC (one literal first: the regex engine skips to it fast).
#: None spans a line end, so stripping escapes keeps the lines where they were.
ESCAPE = (
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"
    r"|[P^_X][^\x1b\n]*(?:\x1b\\)?|[ -/]*[0-~])?"
)
#: control characters a line renders as nothing (all but \b \t \n \r and ESC)
_CONTROL = r"[\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]"
ESCAPES = re.compile(ESCAPE)
_CONTROLS = re.compile(_CONTROL)
_TOKEN = re.compile(f"({ESCAPE}|{_CONTROL}|[\r\b\t])")
#: the escapes that move within a line or erase (the cell renderer draws them)
_MOVES = re.compile(r"\x1b\[[0-9;]*[CDGKPX]")
#: what makes a line need the cell renderer
_OVERWRITES = re.compile(r"[\r\b]|\x1b\[[0-9;]*[CDGKPX]")
_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)

#: a cell's look: (foreground, background, bold, italic, underline, inverse); colours
#: are CSS colours or None (the default)
Style = tuple[str | None, str | None, bool, bool, bool, bool]
PLAIN: Style = (None, None, False, False, False, False)
#: the 16 colours of xterm's default palette
_BASE16 = [
    *("#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5"),
    *("#7f7f7f", "#ff0000", "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff"),
]


#: SGR codes that set or clear an attribute: code -> (index in a Style, value)
_ATTRIBUTES = {1: (2, True), 3: (3, True), 4: (4, True), 7: (5, True)} | {
    22: (2, False),
    23: (3, False),
    24: (4, False),
    27: (5, False),
}


def palette(n: int) -> str:
    """The CSS colour of xterm's 256-colour palette entry ``n``.

    >>> palette(1), palette(196), palette(244)
    ('#cd0000', '#ff0000', '#808080')
    """
    if n < 16:
        return _BASE16[n]
    if n < 232:
        r, g, b = (n - 16) // 36, (n - 16) // 6 % 6, (n - 16) % 6
        level = [0, 95, 135, 175, 215, 255]
        return f"#{level[r]:02x}{level[g]:02x}{level[b]:02x}"
    gray = 8 + 10 * (n - 232)
    return f"#{gray:02x}{gray:02x}{gray:02x}"


def _color(params: list[int], i: int) -> tuple[str | None, int]:
    """The colour of ``38;5;n`` / ``38;2;r;g;b`` at ``params[i]`` (the ``5`` or ``2``) and
    the index after it."""
    if i < len(params) and params[i] == 5 and i + 1 < len(params):
        return palette(params[i + 1] % 256), i + 2
    if i < len(params) and params[i] == 2 and i + 3 < len(params):
        r, g, b = (min(255, v) for v in params[i + 1 : i + 4])
        return f"#{r:02x}{g:02x}{b:02x}", i + 4
    return None, len(params)


def sgr(style: Style, params: str) -> Style:
    """``style`` after ``ESC[<params>m`` (select graphic rendition).

    >>> sgr(PLAIN, "1;31")
    ('#cd0000', None, True, False, False, False)
    >>> sgr(sgr(PLAIN, "38;5;196;48;2;0;0;255"), "39")
    (None, '#0000ff', False, False, False, False)
    """
    cells: list[Any] = list(style)
    codes = [_number(p, 0) for p in params.replace(":", ";").split(";")]
    i = 0
    while i < len(codes):
        c = codes[i]
        i += 1
        if c == 0:
            cells = list(PLAIN)
        elif c in _ATTRIBUTES:
            cells[_ATTRIBUTES[c][0]] = _ATTRIBUTES[c][1]
        elif 30 <= c <= 37 or 90 <= c <= 97:
            cells[0] = _BASE16[c - 30 if c < 90 else c - 82]
        elif 40 <= c <= 47 or 100 <= c <= 107:
            cells[1] = _BASE16[c - 40 if c < 100 else c - 92]
        elif c in (38, 48):
            cells[c == 48], i = _color(codes, i)
        elif c in (39, 49):
            cells[c == 49] = None
    return cast(Style, tuple(cells))


def _number(param: str, default: int) -> int:
    """A parameter of an escape sequence (ASCII digits; ``default`` if none), at most
    999,999,999: a longer one is that (``int`` refuses strings of over 4300 digits)."""
    if not (param.isascii() and param.isdigit()):
        return default
    return int(param) if len(param) < 10 else 999_999_999


def _count(params: str, default: int) -> int:
    return _number(params, 0) or default


def render_cells(
    line: str, style: Style = PLAIN, styled: bool = True
) -> tuple[list[str], list[Style], Style]:
    r"""One line of output (no ``\n``) drawn into cells: ``(characters, their styles,
    the style after the line)``; ``style`` is the style the line starts with. Without
    ``styled``, colours are not followed (every style is ``style``; faster).

    >>> "".join(render_cells("downloading 10%\r\x1b[Kdone\tok")[0])
    'done    ok'
    >>> "".join(render_cells("abc\b\bX\x1b[3GY")[0])
    'aXY'
    >>> len(render_cells("x\x1b[200000000Cy\t\x1b[999999999999G")[0])
    1001
    """
    chars: list[str] = []
    styles: list[Style] = []
    col = 0
    for i, part in enumerate(_TOKEN.split(line)):
        if i % 2 == 0:
            if part:
                if col > len(chars):
                    styles.extend([PLAIN] * (col - len(chars)))
                    chars.extend(" " * (col - len(chars)))
                chars[col : col + len(part)] = part
                styles[col : col + len(part)] = [style] * len(part)
                col += len(part)
        elif part == "\r":
            col = 0
        elif part == "\b":
            col = max(0, col - 1)
        elif part == "\t":
            col = min((col // 8 + 1) * 8, max(MAX_COLUMNS, len(chars)))
        elif part.startswith("\x1b[") and len(part) > 2:
            params, final = part[2:-1], part[-1]
            if final == "m":
                style = sgr(style, params) if styled else style
            elif final == "K":
                mode = _count(params, 0)
                if mode == 0:
                    del chars[col:], styles[col:]
                elif mode == 1:
                    chars[: col + 1] = " " * min(col + 1, len(chars))
                else:
                    chars, styles = [], []
            elif final == "C":
                col = min(col + _count(params, 1), max(MAX_COLUMNS, len(chars)))
            elif final == "D":
                col = max(0, col - _count(params, 1))
            elif final == "G":
                col = min(_count(params, 1), max(MAX_COLUMNS, len(chars))) - 1
            elif final == "X":
                n = min(_count(params, 1), max(0, len(chars) - col))
                chars[col : col + n] = " " * n
            elif final == "P":
                del chars[col : col + _count(params, 1)], styles[col : col + _count(params, 1)]
    return chars, styles, style


def clean_text(text: str, colours: bool = False) -> str:
    r"""Complete lines of output as plain text, line for line: escapes stripped,
    overwrites resolved (each input line gives exactly one output line, so line numbers
    map back to the raw output). Trailing blanks are kept where no overwrite happened.
    ``colours``: keep colour escapes (SGR) outside lines with overwrites, for a display
    that renders them (a notebook's output).

    >>> clean_text("\x1b[1mbold\x1b[0m\r\n10%\r50%\r100%\r\n\x1b]0;title\x07x\n")
    'bold\n100%\nx\n'
    >>> clean_text("\x1b[?2004hhi \x1b[1mthere\x1b[0m\r\n\x1b[2Kok", colours=True)
    'hi \x1b[1mthere\x1b[0m\nok'
    """
    text = text.replace("\r\n", "\n")
    if "\r" in text or "\b" in text or ("\x1b[" in text and _MOVES.search(text)):
        out: list[str] = []
        pos = 0
        while m := _OVERWRITES.search(text, pos):
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            end = len(text) if end < 0 else end
            out.append(text[pos:start])
            out.append("".join(render_cells(text[start:end], styled=False)[0]).rstrip())
            pos = end
        out.append(text[pos:])
        text = "".join(out)
    if "\x1b" in text:
        text = ESCAPES.sub(_keep_colours if colours else "", text)
    return _CONTROLS.sub("", text) if _CONTROLS.search(text) else text


def _keep_colours(m: re.Match[str]) -> str:
    return m[0] if m[0].startswith("\x1b[") and m[0].endswith("m") else ""


def plain_text(data: bytes) -> str:
    """Raw output as text for a notebook (:func:`clean_text` with colours kept)."""
    return clean_text(data.decode("utf-8", errors="replace"), colours=True)


def line_blocks(chunks: Iterable[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Raw output regrouped into blocks that end at a line end (``\\n``), so that no
    block splits a line or a UTF-8 character; the last block holds what follows the
    last line end. A line longer than ``size`` is cut (at a character boundary)."""
    carry = b""
    for chunk in chunks:
        carry += chunk
        cut = carry.rfind(b"\n") + 1
        if cut == 0 and len(carry) >= size:
            cut = whole_characters(carry)
        if cut:
            yield carry[:cut]
            carry = carry[cut:]
    if carry:
        yield carry


def whole_characters(data: bytes) -> int:
    """How many leading bytes of ``data`` end with a whole UTF-8 character (all of
    them when it does not end in a valid character's first bytes).

    >>> whole_characters("aé".encode()), whole_characters("aé".encode()[:2])
    (3, 1)
    """
    j = len(data) - 1
    while j > 0 and data[j] & 0xC0 == 0x80:
        j -= 1
    lead = data[j] if data else 0
    need = 2 if 0xC0 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if lead >= 0xF0 else 1
    return j if j > 0 and len(data) - j < need else len(data)


def text_export(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Raw output as the text a terminal shows, line by line (UTF-8; tabs expanded,
    trailing blanks dropped, ``\\n`` line ends)."""
    for block in line_blocks(chunks):
        text = clean_text(block.decode("utf-8", errors="replace"))
        yield _TRAILING.sub("", text.expandtabs()).encode()


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ margin: 0; background: #1e1e1e; color: #d4d4d4; }}
pre {{ margin: 0; padding: 1em; font: 13px/1.3 monospace; white-space: pre-wrap; }}
</style></head>
<body><pre>"""


def _css(style: Style) -> str:
    fg, bg, bold, italic, underline, inverse = style
    if inverse:
        fg, bg = bg or "#1e1e1e", fg or "#d4d4d4"
    parts = [f"color:{fg}" if fg else "", f"background:{bg}" if bg else ""]
    parts += ["font-weight:bold" if bold else "", "font-style:italic" if italic else ""]
    parts.append("text-decoration:underline" if underline else "")
    return ";".join(p for p in parts if p)


def html_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    r"""Raw output as HTML text to put in a ``<pre>``: the lines :func:`text_export`
    gives, in ``<span>``\ s with their colours and bold/italic/underline."""
    style = PLAIN
    for block in line_blocks(chunks):
        text = block.decode("utf-8", errors="replace").replace("\r\n", "\n")
        out: list[str] = []
        for n, line in enumerate(text.split("\n")):
            if n:
                out.append("\n")
            chars, styles, style = render_cells(line, style)
            while chars and chars[-1] == " " and styles[-1] == PLAIN:
                chars.pop()
                styles.pop()
            start = 0
            for i in range(1, len(chars) + 1):
                if i == len(chars) or styles[i] != styles[start]:
                    run = html.escape("".join(chars[start:i]))
                    css = _css(styles[start])
                    out.append(f'<span style="{css}">{run}</span>' if css else run)
                    start = i
        yield "".join(out)


def html_export(chunks: Iterable[bytes], title: str) -> Iterator[bytes]:
    """Raw output as a self-contained HTML page (no scripts, no external resources) of
    :func:`html_lines`."""
    yield _PAGE.format(title=html.escape(title)).encode()
    for text in html_lines(chunks):
        yield text.encode()
    yield b"</pre></body></html>\n"


def cast_export(
    chunks: Iterable[tuple[int, bytes]],
    timeline: list[tuple[int, int]],
    width: int,
    height: int,
    title: str,
) -> Iterator[bytes]:
    """Raw output, ``(offset, bytes)`` chunks in order, as an asciicast v2 file: a header
    line, then one ``[seconds, "o", text]`` event per stretch of output between timing
    index entries (:meth:`~jupyter_agents.terminal.transcripts.Transcript.timeline`), times from
    the first entry and never decreasing. Without an index, all output is at 0. A UTF-8
    character split between stretches goes with the later one. Clipboard writes (OSC 52)
    are left out: a player must not copy again what a program copied once."""
    t0 = timeline[0][1] if timeline else 0
    header = {"version": 2, "width": width, "height": height, "timestamp": t0 // 1000}
    yield json.dumps({**header, "title": title}).encode() + b"\n"
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    quiet = ClipboardFilter()
    last = 0.0
    marks = [o for o, _ in timeline]
    for offset, data in chunks:
        pos = 0
        while pos < len(data):
            here = offset + pos
            i = bisect.bisect_right(marks, here)
            end = len(data) if i == len(marks) else min(len(data), marks[i] - offset)
            ms = time_at(timeline, here)
            last = max(last, 0.0 if ms is None else (ms - t0) / 1000)
            text = quiet.feed(decoder.decode(data[pos:end]))
            if text:
                yield json.dumps([round(last, 3), "o", text], ensure_ascii=False).encode() + b"\n"
            pos = end
    rest = quiet.feed(decoder.decode(b"", final=True)) + quiet.end()
    if rest:
        yield json.dumps([round(last, 3), "o", rest], ensure_ascii=False).encode() + b"\n"


def skipping(
    chunks: Iterable[tuple[int, bytes]], ranges: list[tuple[int, int]]
) -> Iterator[tuple[int, bytes]]:
    """``(offset, bytes)`` chunks without the bytes in ``ranges`` (``[start, end)``,
    ascending, not overlapping).

    >>> list(skipping([(0, b"abcdef"), (6, b"ghij")], [(2, 4), (5, 7)]))
    [(0, b'ab'), (4, b'e'), (7, b'hij')]
    """
    for offset, data in chunks:
        pos = offset
        end = offset + len(data)
        for a, b in ranges:
            if b <= pos or a >= end:
                continue
            if a > pos:
                yield pos, data[pos - offset : a - offset]
            pos = max(pos, b)
        if pos < end:
            yield pos, data[pos - offset :]


def export(session: Session, transcript: Transcript, fmt: str) -> Iterator[bytes]:
    """``session``'s transcript in format ``fmt`` (:data:`FORMATS`; else
    :class:`InvalidRequest`) as it is now, streamed: :func:`text_export`,
    :func:`html_export` or :func:`cast_export` (sized as the session's terminal). The
    text and HTML leave out what a restore printed again (its original is there); the
    cast keeps it: it plays the terminal as it was."""
    if fmt not in FORMATS:
        raise InvalidRequest(f"unknown format {fmt[:20]!r}; one of {', '.join(FORMATS)}")
    title = f"{session.name or session.id} ({session.kind})"
    chunks = transcript.chunks()
    if fmt == "txt":
        return text_export(data for _, data in skipping(chunks, transcript.replays()))
    if fmt == "html":
        return html_export((data for _, data in skipping(chunks, transcript.replays())), title)
    size = (session.cols or 80, session.rows or 24)
    return cast_export(chunks, transcript.timeline(), *size, title)


def export_name(session: Session, fmt: str) -> str:
    """The file name an export of ``session`` is saved as.

    >>> export_name(Session("a1", "3", "exited", "tmux"), "cast")
    'shell-3-a1.cast'
    """
    return f"{session.kind}-{session.name or 'session'}-{session.id}.{FORMATS[fmt][1]}"
