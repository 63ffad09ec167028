"""An agent session's turns as events (:mod:`jupyter_agents.agents.turns`), a page at a
time from a position, for a view that follows the session live and resumes where it
was after a reconnect or a restart.

The events come in conversation order. That is the file's order, except where a kind
chains its records (:meth:`~jupyter_agents.agents.base.AgentKind.links`: Claude Code's
``parentUuid``) and a record's parent stands after it: Claude Code queues its writes,
and under load a prompt's records can land after the answer that names them as its
parent (the file is still only appended to). Such a record comes right after its parent
(:class:`_Run` has the rule; it looks :data:`REORDER` bytes around a record, no more).

A position is ``<file>:<offset>:<done>:<check>``: the ``file``-th of the session's
conversation files (:meth:`~jupyter_agents.sessions.service.SessionService.conversation_files`,
oldest first), the byte ``offset`` of a record in it before which every record was read,
how many events were read from there on (that record's, or, where records came out of
the file's order, those of the records up to the one they waited for), and a checksum
of the :data:`CHECKED` bytes before the offset (and of where the records of those
events stand, when they are not all the record at the offset). Each event's ``id`` is
the position right after it, so a reader that passes the last id it has (``after``)
gets what follows, with no event twice and none missed; a page's ``next`` is where the
following page starts (past records that made no event too). A record the CLI has not
finished writing (no newline yet) is left for the next read.

A position whose reading changed is stale: a CLI rewrote its file rather than append to
it, or the parent of a record read before the position was written after it (the reader
showed the answer before its prompt was in the file). The page then starts over from
the file's start with ``reset`` true, and the reader draws the conversation again from
it, now in order.

Bounded: a page holds at most ``limit`` events and reads at most :data:`PAGE_BYTES`
bytes, and beyond that only the rest of a run of records that wait (at most
:data:`REORDER` bytes on) and the 2 x :data:`REORDER` bytes before the position; a
record longer than :data:`MAX_RECORD` is one ``other`` event, not parsed. Blocking.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from jupyter_agents.acp import journal_folder
from jupyter_agents.acp.journal import journal_files
from jupyter_agents.acp.turns import AcpTurns
from jupyter_agents.agents.archive import ConversationFile
from jupyter_agents.agents.base import AgentKind
from jupyter_agents.agents.turns import other
from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService

#: the most events a page holds, and its default
MAX_EVENTS = 1000
DEFAULT_EVENTS = 200
#: the most bytes of conversation files one page reads (a page ends after the record
#: that crosses it)
PAGE_BYTES = 4 << 20
#: the longest record parsed; a longer one is an ``other`` event saying its size
MAX_RECORD = 16 << 20

#: how many bytes before a position its checksum covers
CHECKED = 256
#: how far after a record (start to start) its parent may stand in its file and still
#: come before it in the turns (Claude Code flushes its queued writes every 100 ms: a
#: prompt's records can follow the answer's within one flush)
REORDER = 256 << 10

_POSITION = re.compile(r"([0-9]{1,4}):([0-9]{1,15}):([0-9]{1,6}):([0-9a-f]{8})")


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a read goes on: file, offset, events of that record read, and the checksum
    of the bytes before the offset (:func:`check`)."""

    file: int = 0
    offset: int = 0
    done: int = 0
    check: str = "00000000"

    def __str__(self) -> str:
        return f"{self.file}:{self.offset}:{self.done}:{self.check}"


#: the start of a session's turns
START = Position()


def parse_position(value: str) -> Position:
    """``"<file>:<offset>:<done>:<check>"``; :class:`InvalidRequest` if it is not one.

    >>> parse_position("0:4096:2:0a1b2c3d")
    Position(file=0, offset=4096, done=2, check='0a1b2c3d')
    """
    m = _POSITION.fullmatch(value)
    if m is None:
        raise InvalidRequest(
            f"invalid position {value[:80]!r}; pass an event's id or a page's next"
        )
    return Position(int(m[1]), int(m[2]), int(m[3]), m[4])


def check(before: bytes) -> str:
    """The checksum of the (up to :data:`CHECKED`) bytes before a position.

    >>> check(b""), check(b"x" * 300) == check(b"x" * 256)
    ('00000000', True)
    """
    return f"{zlib.crc32(before[-CHECKED:]):08x}"


