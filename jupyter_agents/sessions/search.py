"""Search across sessions: their transcripts as text (escapes stripped, overwrites
resolved: :func:`~jupyter_agents.terminal.render.clean_text`) and the agents' own conversation
files of the sessions' recorded ids (or their copies in the conversation archive, so a
conversation the CLI deleted is still found: :mod:`jupyter_agents.agents.archive`).

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
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest, OutOfRange
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.query import Cursor, Finder, Query, format_cursor
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.terminal.render import clean_text, whole_characters
from jupyter_agents.terminal.segments import time_at
from jupyter_agents.terminal.transcripts import MAX_CHUNK, Transcript

#: the most bytes (transcripts and conversation files) one request scans
SCAN_BUDGET = 256 << 20
#: the most characters of a line a hit shows (a window around the match)
CONTEXT = 400


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
            at = clock.parse_or_none(when)
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
    since_ms = None if query.since is None else int(clock.seconds(query.since) * 1000)
    hits: list[Hit] = []
    scanned = 0
    for n, session in enumerate(ordered):
        source, start = ("t", 0) if n or query.cursor is None else query.cursor[1:]
        position: int | None = start
        if source == "t":
            transcript = transcript_of(session.id)
            timeline = transcript.timeline()
            replays = transcript.replays()  # found once, where first printed
            if since_ms is not None and timeline and timeline[-1][1] < since_ms:
                timeline, position = [], None  # nothing written since: skip its transcript
            t0 = timeline[0][1] if timeline else None
            while position is not None and len(hits) < query.limit and scanned < budget:
                found, position, read = scan_transcript(
                    transcript, query, position, query.limit - len(hits), budget - scanned
                )
                scanned += read
                for offset, line, span in found:
                    if any(a <= offset < b for a, b in replays):
                        continue
                    ms = time_at(timeline, offset)
                    if since_ms is not None and (ms is None or ms < since_ms):
                        continue
                    when = None if ms is None else clock.from_epoch(ms / 1000)
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
                        when is None or clock.seconds(when) * 1000 < since_ms
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
        # the CLI's files, or their archived copies when the CLI lost them
        return [f.path for f in service.conversation_files(session)]

    return search(sessions, service.transcript, files, query)
