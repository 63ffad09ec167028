"""Transcripts: the raw output of a session, on disk, complete while no server runs,
bounded by ``AgentsApp.transcript_max_bytes``.

One :class:`Transcript` type serves every reader: the REST log (byte ranges), the CLI
(``log``, ``--tail``, ``--follow``), search and exports (:mod:`jupyter_agents.sessions.search`,
:mod:`jupyter_agents.terminal.render`), magics and the dashboard (text), and restore (the tail
shown before the new process). The backends write them (tmux through
``pipe-pane`` and :mod:`~jupyter_agents.backends.tmux.writer`, the broker in
:mod:`~jupyter_agents.backends.broker.recorder`); nothing here writes.

The layout on disk (segments, gap markers, timing indexes) is in
:mod:`jupyter_agents.terminal.segments`.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from jupyter_agents.core import clock
from jupyter_agents.core.errors import NotFound, OutOfRange
from jupyter_agents.core.paths import create_private_file, ensure_private_dir
from jupyter_agents.terminal.segments import (
    Listing,
    index_name,
    migrate_legacy,
    parse_index,
    parse_listing,
    replay_name,
    segment_name,
)

#: the most transcript bytes one read (e.g. one log request) returns
MAX_CHUNK = 4 * 1024 * 1024
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Want:
    """Which bytes of a transcript a reader asks for, in logical offsets: ``length``
    bytes (None: up to the end) from ``start`` (None: the first byte kept), or, with
    ``last``, the last ``last`` bytes. ``partial``: asked as a byte range (an HTTP
    ``Range``, answered 206), where a start at or past the end of a transcript that
    holds bytes is refused. The server parses HTTP arguments into one
    (:func:`jupyter_agents.server.params.wanted`)."""

    start: int | None = None
    length: int | None = None
    last: int | None = None
    partial: bool = False


def window(first: int, size: int, want: Want) -> tuple[int, int]:
    """Which bytes of a transcript holding bytes ``first`` to ``size`` ``want`` names:
    ``(start, count)``, capped at :data:`MAX_CHUNK`; a suffix (``last``) longer than
    what is kept starts at ``first``. :class:`OutOfRange` for a start past the end or
    before ``first`` (dropped by the cap).

    >>> window(0, 100, Want()), window(0, 100, Want(start=90, length=50))
    ((0, 100), (90, 10))
    >>> window(40, 100, Want(last=10, partial=True)), window(40, 100, Want())
    ((90, 10), (40, 60))
    >>> window(40, 100, Want(start=10))
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.OutOfRange: bytes before 40 were dropped (transcript_max_bytes)
    """
    if want.last is not None:
        start = max(first, size - want.last)
    else:
        start = first if want.start is None else want.start
    end = size if want.length is None else start + want.length
    if start < first:
        raise OutOfRange(dropped(first))
    if start > size or (want.partial and start >= size and size > 0):
        raise OutOfRange(f"offset {start} is past the end of the transcript ({size} bytes)")
    return start, max(0, min(end, size, start + MAX_CHUNK) - start)


def dropped(first: int) -> str:
    """What a reader asking for bytes before ``first`` is told."""
    return f"bytes before {first} were dropped (transcript_max_bytes)"


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


def _read_in(dir_fd: int, name: str, limit: int | None = None) -> bytes | None:
    """The bytes of file ``name`` in directory ``dir_fd`` (at most ``limit``; all of it
    without), never through a symlink; None if it is not there (any more)."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, os.fstat(fd).st_size if limit is None else limit)
    finally:
        os.close(fd)


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
        return [(o, clock.from_epoch(t)) for o, t in gaps if o >= first]

    def mark_replay(self, replayed: bytes) -> None:
        """Say that the output from its end on begins with ``replayed`` printed again (a
        restore's prelude: :mod:`jupyter_agents.sessions.restore`), which :meth:`replays` then
        gives; the directory is made if there is none yet. Blocking."""
        ensure_private_dir(self.path)
        marker = self.path / replay_name(self.size())
        create_private_file(marker)
        newlines = replayed.count(b"\n")
        marker.write_text(f"{len(replayed)} {newlines}")

    def replays(self) -> list[tuple[int, int]]:
        """The byte ranges ``[start, end)`` of its kept bytes that replay earlier output
        (:meth:`mark_replay`), ascending. A terminal prints each newline of a replay as
        CR LF, so a range is its bytes plus one per newline, as long as its end is where
        the replay's last line ends (else, the bytes alone). Blocking."""

        def step(dir_fd: int, listing: Listing, end: int) -> list[tuple[int, int, int]]:
            found = []
            for start in listing.replays:
                data = _read_in(dir_fd, replay_name(start), 64)
                if data is None:
                    continue
                fields = data.split()
                if len(fields) == 2 and all(f.isdigit() for f in fields):
                    found.append((start, int(fields[0]), int(fields[1])))
            return found

        try:
            marked = self._look(step)
        except NotFound:
            return []
        ranges = []
        first = self.start()
        for start, length, newlines in marked:
            end = start + length + newlines
            with contextlib.suppress(NotFound, OutOfRange):
                last = self.read(end - 3, 3)[0]
                if len(last) == 3 and last != b"\r\r\n":
                    end = start + length  # printed as it is (no CR added)
            if end > first:
                ranges.append((max(start, first), end))
        return ranges

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
        return None if when is None else clock.from_epoch(when)

    def started_ms(self) -> int | None:
        """The unix time in ms of its first timed byte: the zero of its replay (a search
        hit's and a turn's seconds into the replay count from it), ``timeline()[0]``'s
        time read from the first index alone; None when it has no timing index."""

        def step(dir_fd: int, listing: Listing, end: int) -> int | None:
            for start in listing.starts:
                data = _read_in(dir_fd, index_name(start), 256)
                entries = parse_index(data) if data else []
                if entries and entries[0][0] < end:
                    return entries[0][1]
            return None

        try:
            return self._look(step)
        except NotFound:
            return None

    def timeline(self) -> list[tuple[int, int]]:
        """The timing index entries of its kept bytes, ``(offset, unix time in ms)``,
        ascending ([] when there is none)."""

        def step(dir_fd: int, listing: Listing, end: int) -> list[tuple[int, int]]:
            entries: list[tuple[int, int]] = []
            for start in listing.starts:
                data = _read_in(dir_fd, index_name(start))
                if data is None:
                    continue
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

    def read_window(self, want: Want) -> tuple[bytes, int, int]:
        """The bytes ``want`` names (:func:`window`): ``(data, start, size)``."""

        def step(dir_fd: int, listing: Listing, end: int) -> tuple[bytes, int, int]:
            start, count = window(listing.first, end, want)
            return _read_span(dir_fd, listing.starts, start, count), start, end

        return self._look(step)

    def open_newest(self) -> tuple[int, int] | None:
        """The offset where its newest segment starts and a descriptor open on that
        segment (the caller closes it); None when it has none."""

        def step(dir_fd: int, listing: Listing, _end: int) -> tuple[int, int] | None:
            if not listing.starts:
                return None
            start = listing.starts[-1]
            return start, os.open(segment_name(start), os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd)

        try:
            return self._look(step)
        except NotFound:
            return None

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
        follower = Follower(self)
        try:
            while True:
                try:
                    chunk = follower.read(offset, MAX_CHUNK)
                    if not chunk:  # there may be a new segment: look again
                        follower.close()
                        chunk = follower.read(offset, MAX_CHUNK)
                except OutOfRange:
                    offset = self.start()
                    continue
                if chunk:
                    offset += len(chunk)
                    yield chunk
                elif running():
                    time.sleep(interval)
                else:
                    return
        finally:
            follower.close()


class Follower:
    """Reads a transcript forward as it grows: its newest segment is kept open, so
    reading what was just written there is one ``pread``, with no look at the directory.
    Older bytes are read through :meth:`Transcript.read`. A new segment (which may also
    have dropped old ones) is not seen until :meth:`close`: call it when a file was
    created in the directory, or when a read came up short of more there is, and when
    done."""

    def __init__(self, transcript: Transcript) -> None:
        self._transcript = transcript
        #: (start offset, descriptor) of the newest segment, once looked up
        self._newest: tuple[int, int] | None = None

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset``; :class:`OutOfRange` when ``offset``
        was dropped."""
        if self._newest is None:
            self._newest = self._transcript.open_newest()
        if self._newest is not None and offset >= self._newest[0]:
            start, fd = self._newest
            return os.pread(fd, min(length, MAX_CHUNK), offset - start)
        return self._transcript.read(offset, length)[0]

    def close(self) -> None:
        """Close the newest segment: the next read looks at the directory again."""
        if self._newest is not None:
            os.close(self._newest[1])
            self._newest = None


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