@dataclasses.dataclass
class TurnPage:
    """Events in order, each with its ``id``, and where the next page starts."""

    events: list[dict[str, Any]]
    next: Position
    #: whether the files hold more than this page (read again at once, not on a change)
    more: bool = False
    #: the position asked for was stale (a file rewritten): these events start over
    reset: bool = False
    #: when the session's terminal recording starts (ISO 8601), the 0 s of its replay:
    #: an event's place in the replay is its ``at`` minus this; None with no recording
    replay_start: str | None = None

    def to_model(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "next": str(self.next),
            "more": self.more,
            "reset": self.reset,
            "replay_start": self.replay_start,
        }


def check_kind(session: Session, kinds: dict[str, AgentKind]) -> AgentKind:
    """The kind of ``session`` if its CLI keeps conversation files;
    :class:`InvalidRequest` for a shell or a kind that keeps none."""
    kind = kinds.get(session.kind)
    if kind is None or not kind.keeps_conversations:
        keeping = ", ".join(name for name, k in kinds.items() if k.keeps_conversations)
        raise InvalidRequest(
            f"session {session.id} is a {session.kind} session; only agents that keep "
            f"conversation files ({keeping}) have turns"
        )
    return kind


class Turning(Protocol):
    """What maps a record to turn events, and names its place in a chain of records:
    an agent kind (:class:`~jupyter_agents.agents.base.AgentKind`), or an ACP
    journal's reader."""

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]: ...

    def links(self, record: Mapping[str, Any]) -> tuple[str | None, str | None]: ...


#: the turns of ACP sessions' journals
ACP_TURNS = AcpTurns()


def read_turns(
    kind: Turning,
    files: list[ConversationFile],
    after: Position = START,
    limit: int = DEFAULT_EVENTS,
) -> TurnPage:
    """The events of ``files`` from ``after`` (:class:`TurnPage`), at most ``limit``, in
    conversation order (:class:`_Run`). A record with no newline yet ends the page when
    it is in the newest file (its CLI may be writing it); in an older file it is one
    ``other`` event (cut short)."""
    if not 1 <= limit <= MAX_EVENTS:
        raise InvalidRequest(f"limit must be from 1 to {MAX_EVENTS}, got {limit}")
    page = _Page(limit)
    index, offset, skip = after.file, after.offset, after.done
    wanted: str | None = after.check
    while index < len(files):
        newest = index == len(files) - 1
        try:
            end = _read_file(kind, files[index].path, index, offset, skip, wanted, newest, page)
        except _Full:
            return page.turn_page(page.last, more=True)
        if end is not None and (end.more or newest):
            return page.turn_page(end.position, more=end.more)
        if newest:
            break
        index, offset, skip, wanted = index + 1, 0, 0, None
    return page.turn_page(Position(index, offset, skip, check(b"")))


def _read_file(
    kind: Turning,
    path: Any,
    index: int,
    offset: int,
    skip: int,
    wanted: str | None,
    newest: bool,
    page: _Page,
) -> _End | None:
    """File ``index`` read into ``page`` from a position (``wanted``: its check; None:
    from the file's start, unchecked); None when it cannot be opened."""
    try:
        f = path.open("rb")
    except OSError:
        return None
    with f:
        while True:
            try:
                return _Run(kind, f, index, offset, skip, wanted, page).read(newest)
            except _Stale:  # rewritten, or reordered since: the file over, from its start
                page.events.clear()  # (only the first file read is checked: all its own)
                page.budget, page.reset = PAGE_BYTES, True
                offset, skip, wanted = 0, 0, None


class _Stale(Exception):
    """The position asked for no longer says what was read: the file was rewritten, or
    a record read before it has its parent after it now."""


class _Full(Exception):
    """The page holds its ``limit`` events."""


@dataclasses.dataclass
class _Page:
    limit: int
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    budget: int = PAGE_BYTES
    reset: bool = False
    #: the id of the page's last event
    last: Position = START

    def turn_page(self, position: Position, more: bool = False) -> TurnPage:
        return TurnPage(self.events, position, more=more, reset=self.reset)


