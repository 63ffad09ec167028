"""An agent session's turns as events (:mod:`jupyter_agents.agents.turns`), a page at a
time from a position, for a view that follows the session live and resumes where it
was after a reconnect or a restart.

A position is ``<file>:<offset>:<done>:<check>``: the ``file``-th of the session's
conversation files (:meth:`~jupyter_agents.sessions.service.SessionService.conversation_files`,
oldest first), the byte ``offset`` of a record in it, how many of that record's events
were read, and a checksum of the :data:`CHECKED` bytes before the offset. Each event's
``id`` is the position right after it, so a reader that passes the last id it has
(``after``) gets what follows, with no event twice and none missed; a page's ``next``
is where the following page starts (past records that made no event too). A record
the CLI has not finished writing (no newline yet) is left for the next read.

A CLI may rewrite its file rather than append to it (Claude Code does: its metadata
records move to the top). A position whose bytes before it changed is stale: the page
then starts over from the file's start with ``reset`` true, and the reader draws the
conversation again from it.

Bounded: a page holds at most ``limit`` events and reads at most :data:`PAGE_BYTES`
bytes; a record longer than :data:`MAX_RECORD` is one ``other`` event, not parsed.
Blocking.
"""

from __future__ import annotations

import dataclasses
import json
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
    """What maps a record to turn events: an agent kind, or an ACP journal's reader."""

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]: ...


#: the turns of ACP sessions' journals
ACP_TURNS = AcpTurns()


def read_turns(
    kind: Turning,
    files: list[ConversationFile],
    after: Position = START,
    limit: int = DEFAULT_EVENTS,
) -> TurnPage:
    """The events of ``files`` from ``after`` (:class:`TurnPage`), at most ``limit``.
    A record with no newline yet ends the page when it is in the newest file (its CLI
    may be writing it); in an older file it is one ``other`` event (cut short)."""
    if not 1 <= limit <= MAX_EVENTS:
        raise InvalidRequest(f"limit must be from 1 to {MAX_EVENTS}, got {limit}")
    events: list[dict[str, Any]] = []
    index, offset, done = after.file, after.offset, after.done
    reset = False
    before = b""
    budget = PAGE_BYTES
    while index < len(files):
        newest = index == len(files) - 1
        try:
            f = files[index].path.open("rb")
        except OSError:
            f = None
        if f is not None:
            with f:
                f.seek(max(0, offset - CHECKED))
                before = f.read(offset - max(0, offset - CHECKED))
                f.seek(offset)
                if (index, offset) == (after.file, after.offset) and check(before) != after.check:
                    offset, done, before, reset = 0, 0, b"", True  # rewritten: start over
                    f.seek(0)
                while True:
                    here = Position(index, offset, done, check(before))
                    if len(events) >= limit or budget <= 0:
                        return TurnPage(events, here, more=True, reset=reset)
                    line = f.readline(MAX_RECORD + 1)
                    if not line:
                        break
                    length, whole = _whole(f, line)
                    if not whole and newest:
                        return TurnPage(events, here, reset=reset)
                    if not whole:
                        produced = [other(None, f"a record of {length} bytes cut short")]
                    elif length > MAX_RECORD:
                        produced = [other(None, f"a record of {length} bytes, not read")]
                    else:
                        produced = _events(kind, line) if line.strip() else []
                    budget -= length
                    for n in range(done, len(produced)):
                        position = Position(index, offset, n + 1, here.check)
                        events.append({**produced[n], "id": str(position)})
                        if len(events) >= limit and n + 1 < len(produced):
                            return TurnPage(events, position, more=True, reset=reset)
                    before = (before + line[-CHECKED:])[-CHECKED:] if whole else b""
                    if not whole or length > MAX_RECORD:  # (its bytes were not all kept)
                        start = max(0, offset + length - CHECKED)
                        f.seek(start)
                        before = f.read(offset + length - start)
                    offset, done = offset + length, 0
        if newest:
            break
        index, offset, done, before = index + 1, 0, 0, b""
    return TurnPage(events, Position(index, offset, done, check(before)), reset=reset)


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


def _events(kind: Turning, line: bytes) -> list[dict[str, Any]]:
    try:
        record = json.loads(line)
    except ValueError:
        return [other(None, "not JSON")]
    if not isinstance(record, dict):
        return [other(None, type(record).__name__)]
    return list(kind.turns(record))


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
