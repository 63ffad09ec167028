"""A search request: its values checked (:meth:`Query.checked`), the cursor of its next
page, and where its pattern matches (:meth:`Query.finder` on rendered text,
:meth:`Query.candidates` on raw transcript bytes). Pure; :mod:`jupyter_agents.sessions.search`
runs it over sessions.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Iterator
from datetime import datetime, timedelta, timezone
from itertools import accumulate
from typing import Any, get_args

import re2

from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Status
from jupyter_agents.terminal.render import ESCAPE, ESCAPES

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_PATTERN = 1000
_DURATION = re.compile(r"([1-9][0-9]{0,5})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

#: where to go on: (session id, source, position); source "t" is the transcript
#: (position: byte offset), "c<n>" its n-th conversation file (position: byte offset)
Cursor = tuple[str, str, int]
#: a finder: the (start, end) spans of matches in a text, in order
Finder = Callable[[str], Iterator[tuple[int, int]]]


def parse_cursor(value: str) -> Cursor:
    """``"<session>:<source>:<offset>"`` (:data:`Cursor`); :class:`InvalidRequest` if not.

    >>> parse_cursor("ab12:t:4096"), parse_cursor("ab12:c0:0")
    (('ab12', 't', 4096), ('ab12', 'c0', 0))
    """
    m = re.fullmatch(r"(\w{1,64}):(t|c[0-9]{1,3}):([0-9]{1,15})", value)
    if m is None:
        raise InvalidRequest(f"invalid cursor {value[:80]!r}; pass the 'next' of a page")
    return m[1], m[2], int(m[3])


def format_cursor(cursor: Cursor) -> str:
    return f"{cursor[0]}:{cursor[1]}:{cursor[2]}"


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (naive means UTC) or a duration before ``now``: ``90s``, ``30m``,
    ``2h``, ``7d`` (one that reaches before the year 1 means since then).

    >>> now = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    >>> parse_since("2h", now).isoformat(), parse_since("2026-11-30T08:00").isoformat()
    ('2026-12-01T10:00:00+00:00', '2026-11-30T08:00:00+00:00')
    >>> parse_since("999999d", now).isoformat()
    '0001-01-01T00:00:00+00:00'
    """
    m = _DURATION.fullmatch(value)
    if m:
        try:
            return (now or clock.now()) - timedelta(**{_UNITS[m[2]]: int(m[1])})
        except OverflowError:
            return datetime.min.replace(tzinfo=timezone.utc)
    try:
        return clock.parse(value)
    except ValueError:
        raise InvalidRequest(
            f"since must be an ISO 8601 time or a duration like 30m, 2h, 7d; got {value[:40]!r}"
        ) from None


#: what a Python regex user must know of RE2
_RE2_LIMITS = "no backreferences or lookaround"


def compile_regex(pattern: str, case: bool = True) -> Any:
    r"""A user's regex, compiled by RE2: linear in the text it runs over, whatever the
    pattern (Python's ``re`` backtracks exponentially on ``^(\w|\w)*$`` and holds the
    GIL meanwhile), and RE2 lets other threads run while it matches. ``^``/``$`` match
    at line ends. :class:`InvalidRequest` for what RE2 refuses: a syntax error, a
    backreference or lookaround, a pattern too big to compile.

    >>> [m.span() for m in compile_regex("^o+k$", case=False).finditer("ok\nOOK")]
    [(0, 2), (3, 6)]
    >>> compile_regex(r"(a)\1")  # doctest: +ELLIPSIS +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    InvalidRequest: bad regex (RE2 syntax: ...): invalid escape sequence: \1
    """
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = case
    try:
        return re2.compile("(?m)" + pattern, options)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else e
        raise InvalidRequest(f"bad regex (RE2 syntax: {_RE2_LIMITS}): {why}") from None


