"""Transcripts: the raw output of a session, on disk, complete while no server runs,
bounded by ``AgentsApp.transcript_max_bytes``.

One :class:`Transcript` type serves every reader: the REST log (byte ranges), the CLI
(``log``, ``--tail``, ``--follow``), search and exports (:mod:`jupyter_agents.search`,
:mod:`jupyter_agents.render`), magics and the dashboard (text), and restore (the tail
shown before the new process). The backends write them (tmux through
``pipe-pane`` and :data:`~jupyter_agents.backends.tmux.formats.TRANSCRIPT_WRITER`, the
broker in :mod:`~jupyter_agents.backends.broker.recorder`); nothing here writes.

Layout of one session's transcript, ``<state dir>/transcripts/<session id>/`` (0700)::

    <start>.log               a segment (0600): the output from byte <start> on
    <start>.idx               its timing index (0600): when its output was written
    gap-<offset>-<unixtime>   empty: output at byte <offset> was lost at that time
                              (a write failed, e.g. the disk was full)

Offsets are *logical*: bytes since the session first began (restores append), unpadded
decimal. The segment with the highest start is the one being written; segments are
contiguous (each starts where the one before it ends). A writer starts a new segment once
the current one is full and then deletes the oldest segments beyond the number kept
(:func:`segmenting`), and the gap markers before the first kept byte, so a transcript
holds at most ``transcript_max_bytes`` (but two segments at least) and the offsets of
kept bytes never change. One failed-write episode leaves one gap marker; writing resumes
when writes work again.

A timing index holds one line per entry, ``<offset> <unix time in ms>`` for the first
and ``<offset delta> <ms delta>`` from the one before for the others: the output from
that offset on was written at that time. A writer adds an entry for a write of output
at least :data:`INDEX_INTERVAL` after the segment's previous entry (and for the first
write into a segment), so the output between two entries came within that interval of
the first. An index is at most ``1/INDEX_SHARE`` of its segment's size: a segment whose
index is full ends early. Indexes are best effort (a writer that cannot write one
records output without it).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from .errors import InvalidRequest, NotFound, OutOfRange
from .paths import ensure_private_dir

#: the most transcript bytes one read (e.g. one log request) returns
MAX_CHUNK = 4 * 1024 * 1024
#: ``transcript_max_bytes`` unless configured
DEFAULT_MAX_BYTES = 32 << 20
#: the most segments kept per transcript (the newest, being written, included)
MAX_SEGMENTS = 8
#: the smallest segment, whatever the cap
MIN_SEGMENT_BYTES = 64 << 10
#: the least time (s) between two timing index entries of a segment
INDEX_INTERVAL = 0.1
#: a segment's timing index holds at most 1/INDEX_SHARE of its size
INDEX_SHARE = 8
_SEGMENT = re.compile(r"(0|[1-9][0-9]*)\.log")
_GAP = re.compile(r"gap-(0|[1-9][0-9]*)-([0-9]+)")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
T = TypeVar("T")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def window(
    first: int, size: int, offset: str | None, length: str | None, range_header: str | None
) -> tuple[int, int, bool]:
    """Which bytes of a transcript holding bytes ``first`` to ``size`` a request wants:
    ``(start, count, partial)``.

    From ``?offset=&length=`` (no offset: from ``first``) or an HTTP ``Range:
    bytes=a-b`` / ``bytes=-n`` header (``partial``: answer 206; a suffix longer than what
    is kept starts at ``first``). Capped at ``MAX_CHUNK``. Raises :class:`InvalidRequest`
    for malformed or negative values and :class:`OutOfRange` for a start past the end or
    before ``first`` (dropped by the cap).

    >>> window(0, 100, None, None, None), window(0, 100, "90", "50", None)
    ((0, 100, False), (90, 10, False))
    >>> window(40, 100, None, None, "bytes=-10"), window(40, 100, None, None, None)
    ((90, 10, True), (40, 60, False))
    >>> window(40, 100, "10", None, None)
    Traceback (most recent call last):
    ...
    jupyter_agents.errors.OutOfRange: bytes before 40 were dropped (transcript_max_bytes)
    """

    def number(name: str, value: str) -> int:
        if not value.isdigit():
            raise InvalidRequest(f"{name} must be a non-negative integer, got {value[:40]!r}")
        return int(value)

    partial = False
    if range_header is not None and offset is None and length is None:
        m = _RANGE.fullmatch(range_header.strip())
        if m is None or m.groups() == ("", ""):
            raise InvalidRequest(f"unsupported Range {range_header[:80]!r}; use bytes=a-b")
        low, high = m.groups()
        if low == "":
            start = max(first, size - int(high))
            end = size
        else:
            start = int(low)
            end = size if high == "" else min(size, int(high) + 1)
        partial = True
    else:
        start = number("offset", offset) if offset is not None else first
        end = size if length is None else start + number("length", length)
    if start < first:
        raise OutOfRange(dropped(first))
    if start > size or (partial and start >= size and size > 0):
        raise OutOfRange(f"offset {start} is past the end of the transcript ({size} bytes)")
    count = max(0, min(end, size, start + MAX_CHUNK) - start)
    return start, count, partial


def dropped(first: int) -> str:
    """What a reader asking for bytes before ``first`` is told."""
    return f"bytes before {first} were dropped (transcript_max_bytes)"


def segmenting(max_bytes: int) -> tuple[int, int]:
    """How a transcript capped at ``max_bytes`` is cut: ``(bytes per segment, segments
    kept)``. Segments of an eighth of the cap, at least :data:`MIN_SEGMENT_BYTES`; as
    many kept as fit in the cap, at most :data:`MAX_SEGMENTS` and at least 2 (so the
    output just before a new segment is still there).

    >>> segmenting(32 << 20), segmenting(256 << 10), segmenting(0)
    ((4194304, 8), (65536, 4), (65536, 2))
    """
    size = max(max_bytes // MAX_SEGMENTS, MIN_SEGMENT_BYTES)
    return size, min(MAX_SEGMENTS, max(2, max_bytes // size))


def segment_name(start: int) -> str:
    """The file name of the segment starting at logical byte ``start``."""
    return f"{start}.log"


def index_name(start: int) -> str:
    """The file name of the timing index of the segment starting at ``start``."""
    return f"{start}.idx"


def index_entry(offset: int, when: float, last: tuple[int, int] | None) -> bytes:
    r"""The index line saying the output from ``offset`` on was written at ``when``
    (unix time); ``last`` is the entry before it in the segment, ``(offset, ms)``.

    >>> index_entry(4096, 1767225600.25, None)
    b'4096 1767225600250\n'
    >>> index_entry(4196, 1767225600.5, (4096, 1767225600250))
    b'100 250\n'
    """
    ms = int(when * 1000)
    if last is None:
        return b"%d %d\n" % (offset, ms)
    return b"%d %d\n" % (offset - last[0], ms - last[1])


def parse_index(data: bytes) -> list[tuple[int, int]]:
    r"""The entries of one segment's timing index, ``(offset, unix time in ms)``, up to
    its first malformed line (a writer killed mid-line).

    >>> parse_index(b"4096 1767225600250\n100 250\n7 1")
    [(4096, 1767225600250), (4196, 1767225600500)]
    """
    entries: list[tuple[int, int]] = []
    offset = ms = 0
    for line in data.split(b"\n")[:-1]:
        fields = line.split(b" ")
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            break
        offset, ms = (
            (int(fields[0]), int(fields[1]))
            if not entries
            else (
                offset + int(fields[0]),
                ms + int(fields[1]),
            )
        )
        entries.append((offset, ms))
    return entries


def time_at(timeline: list[tuple[int, int]], offset: int) -> int | None:
    """When (unix ms) the byte at ``offset`` was written, by a transcript's
    :meth:`Transcript.timeline`: its last entry at or before ``offset``.

    >>> time_at([(0, 1000), (50, 2000)], 49), time_at([(10, 1000)], 5)
    (1000, None)
    """
    i = bisect.bisect_right(timeline, (offset, 1 << 62)) - 1
    return timeline[i][1] if i >= 0 else None


def gap_name(offset: int, when: float) -> str:
    """The file name of the marker of output lost at ``offset`` at ``when`` (unix time).

    >>> gap_name(4096, 1767225600.7)
    'gap-4096-1767225600'
    """
    return f"gap-{offset}-{int(when)}"


@dataclasses.dataclass(frozen=True)
class Listing:
    """What a transcript directory holds: segment starts and gaps ``(offset, unix
    time)``, both ascending."""

    starts: list[int]
    gaps: list[tuple[int, int]]

    @property
    def first(self) -> int:
        """The first kept byte (0 before anything was written)."""
        return self.starts[0] if self.starts else 0


def parse_listing(names: Iterable[str]) -> Listing:
    """The segments and gap markers among a transcript directory's file names (anything
    else, e.g. a zero-padded name, is ignored).

    >>> parse_listing(["65536.log", "0.log", "gap-70000-1767225600", "x.log", "007.log"])
    Listing(starts=[0, 65536], gaps=[(70000, 1767225600)])
    """
    starts, gaps = [], []
    for name in names:
        if m := _SEGMENT.fullmatch(name):
            starts.append(int(m[1]))
        elif m := _GAP.fullmatch(name):
            gaps.append((int(m[1]), int(m[2])))
    return Listing(sorted(starts), sorted(gaps))


def segments_to_drop(starts: list[int], keep: int) -> list[int]:
    """The oldest of ascending ``starts`` beyond the newest ``keep``.

    >>> segments_to_drop(list(range(10)), 8)
    [0, 1]
    """
    return starts[: max(0, len(starts) - keep)]


def migrate_legacy(path: Path) -> None:
    """Move a transcript of the one-file layout, ``<id>.log`` beside the directory
    ``path``, to the first segment ``path/0.log``. A rename: a process still appending
    to it (the ``pipe-pane`` of a session started before) goes on writing into it.
    Nothing happens when there is no such plain file or ``path`` has segments already."""
    legacy = path.with_name(path.name + ".log")
    try:
        if not stat.S_ISREG(os.lstat(legacy).st_mode):
            return
    except OSError:
        return
    ensure_private_dir(path)
    if parse_listing(os.listdir(path)).starts:
        return
    with contextlib.suppress(FileNotFoundError):  # another process moved it just now
        os.rename(legacy, path / segment_name(0))


def _read_span(dir_fd: int, starts: list[int], offset: int, count: int) -> bytes:
    """Up to ``count`` bytes from logical ``offset`` (not below ``starts[0]``), across
    segment boundaries. ``FileNotFoundError`` when a segment was dropped meanwhile."""
    parts = []
    i = bisect.bisect_right(starts, offset) - 1
    while count > 0 and 0 <= i < len(starts):
        limit = count if i + 1 == len(starts) else min(count, starts[i + 1] - offset)
        fd = os.open(segment_name(starts[i]), os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd)
        try:
            chunk = os.pread(fd, limit, offset - starts[i])
        finally:
            os.close(fd)
        parts.append(chunk)
        offset += len(chunk)
        count -= len(chunk)
        if len(chunk) < limit:
            break
        i += 1
    return b"".join(parts)


class Transcript:
    """The raw output log of one session: the directory ``path`` of its segments
    (module docstring; a transcript of the one-file layout is migrated on opening).

    Offsets are logical. Reads raise :class:`NotFound` when there is no transcript and
    :class:`OutOfRange` for bytes dropped by the cap; a segment dropped while it is read
    makes the read look again.
    """

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.path = path
        migrate_legacy(path)

    def _look(self, step: Callable[[int, Listing, int], T]) -> T:
        """``step(dir fd, listing, logical end)`` on what the directory holds now; again
        on a fresh look when a segment it read was dropped meanwhile."""
        try:  # never through a symlink planted in the state dir
            dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        except OSError as e:
            raise NotFound(f"session {self.session_id} has no transcript") from e
        try:
            for _ in range(3):
                with contextlib.suppress(FileNotFoundError):
                    listing = parse_listing(os.listdir(dir_fd))
                    end = 0
                    if listing.starts:
                        last = listing.starts[-1]
                        st = os.stat(segment_name(last), dir_fd=dir_fd, follow_symlinks=False)
                        end = last + st.st_size
                    return step(dir_fd, listing, end)
            raise NotFound(f"session {self.session_id}'s transcript rotated while being read")
        finally:
            os.close(dir_fd)

    def start(self) -> int:
        """The offset of its first kept byte (0 when nothing was dropped or there is none)."""
        try:
            return self._look(lambda _fd, listing, _end: listing.first)
        except NotFound:
            return 0

    def size(self) -> int:
        """Its logical length: the offset after its last byte (0 when there is none)."""
        try:
            return self._look(lambda _fd, _listing, end: end)
        except NotFound:
            return 0

    def gaps(self) -> list[tuple[int, datetime]]:
        """Where output was lost among the kept bytes (failed writes, e.g. a full disk):
        ``(offset, when)``, oldest first; one per episode."""
        try:
            found = self._look(lambda _fd, listing, _end: (listing.first, listing.gaps))
        except NotFound:
            return []
        first, gaps = found
        return [(o, datetime.fromtimestamp(t, timezone.utc)) for o, t in gaps if o >= first]

    def ended_at(self) -> datetime | None:
        """When it was last written (the newest segment's mtime), if it has a segment."""

        def mtime(dir_fd: int, listing: Listing, _end: int) -> float | None:
            if not listing.starts:
                return None
            name = segment_name(listing.starts[-1])
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime

        try:
            when = self._look(mtime)
        except NotFound:
            return None
        return None if when is None else datetime.fromtimestamp(when, timezone.utc)

    def timeline(self) -> list[tuple[int, int]]:
        """The timing index entries of its kept bytes, ``(offset, unix time in ms)``,
        ascending ([] when there is none)."""

        def step(dir_fd: int, listing: Listing, end: int) -> list[tuple[int, int]]:
            entries: list[tuple[int, int]] = []
            for start in listing.starts:
                try:
                    fd = os.open(index_name(start), os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                try:
                    data = os.read(fd, os.fstat(fd).st_size)
                finally:
                    os.close(fd)
                entries.extend(e for e in parse_index(data) if e[0] < end)
            return entries

        try:
            return self._look(step)
        except NotFound:
            return []

    def read(self, offset: int, length: int = MAX_CHUNK) -> tuple[bytes, int]:
        """Up to ``length`` bytes (at most :data:`MAX_CHUNK`) from ``offset``, and the
        logical size at the time of reading; :class:`OutOfRange` when ``offset`` was
        dropped."""

        def step(dir_fd: int, listing: Listing, end: int) -> tuple[bytes, int]:
            if offset < listing.first:
                raise OutOfRange(dropped(listing.first))
            count = max(0, min(length, MAX_CHUNK))
            return _read_span(dir_fd, listing.starts, offset, count), end

        return self._look(step)

    def read_window(
        self, offset: str | None, length: str | None, range_header: str | None
    ) -> tuple[bytes, int, int, bool]:
        """What a log request asks for (:func:`window`): ``(data, start, size,
        partial)``."""

        def step(dir_fd: int, listing: Listing, end: int) -> tuple[bytes, int, int, bool]:
            start, count, partial = window(listing.first, end, offset, length, range_header)
            return _read_span(dir_fd, listing.starts, start, count), start, end, partial

        return self._look(step)

    def tail(self, nbytes: int) -> bytes:
        """Its last ``nbytes`` bytes, or as many as are kept (b"" when there is none)."""

        def step(dir_fd: int, listing: Listing, end: int) -> bytes:
            start = max(listing.first, end - nbytes)
            return _read_span(dir_fd, listing.starts, start, end - start)

        try:
            return self._look(step)
        except NotFound:
            return b""

    def chunks(self, size: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
        """Its kept bytes up to its size at the call, in reads of ``size``: ``(offset,
        bytes)``. Bytes the cap drops meanwhile are skipped. Blocking."""
        offset, end = self.start(), self.size()
        while offset < end:
            try:
                data, _ = self.read(offset, min(size, end - offset))
            except OutOfRange:
                offset = self.start()
                continue
            if not data:
                return
            yield offset, data
            offset += len(data)

    def follow(
        self, offset: int, running: Callable[[], bool], interval: float = 0.2
    ) -> Iterator[bytes]:
        """Chunks from ``offset`` on, waiting for more while ``running()`` says the
        session still runs. Bytes dropped before they were read (``offset`` below the
        first kept byte) are skipped. Blocking: for the CLI and threads."""

        def step(dir_fd: int, listing: Listing, _end: int) -> tuple[int, bytes]:
            start = max(offset, listing.first)
            return start, _read_span(dir_fd, listing.starts, start, 1 << 20)

        while True:
            start, chunk = self._look(step)
            if chunk:
                offset = start + len(chunk)
                yield chunk
            elif running():
                time.sleep(interval)
            else:
                return


class GapLog:
    """Logs each gap in transcripts (output lost by a failed write, e.g. a full disk)
    once, when this process first sees it: one ``stat`` per transcript per pass, a
    listing only where its directory changed (a new marker changes it)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        #: (session id, offset) of the gaps logged so far
        self._logged: set[tuple[str, int]] = set()
        #: per session, its transcript directory's mtime when its gaps were last listed
        self._seen: dict[str, int] = {}

    def log_new(self, transcripts: Iterable[Transcript]) -> int:
        """Log the gaps of ``transcripts`` not logged before; how many there were."""
        new = 0
        for transcript in transcripts:
            try:
                changed = transcript.path.stat().st_mtime_ns
            except OSError:
                continue
            if self._seen.get(transcript.session_id) == changed:
                continue
            self._seen[transcript.session_id] = changed
            for offset, when in transcript.gaps():
                if (transcript.session_id, offset) in self._logged:
                    continue
                self._logged.add((transcript.session_id, offset))
                new += 1
                self.log.warning(
                    "jupyter_agents: session %s: transcript incomplete: output from byte %d "
                    "on was lost at %s (a write failed, e.g. the disk was full)",
                    transcript.session_id,
                    offset,
                    when.isoformat(timespec="seconds"),
                )
        return new