@dataclasses.dataclass
class _End:
    position: Position
    more: bool


@dataclasses.dataclass(eq=False)
class _Record:
    offset: int
    events: list[dict[str, Any]]
    uuid: str | None
    parent: str | None
    #: whether it waits for its parent (which stands after it in the file)
    waited: bool = False


class _Run:
    """One file read for one page from ``start``, a cut: every record before it comes
    before every record from it on.

    The records come in the file's order, but a record whose parent
    (:meth:`~jupyter_agents.agents.base.AgentKind.links`) stands after it waits for it,
    and comes right after it with its own children: Claude Code's queued writes can put
    a prompt's records after the answer's. A record waits when no record in the
    :data:`REORDER` bytes before it has its parent's id, and a whole record starting
    less than :data:`REORDER` bytes after it has; its children wait with it. That asks
    only for bytes near the record, so a read from any cut orders the records after it
    as a read from the file's start does.

    A position is a cut and how many events from it were read (``done``); its check
    covers the :data:`CHECKED` bytes before the cut and, where those events are not
    all of the record at the cut (the records waited), where each of their records
    stands (:meth:`position`). Reading from a position whose check differs, or from a
    cut that a record before it names as a parent standing after it (the parent was
    written after a reader passed the child), is :class:`_Stale`."""

    def __init__(
        self,
        kind: Turning,
        f: Any,
        index: int,
        start: int,
        skip: int,
        wanted: str | None,
        page: _Page,
    ) -> None:
        self.kind, self.f, self.fd, self.index = kind, f, f.fileno(), index
        self.start, self.skip, self.wanted, self.page = start, skip, wanted, page
        #: id -> offset of the last record read with it
        self.seen: dict[str, int] = {}
        #: id -> the records read that wait for the record of that id
        self.waiting: dict[str, list[_Record]] = {}
        #: ids of the records read that wait
        self.held: set[str] = set()
        self.pending = 0
        #: the 2 x REORDER bytes before ``start`` (whole records) and where they start
        self.back: bytes | None = None
        self.back_at = 0
        #: the last cut, the events given since it, their records' offsets, checksums
        self.cut = start
        self.since = 0
        self.sources: list[int] = []
        self.base = self.folded = zlib.crc32(self._before(start)) if start else 0

    # -- positions ------------------------------------------------------------------

    def _before(self, offset: int) -> bytes:
        start = max(0, offset - CHECKED)
        return os.pread(self.fd, offset - start, start)

    def move_cut(self, offset: int) -> None:
        self.validate()
        self.cut, self.since, self.sources, self.skip = offset, 0, [], 0
        self.base = self.folded = zlib.crc32(self._before(offset))

    def position(self) -> Position:
        """The position after the events given since the last cut."""
        plain = not self.sources or self.sources == [self.cut]
        return Position(
            self.index, self.cut, self.since, f"{self.base if plain else self.folded:08x}"
        )

    def validate(self) -> None:
        """:class:`_Stale` unless the asked position says what was read again (checked
        once its events are counted again)."""
        if self.wanted is None:
            return
        if self.since < self.skip or self.position().check != self.wanted:
            raise _Stale
        self.wanted = None

    def give(self, record: _Record) -> None:
        """``record``'s events, then those of the records that wait for it."""
        todo = [record]
        while todo:
            rec = todo.pop()
            if rec.waited:
                rec.waited = False
                self.pending -= 1
            for event in rec.events:
                if self.since >= self.skip and len(self.page.events) >= self.page.limit:
                    raise _Full
                if not self.sources or self.sources[-1] != rec.offset:
                    self.sources.append(rec.offset)
                    self.folded = zlib.crc32(b",%d" % rec.offset, self.folded)
                self.since += 1
                if self.since <= self.skip:
                    if self.since == self.skip:
                        self.validate()
                    continue
                here = self.position()
                self.page.events.append({**event, "id": str(here)})
                self.page.last = here
            if rec.uuid is not None:
                self.held.discard(rec.uuid)
                todo.extend(reversed(self.waiting.pop(rec.uuid, [])))

    # -- reading --------------------------------------------------------------------

    def read(self, newest: bool) -> _End:
        if self.skip == 0:
            self.validate()
        f, offset, page = self.f, self.start, self.page
        f.seek(offset)
        while True:
            if self.pending == 0 and (len(page.events) >= page.limit or page.budget <= 0):
                if offset != self.cut:
                    self.move_cut(offset)
                return _End(self.position(), True)
            line = f.readline(MAX_RECORD + 1)
            if not line:
                break
            length, whole = _whole(f, line)
            if not whole and newest:
                break
            own: str | None = None
            parent: str | None = None
            if not whole:
                produced = [other(None, f"a record of {length} bytes cut short")]
            elif length > MAX_RECORD:
                produced = [other(None, f"a record of {length} bytes, not read")]
            else:
                produced, own, parent = (
                    _parse(self.kind, line) if line.strip() else ([], None, None)
                )
            page.budget -= length
            if self.pending == 0 and offset != self.cut:
                self.move_cut(offset)
            record = _Record(offset, produced, own, parent)
            if own is not None and self.start:
                self.check_not_named(record)
            if parent is not None and self.waits(record, offset + length):
                record.waited = True
                self.pending += 1
                self.waiting.setdefault(parent, []).append(record)
                if own is not None:
                    self.held.add(own)
            else:
                self.give(record)
            if own is not None:
                self.seen[own] = offset
            offset += length
        if self.pending and not newest:  # (its parent was not read after all)
            for rec in sorted(
                (r for rs in self.waiting.values() for r in rs), key=lambda r: r.offset
            ):
                if rec.waited:
                    self.give(rec)
        if self.pending == 0 and offset != self.cut:
            self.move_cut(offset)
        self.validate()
        return _End(self.position(), False)

    def waits(self, record: _Record, end: int) -> bool:
        """Whether ``record`` (which has a parent) comes after a record that stands after
        it: its parent, or a record that waits for its own."""
        parent, at = record.parent, record.offset
        assert parent is not None
        if parent in self.held:
            return True
        if parent in self.seen:
            if self.seen[parent] >= at - REORDER:
                return False
        elif self.named_back(parent, at - REORDER):
            return False
        return self.named_ahead(parent, end, at + REORDER)

    def named_ahead(self, uuid: str, start: int, end: int) -> bool:
        """Whether a whole record that starts in [start, end) has id ``uuid``."""
        if start >= end:
            return False
        block = os.pread(self.fd, end - start, start)
        if len(block) == end - start:  # the record that crosses ``end``, to its end
            block += _rest_of_line(self.fd, start + len(block), block)
        self.page.budget -= len(block)
        needle = json.dumps(uuid).encode()
        named = _records_naming(self.kind, block, 0, end - start, needle)
        return any(own == uuid for _, own, _ in named)

    def lookback(self) -> tuple[bytes, int]:
        """The whole records in the 2 x :data:`REORDER` bytes before the run, and where
        they start."""
        if self.back is None:
            at = max(0, self.start - 2 * REORDER)
            block = os.pread(self.fd, self.start - at, at)
            if at > 0 and os.pread(self.fd, 1, at - 1) != b"\n":
                cut = block.find(b"\n") + 1  # (the rest of a record that starts before)
                at, block = (at + cut, block[cut:]) if cut else (self.start, b"")
            self.back, self.back_at = block, at
        return self.back, self.back_at

    def named_back(self, uuid: str, since: int) -> bool:
        """Whether a record before the run, starting at or after ``since``, has id
        ``uuid``."""
        if not self.start:
            return False
        back, at = self.lookback()
        needle = json.dumps(uuid).encode()
        named = _records_naming(self.kind, back, since - at, len(back), needle)
        return any(own == uuid for _, own, _ in named)

    def check_not_named(self, record: _Record) -> None:
        """:class:`_Stale` when a record before the run would wait for ``record``: it
        names it as its parent, stands less than :data:`REORDER` bytes before it, and
        no record with its id stands in the :data:`REORDER` bytes before it nor between
        it and the run (else it waited for that one, or for none). The reader read it
        before ``record`` was written, in the file's order."""
        uuid, at = record.uuid, record.offset
        assert uuid is not None
        if at >= self.start + REORDER:
            return
        back, back_at = self.lookback()
        needle = json.dumps(uuid).encode()
        # the records that may name it start after ``at - REORDER``: that span alone is
        # searched for each record (almost always in vain); the whole look-back only
        # when one does
        near = max(0, at - REORDER + 1 - back_at)
        if back.find(needle, near) < 0:
            return
        named = [
            (back_at + x, own, parent)
            for x, own, parent in _records_naming(self.kind, back, 0, len(back), needle)
        ]
        for x, _, parent in named:
            if parent != uuid or x <= at - REORDER:
                continue
            if not any(own == uuid and y != x and y >= x - REORDER for y, own, _ in named):
                raise _Stale