@dataclasses.dataclass(frozen=True)
class Query:
    """A search request; :meth:`checked` builds one from typed values (the CLI, the magics
    and the server's handler, which parses HTTP arguments first, alike)."""

    pattern: str
    regex: bool = False
    case: bool = False
    session: str | None = None
    kind: str | None = None
    status: str | None = None
    since: datetime | None = None
    limit: int = DEFAULT_LIMIT
    cursor: Cursor | None = None

    @classmethod
    def checked(
        cls,
        pattern: str,
        kinds: Collection[str],
        *,
        regex: bool = False,
        case: bool = False,
        session: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: Cursor | None = None,
    ) -> Query:
        """A query, once its values hold; :class:`InvalidRequest` (400) naming the one that
        does not: an empty or overlong pattern, or one of several lines; a regex RE2
        refuses; a kind not in ``kinds``; an unknown status; a limit outside 1 to
        :data:`MAX_LIMIT`. Empty ``session``, ``kind`` and ``status`` mean none.

        >>> Query.checked("a(", ["shell"], kind="shell").pattern
        'a('
        >>> Query.checked("a[", ["shell"], regex=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        jupyter_agents.core.errors.InvalidRequest: bad regex (RE2 syntax: ...): missing ]: [
        >>> Query.checked("x", ["shell"], limit=0)
        Traceback (most recent call last):
        ...
        jupyter_agents.core.errors.InvalidRequest: limit must be from 1 to 500, got 0
        """
        if not pattern or len(pattern) > MAX_PATTERN or "\n" in pattern:
            raise InvalidRequest(f"q must be 1 to {MAX_PATTERN} characters on one line")
        if regex:
            compile_regex(pattern)
        if kind and kind not in kinds:
            raise InvalidRequest(f"unknown kind {kind[:40]!r}; known kinds: {', '.join(kinds)}")
        statuses = get_args(Status)
        if status and status not in statuses:
            raise InvalidRequest(f"unknown status {status[:40]!r}; one of {', '.join(statuses)}")
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit must be from 1 to {MAX_LIMIT}, got {limit}")
        return cls(
            pattern,
            regex=regex,
            case=case,
            session=session or None,
            kind=kind or None,
            status=status or None,
            since=since,
            limit=limit,
            cursor=cursor,
        )

    def finder(self) -> Finder:
        """Where the pattern matches in a text: a regex (``^``/``$`` at line ends), or
        plain text, case-insensitive unless :attr:`case`.

        >>> list(Query("Error").finder()("error: ERROR"))
        [(0, 5), (7, 12)]
        >>> list(Query("^ok$", regex=True, case=True).finder()("OK\\nok"))
        [(3, 5)]
        """
        if self.regex or not (self.case or self.pattern.isascii()):
            compiled = self._compiled()
            return lambda text: (m.span() for m in compiled.finditer(text))
        needle = self.pattern if self.case else self.pattern.lower()

        def find(text: str) -> Iterator[tuple[int, int]]:
            hay = text if self.case else text.lower()
            if len(hay) != len(text):  # a character whose lower case is longer
                yield from Query(self.pattern, regex=False, case=False).finder()(text)
                return
            i = hay.find(needle)
            while i >= 0:
                yield i, i + len(needle)
                i = hay.find(needle, i + len(needle))

        return find

    def candidates(self) -> Callable[[bytes], Iterator[int]]:
        """Where lines that may match start in a block of raw output (whole lines), in
        order, each once. A line found here is checked on its text as a terminal shows
        it (:func:`~jupyter_agents.terminal.render.clean_text`), so an overwritten match is
        dropped then; a match the overwrites make, across a ``\\r`` or a backspace,
        is not found here.

        A plain pattern is looked for in the raw bytes (lower-cased: ASCII only, which
        never touches UTF-8 sequences, with the four other letters Python's case-blind
        matching takes for ``i``, ``k`` and ``s``), with escape sequences allowed between
        its characters and a cursor move allowed for a space: the regex engine skips to
        its first character, so this runs at memory speed for a rare word. So does a
        regex that starts with such text (:func:`literal_prefix`), whose candidates are
        the lines holding that text. Other patterns run on the text with escapes
        stripped.

        >>> list(Query("needle").candidates()(b"a\\r\\nne\\x1b[1mEDLE\\r\\nneedle"))
        [3, 15]
        >>> list(Query("ne+dle$", regex=True).candidates()(b"a\\r\\nnedle\\r\\nneeeedle"))
        [3, 10]
        """
        text = self.pattern if not self.regex else literal_prefix(self.pattern)
        if text and (self.case or text.isascii()):
            needle = text.encode() if self.case else text.lower().encode()
            skip = b"(?:" + ESCAPE.encode() + b")*"
            parts = [_CHARACTERS.get(c, re.escape(bytes([c]))) for c in needle]
            if not self.case:
                parts = [_CASE_BLIND.get(c, p) for c, p in zip(needle, parts, strict=True)]
            pattern = re.compile(skip.join(parts))
            return lambda block: _line_starts(
                block, (m.start() for m in pattern.finditer(block if self.case else block.lower()))
            )
        compiled = self._compiled()

        def in_text(block: bytes) -> Iterator[int]:
            text = block.decode("utf-8", errors="replace")
            text = ESCAPES.sub("", text) if "\x1b" in text else text
            # each \r-pass of a line is a line of its own to the pattern (and \r\n two
            # line ends); as long as the text, so positions are the same in both
            passes = text.replace("\r", "\n") if "\r" in text else text
            starts: list[int] = []
            line, at = 0, 0
            for m in _each_line(compiled, passes, text):
                line += text.count("\n", at, m)
                at = m
                if not starts:  # byte offsets of the block's line starts, once
                    lengths = accumulate(map(len, block.split(b"\n")), initial=0)
                    starts = [n + i for i, n in enumerate(lengths)]
                yield starts[line]

        return in_text

    def _compiled(self) -> Any:
        """The pattern compiled: a user's regex by RE2 (:func:`compile_regex`), plain text
        (escaped, so it cannot backtrack) by ``re`` with Python's case-blind matching."""
        if self.regex:
            return compile_regex(self.pattern, self.case)
        return re.compile(re.escape(self.pattern), re.MULTILINE | (0 if self.case else re.I))


