"""Search across sessions: their transcripts as text (escapes stripped, overwrites
resolved: :func:`~jupyter_agents.render.clean_text`) and the agents' own conversation
files of the sessions' recorded ids.

One request does bounded work: it returns at most ``limit`` hits and scans at most
:data:`SCAN_BUDGET` bytes; when it stops early its page carries a cursor to go on from.
Sessions are searched newest first, each one's transcript from its first kept byte on,
then its conversation files. A line gives at most one hit (its first match). Blocking:
the server runs it in a thread.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from itertools import accumulate
from pathlib import Path
from typing import Any, get_args

from .errors import InvalidRequest, OutOfRange
from .render import ESCAPE, ESCAPES, clean_text, whole_characters
from .sessions import SessionService
from .store import Session, Status
from .transcripts import MAX_CHUNK, Transcript, time_at

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: the most bytes (transcripts and conversation files) one request scans
SCAN_BUDGET = 256 << 20
MAX_PATTERN = 1000
#: the most characters of a line a hit shows (a window around the match)
CONTEXT = 400
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
    ``2h``, ``7d``.

    >>> now = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    >>> parse_since("2h", now).isoformat(), parse_since("2026-11-30T08:00").isoformat()
    ('2026-12-01T10:00:00+00:00', '2026-11-30T08:00:00+00:00')
    """
    m = _DURATION.fullmatch(value)
    if m:
        return (now or datetime.now(timezone.utc)) - timedelta(**{_UNITS[m[2]]: int(m[1])})
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            f"since must be an ISO 8601 time or a duration like 30m, 2h, 7d; got {value[:40]!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _flag(name: str, value: str | None) -> bool:
    if value in (None, "", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise InvalidRequest(f"{name} must be true or false, got {str(value)[:20]!r}")


@dataclasses.dataclass(frozen=True)
class Query:
    """A checked search request (:func:`parse_query`)."""

    pattern: str
    regex: bool = False
    case: bool = False
    session: str | None = None
    kind: str | None = None
    status: str | None = None
    since: datetime | None = None
    limit: int = DEFAULT_LIMIT
    cursor: Cursor | None = None

    def finder(self) -> Finder:
        """Where the pattern matches in a text: a regex (``^``/``$`` at line ends), or
        plain text, case-insensitive unless :attr:`case`.

        >>> list(Query("Error").finder()("error: ERROR"))
        [(0, 5), (7, 12)]
        >>> list(Query("^ok$", regex=True, case=True).finder()("OK\\nok"))
        [(3, 5)]
        """
        flags = 0 if self.case else re.IGNORECASE
        if self.regex or not (self.case or self.pattern.isascii()):
            compiled = re.compile(
                self.pattern if self.regex else re.escape(self.pattern), flags | re.MULTILINE
            )
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
        it (:func:`~jupyter_agents.render.clean_text`), so an overwritten match is
        dropped then; a match the overwrites make, across a ``\\r`` or a backspace,
        is not found here.

        A plain pattern is looked for in the raw bytes (lower-cased: ASCII only, which
        never touches UTF-8 sequences), with escape sequences allowed between its
        characters and a cursor move allowed for a space: the regex engine skips to its
        first character, so this runs at memory speed for a rare word. Other patterns
        run on the text with escapes stripped.

        >>> list(Query("needle").candidates()(b"a\\r\\nne\\x1b[1mEDLE\\r\\nneedle"))
        [3, 15]
        """
        if not self.regex and (self.case or self.pattern.isascii()):
            needle = self.pattern.encode()
            needle = needle if self.case else needle.lower()
            skip = b"(?:" + ESCAPE.encode() + b")*"
            parts = [rb"(?: |\x1b\[[0-9]*C)" if c == 32 else re.escape(bytes([c])) for c in needle]
            pattern = re.compile(skip.join(parts))
            return lambda block: _line_starts(
                block, (m.start() for m in pattern.finditer(block if self.case else block.lower()))
            )
        flags = re.MULTILINE | (0 if self.case else re.IGNORECASE)
        compiled = re.compile(self.pattern if self.regex else re.escape(self.pattern), flags)

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


def _each_line(pattern: re.Pattern[str], hay: str, text: str) -> Iterator[int]:
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


def parse_query(
    args: Mapping[str, str | None], kinds: Collection[str], now: datetime | None = None
) -> Query:
    """A :class:`Query` from request arguments ``q``, ``regex``, ``case``, ``session``,
    ``kind``, ``status``, ``since``, ``limit``, ``cursor``; :class:`InvalidRequest` (400)
    for anything malformed: an empty or overlong pattern, a bad regex, an unknown kind
    or status, a bad time, limit or cursor.

    >>> parse_query({"q": "a(", "kind": "shell", "since": "2h"}, ["shell"]).pattern
    'a('
    >>> parse_query({"q": "a[", "regex": "true"}, ["shell"])
    Traceback (most recent call last):
    ...
    jupyter_agents.errors.InvalidRequest: bad regex: unterminated character set at position 1
    """
    pattern = args.get("q") or ""
    if not pattern or len(pattern) > MAX_PATTERN or "\n" in pattern:
        raise InvalidRequest(f"q must be 1 to {MAX_PATTERN} characters on one line")
    regex = _flag("regex", args.get("regex"))
    if regex:
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidRequest(f"bad regex: {e}") from None
    kind, status = args.get("kind") or None, args.get("status") or None
    if kind is not None and kind not in kinds:
        raise InvalidRequest(f"unknown kind {kind[:40]!r}; known kinds: {', '.join(kinds)}")
    statuses = get_args(Status)
    if status is not None and status not in statuses:
        raise InvalidRequest(f"unknown status {status[:40]!r}; one of {', '.join(statuses)}")
    limit_arg = args.get("limit") or str(DEFAULT_LIMIT)
    if not limit_arg.isdigit() or not 1 <= int(limit_arg) <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be 1 to {MAX_LIMIT}, got {limit_arg[:20]!r}")
    since, cursor = args.get("since"), args.get("cursor")
    return Query(
        pattern,
        regex=regex,
        case=_flag("case", args.get("case")),
        session=args.get("session") or None,
        kind=kind,
        status=status,
        since=parse_since(since, now) if since else None,
        limit=int(limit_arg),
        cursor=parse_cursor(cursor) if cursor else None,
    )


def _context(line: str, start: int, end: int) -> tuple[str, int, int]:
    """At most :data:`CONTEXT` characters of ``line`` around ``[start, end)``."""
    if len(line) <= CONTEXT:
        return line, start, end
    left = max(0, min(start - CONTEXT // 4, len(line) - CONTEXT))
    return line[left : left + CONTEXT], start - left, min(end, left + CONTEXT) - left


@dataclasses.dataclass
class Hit:
    """One matching line: in a transcript (``offset`` of its first byte) or in a
    conversation file (``file``, ``offset`` of its record)."""

    session: Session
    source: str
    offset: int
    line: str
    span: tuple[int, int]
    time: datetime | None = None
    at: float | None = None
    file: str | None = None

    def to_model(self) -> dict[str, Any]:
        s = self.session
        model: dict[str, Any] = {
            "session": s.id,
            "name": s.name,
            "kind": s.kind,
            "status": s.status,
            "source": self.source,
            "offset": self.offset,
            "time": None if self.time is None else self.time.isoformat(timespec="milliseconds"),
            "at": self.at,
            "line": self.line,
            "match": list(self.span),
        }
        if self.file is not None:
            model["file"] = self.file
        return model


@dataclasses.dataclass
class Page:
    hits: list[Hit]
    next: Cursor | None
    scanned: int

    def to_model(self) -> dict[str, Any]:
        return {
            "hits": [h.to_model() for h in self.hits],
            "next": None if self.next is None else format_cursor(self.next),
            "scanned": self.scanned,
        }


def scan_transcript(
    transcript: Transcript, query: Query, start: int, want: int, budget: int
) -> tuple[list[tuple[int, str, tuple[int, int]]], int | None, int]:
    """Up to ``want`` matching lines of ``transcript`` from byte ``start`` (a line start,
    or before its first kept byte), reading at most about ``budget`` bytes:
    ``(hits as (offset, line, span), where to go on or None at its end, bytes read)``.
    Lines are found by :meth:`Query.candidates` and checked as text by
    :meth:`Query.finder`."""
    candidates, find = query.candidates(), query.finder()
    hits: list[tuple[int, str, tuple[int, int]]] = []
    pos, scanned = start, 0
    while scanned < budget:
        pos = max(pos, transcript.start())
        try:
            data, _ = transcript.read(pos, MAX_CHUNK)
        except OutOfRange:  # dropped by the cap just now
            continue
        if not data:
            return hits, None, scanned
        cut = data.rfind(b"\n") + 1
        if cut == 0:  # a line longer than a read, or the last (unfinished) one
            cut = whole_characters(data) if len(data) == MAX_CHUNK else len(data)
        block = data[:cut]
        for line_start in candidates(block):
            line_end = block.find(b"\n", line_start)
            line_end = len(block) if line_end < 0 else line_end + 1
            text = clean_text(block[line_start:line_end].decode("utf-8", errors="replace"))
            text = text.rstrip("\n")
            match = next(find(text), None)
            if match is None:
                continue  # overwritten, or inside an escape sequence
            line, a, b = _context(text, *match)
            hits.append((pos + line_start, line, (a, min(b, len(line)))))
            if len(hits) >= want:
                return hits, pos + line_end, scanned + line_end
        pos += cut
        scanned += cut
    return hits, pos, scanned


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def scan_conversation(
    path: Path, query: Query, find: Finder, start: int, want: int, budget: int
) -> tuple[list[tuple[int, str, tuple[int, int], datetime | None]], int | None, int]:
    """Like :func:`scan_transcript`, over a JSON-lines conversation file: a record
    matches when one of its strings does; the hit shows that string's matching line and
    the record's ``timestamp``."""
    hits: list[tuple[int, str, tuple[int, int], datetime | None]] = []
    # a plain pattern JSON would not escape can be looked for in the raw line first
    quick = None if query.regex or re.search(r'["\\\x00-\x1f]', query.pattern) else find
    scanned = 0
    try:
        f = path.open("rb")
    except OSError:
        return hits, None, 0
    with f:
        f.seek(start)
        pos = start
        while scanned < budget:
            raw = f.readline(MAX_CHUNK)
            if not raw:
                return hits, None, scanned
            offset, pos, scanned = pos, pos + len(raw), scanned + len(raw)
            text = raw.decode("utf-8", errors="replace")
            if quick is not None and next(quick(text), None) is None:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                continue
            hit = _first_match(record, find)
            if hit is None:
                continue
            when = record.get("timestamp") if isinstance(record, dict) else None
            try:
                at = datetime.fromisoformat(when) if isinstance(when, str) else None
            except ValueError:
                at = None
            hits.append((offset, *hit, at))
            if len(hits) >= want:
                return hits, pos, scanned
    return hits, pos, scanned


def _first_match(record: object, find: Finder) -> tuple[str, tuple[int, int]] | None:
    for value in _strings(record):
        for s, e in find(value):
            start = value.rfind("\n", 0, s) + 1
            end = value.find("\n", s)
            line, a, b = _context(
                value[start : len(value) if end < 0 else end], s - start, e - start
            )
            return line, (a, min(b, len(line)))
    return None


def search(
    sessions: list[Session],
    transcript_of: Callable[[str], Transcript],
    files_of: Callable[[Session], list[Path]],
    query: Query,
    budget: int = SCAN_BUDGET,
) -> Page:
    """One page of hits for ``query`` over ``sessions`` (already filtered by session,
    kind and status), newest first (module docstring)."""
    find = query.finder()
    ordered = sorted(sessions, key=lambda s: (s.created, s.id), reverse=True)
    if query.cursor is not None:
        ids = [s.id for s in ordered]
        if query.cursor[0] not in ids:
            raise InvalidRequest("the cursor's session is gone or filtered out; search again")
        ordered = ordered[ids.index(query.cursor[0]) :]
    since_ms = None if query.since is None else int(query.since.timestamp() * 1000)
    hits: list[Hit] = []
    scanned = 0
    for n, session in enumerate(ordered):
        source, start = ("t", 0) if n or query.cursor is None else query.cursor[1:]
        position: int | None = start
        if source == "t":
            transcript = transcript_of(session.id)
            timeline = transcript.timeline()
            if since_ms is not None and timeline and timeline[-1][1] < since_ms:
                timeline, position = [], None  # nothing written since: skip its transcript
            t0 = timeline[0][1] if timeline else None
            while position is not None and len(hits) < query.limit and scanned < budget:
                found, position, read = scan_transcript(
                    transcript, query, position, query.limit - len(hits), budget - scanned
                )
                scanned += read
                for offset, line, span in found:
                    ms = time_at(timeline, offset)
                    if since_ms is not None and (ms is None or ms < since_ms):
                        continue
                    when = None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)
                    at = None if ms is None or t0 is None else (ms - t0) / 1000
                    hits.append(Hit(session, "transcript", offset, line, span, when, at))
            if position is not None:
                return Page(hits, (session.id, "t", position), scanned)
            source, start = "c0", 0
        files = files_of(session)
        for i in range(int(source[1:]), len(files)):
            pos: int | None = start if f"c{i}" == source else 0
            while pos is not None and len(hits) < query.limit and scanned < budget:
                found_c, pos, read = scan_conversation(
                    files[i], query, find, pos, query.limit - len(hits), budget - scanned
                )
                scanned += read
                for offset, line, span, when in found_c:
                    if since_ms is not None and (
                        when is None or when.timestamp() * 1000 < since_ms
                    ):
                        continue
                    hits.append(
                        Hit(session, "conversation", offset, line, span, when, file=str(files[i]))
                    )
            if pos is not None:
                return Page(hits, (session.id, f"c{i}", pos), scanned)
    return Page(hits, None, scanned)


def search_sessions(service: SessionService, query: Query) -> Page:
    """:func:`search` over the sessions of ``service`` that the query's filters select
    (``session`` by id or running terminal name; :class:`NotFound` if unknown)."""
    sessions = service.list() if query.session is None else [service.lookup(query.session)]
    sessions = [
        s
        for s in sessions
        if (query.kind is None or s.kind == query.kind)
        and (query.status is None or s.status == query.status)
    ]

    def files(session: Session) -> list[Path]:
        kind = service.kinds.get(session.kind)
        return [] if kind is None else kind.conversation_files(session)

    return search(sessions, service.transcript, files, query)