def _parse(kind: Turning, line: bytes) -> tuple[list[dict[str, Any]], str | None, str | None]:
    try:
        record = json.loads(line)
    except ValueError:
        return [other(None, "not JSON")], None, None
    if not isinstance(record, dict):
        return [other(None, type(record).__name__)], None, None
    own, parent = kind.links(record)
    return list(kind.turns(record)), own, parent


def _records_naming(
    kind: Turning, block: bytes, lo: int, hi: int, needle: bytes
) -> Iterator[tuple[int, str | None, str | None]]:
    """(offset in ``block``, id, parent's id) of each whole record of ``block`` (which
    starts at a record) that starts in [lo, hi) and holds ``needle``."""
    at = block.find(needle, max(0, lo))
    while at >= 0:
        start = block.rfind(b"\n", 0, at) + 1
        end = block.find(b"\n", at)
        if end < 0 or start >= hi:
            return  # (not whole, or past hi)
        if start >= lo:
            try:
                record = json.loads(block[start : end + 1])
            except ValueError:
                record = None
            if isinstance(record, dict):
                own, parent = kind.links(record)
                yield start, own, parent
        at = block.find(needle, end)


def _rest_of_line(fd: int, at: int, block: bytes) -> bytes:
    """The bytes from ``at`` to the end of the line ``block`` (read up to ``at``) ends
    in: none if it ends in a newline; at most :data:`MAX_RECORD`."""
    if not block or block.endswith(b"\n"):
        return b""
    rest = bytearray()
    while len(rest) <= MAX_RECORD:
        chunk = os.pread(fd, 1 << 16, at + len(rest))
        if not chunk:
            break
        cut = chunk.find(b"\n")
        if cut >= 0:
            rest += chunk[: cut + 1]
            break
        rest += chunk
    return bytes(rest)