#: what a character of a plain pattern may be in raw output: a space, a cursor move
_CHARACTERS = {32: rb"(?: |\x1b\[[0-9]*C)"}
#: the non-ASCII letters a case-blind Python regex matches for ASCII ones (in UTF-8)
_CASE_BLIND = {
    ord("i"): rb"(?:i|\xc4[\xb0\xb1])",
    ord("k"): rb"(?:k|\xe2\x84\xaa)",
    ord("s"): rb"(?:s|\xc5\xbf)",
}
#: the characters a regex reads as themselves
_LITERAL = re.compile(r"[^.^$*+?{}\[\]\\|()]*")


def literal_prefix(pattern: str) -> str | None:
    """The text every match of the regex ``pattern`` starts with (after a leading
    ``^``), if that is 3 characters or more; None for a pattern with any ``|`` (whose
    matches need not start alike), or that starts with a group, a class or an escape.

    >>> literal_prefix(r"^xyzzy-ne+dle \\d+$"), literal_prefix("abcd?e"), literal_prefix("ab|cd")
    ('xyzzy-ne', 'abc', None)
    """
    if "|" in pattern:
        return None
    body = pattern.removeprefix("^")
    match = _LITERAL.match(body)
    prefix = match[0] if match else ""
    if body[len(prefix) : len(prefix) + 1] in ("?", "*", "{"):
        prefix = prefix[:-1]  # its last character may not be there
    return prefix if len(prefix) >= 3 else None


def _each_line(pattern: Any, hay: str, text: str) -> Iterator[int]:
    """Where the first match in ``hay`` of each line of ``text`` (as long, with the same
    line ends and maybe more) that has one starts."""
    pos = 0
    while m := pattern.search(hay, pos):
        yield m.start()
        end = text.find("\n", m.start())
        if end < 0:
            return
        pos = end + 1


def _line_starts(block: bytes, matches: Iterator[int]) -> Iterator[int]:
    """The starts of the lines of ``block`` holding ``matches`` (ascending), each once."""
    done = -1
    for m in matches:
        if m <= done:
            continue
        yield block.rfind(b"\n", 0, m) + 1
        done = block.find(b"\n", m)
        if done < 0:
            return