def _whole(f: Any, line: bytes) -> tuple[int, bool]:
    """The length of the record ``line`` starts (read past the rest of an overlong
    one) and whether it ends in a newline."""
    length = len(line)
    if line.endswith(b"\n"):
        return length, True
    if length <= MAX_RECORD:
        return length, False
    while more := f.readline(1 << 20):
        length += len(more)
        if more.endswith(b"\n"):
            return length, True
    return length, False


def turn_source(
    service: SessionService, session: Session
) -> tuple[Turning, list[ConversationFile]]:
    """What reads ``session``'s turns and the files it reads them from: an ACP
    session's journal (:mod:`jupyter_agents.acp.turns`), else its kind's conversation
    files (:func:`check_kind`)."""
    if session.mode == "acp":
        return ACP_TURNS, journal_files(journal_folder(service.state_dir, session.id))
    return check_kind(session, service.kinds), service.conversation_files(session)


def session_turns(
    service: SessionService,
    session_id: str,
    after: Position = START,
    limit: int = DEFAULT_EVENTS,
) -> TurnPage:
    """A page of a session's turns (:func:`read_turns` of its conversation files, or
    of an ACP session's journal); :class:`NotFound` for an unknown session,
    :class:`InvalidRequest` for one whose kind keeps no conversation files. A session
    with no file yet (nothing was sent) has an empty page."""
    session = service.get(session_id)
    source, files = turn_source(service, session)
    page = read_turns(source, files, after, limit)
    ms = service.transcript(session.id).started_ms()
    if ms is not None:
        page.replay_start = clock.from_epoch(ms / 1000).isoformat(timespec="milliseconds")
    return page
