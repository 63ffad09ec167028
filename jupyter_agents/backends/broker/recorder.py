"""How the broker writes one session's transcript: the segmented, capped layout of
:mod:`jupyter_agents.terminal.segments` with its timing index, and reading it back for a
lagging client.

A :class:`Recorder` appends output to the newest segment (continuing an earlier run's,
so a restored session's offsets go on), starts a new segment when it is full and deletes
the oldest beyond the number kept (:func:`~jupyter_agents.terminal.segments.segmenting`). A
failed write (a full disk) loses
that output, never stops the session: the first failure of an episode leaves a gap
marker and one warning, every later output tries again, and the first write that works
ends the episode.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import time
from pathlib import Path

from jupyter_agents.core.paths import ensure_private_dir
from jupyter_agents.terminal.segments import (
    INDEX_INTERVAL,
    INDEX_SHARE,
    gap_name,
    index_entry,
    index_name,
    migrate_legacy,
    parse_listing,
    segment_name,
    segmenting,
    segments_to_drop,
)

log = logging.getLogger("jupyter_agents.broker")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW


class Recorder:
    """The transcript writer of session ``sid`` in ``directory``, capped at
    ``max_bytes``. Only one recorder writes a directory at a time (the broker holds
    one per live session)."""

    def __init__(self, sid: str, directory: Path, max_bytes: int) -> None:
        self.sid = sid
        self.directory = directory
        self.segment, self.keep = segmenting(max_bytes)
        migrate_legacy(directory)
        ensure_private_dir(directory)
        #: the starts of the kept segments, ascending; the last one is written
        self.starts = parse_listing(os.listdir(directory)).starts or [0]
        self._fd, self._index = self._open(self.starts[-1])
        #: the last timing index entry this recorder added to the segment, (offset, ms)
        self._stamped: tuple[int, int] | None = None
        #: when the next index entry may be added (0: at the next write)
        self._next_stamp = 0.0
        self._index_bytes = 0
        #: the logical offset of the next output byte
        self.end = self.starts[-1] + os.fstat(self._fd).st_size
        #: where the last gap of this recorder is (output lost from there on)
        self.last_gap: int | None = None
        self._failing = False

    def _open(self, start: int) -> tuple[int, int | None]:
        """The segment starting at ``start`` and its timing index (None if it cannot be
        opened: the index is best effort, the output is not)."""
        fd = os.open(self.directory / segment_name(start), _FLAGS, 0o600)
        try:
            return fd, os.open(self.directory / index_name(start), _FLAGS, 0o600)
        except OSError:
            return fd, None

    def write(self, data: bytes) -> int:
        """Append output; the logical offset it starts at. A failed write loses the
        rest of ``data`` (module docstring)."""
        offset = self.end
        view = memoryview(data)
        now = time.time()
        try:
            while view:
                room = self.segment - (self.end - self.starts[-1])
                if room <= 0 or self._index_bytes >= self.segment // INDEX_SHARE:
                    self._roll()
                    room = self.segment
                if now >= self._next_stamp:
                    self._stamp(now)
                written = os.write(self._fd, view[:room])
                self.end += written
                view = view[written:]
        except OSError as e:
            self.end = self.starts[-1] + os.fstat(self._fd).st_size
            if not self._failing:
                self._failing = True
                self.last_gap = self.end
                with contextlib.suppress(OSError):  # an empty file: fits on a full disk
                    os.close(os.open(self.directory / gap_name(self.end, now), _FLAGS))
                log.warning(
                    "session %s: transcript write failed (%s); output from byte %d is not "
                    "recorded until writing works again",
                    self.sid,
                    e,
                    self.end,
                )
            return offset
        if self._failing:
            self._failing = False
            log.info("session %s: transcript written again from byte %d", self.sid, offset)
        return offset

    def _stamp(self, now: float) -> None:
        """Add a timing index entry for output at :attr:`end` written ``now`` (the
        segment's last one is ``INDEX_INTERVAL`` old or more, or there is none)."""
        if self._index is None:
            return
        entry = index_entry(self.end, now, self._stamped)
        with contextlib.suppress(OSError):
            self._index_bytes += os.write(self._index, entry)
            self._stamped = (self.end, int(now * 1000))
            self._next_stamp = now + INDEX_INTERVAL

    def _roll(self) -> None:
        """Start a new segment at :attr:`end`; drop the oldest beyond the cap and the
        gap markers before the first kept byte."""
        fd, index = self._open(self.end)
        self.close()
        self._fd, self._index, self._stamped, self._index_bytes = fd, index, None, 0
        self._next_stamp = 0.0
        self.starts.append(self.end)
        for start in segments_to_drop(self.starts, self.keep):
            for name in (segment_name(start), index_name(start)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / name)
        self.starts = self.starts[-self.keep :]
        for offset, when in parse_listing(os.listdir(self.directory)).gaps:
            if offset < self.starts[0]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / gap_name(offset, when))

    def lost_since(self, offset: int) -> bool:
        """Whether output from ``offset`` on can no longer be read back whole: dropped
        by the cap, or lost in a failed write at or after it."""
        return offset < self.starts[0] or (self.last_gap is not None and self.last_gap >= offset)

    def read(self, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes from ``offset`` (kept, below :attr:`end`), from one
        segment: the next read goes on in the next."""
        i = bisect.bisect_right(self.starts, offset) - 1
        stop = self.end if i + 1 == len(self.starts) else self.starts[i + 1]
        fd = os.open(self.directory / segment_name(self.starts[i]), os.O_RDONLY | _NOFOLLOW)
        try:
            return os.pread(fd, max(0, min(limit, stop - offset)), offset - self.starts[i])
        finally:
            os.close(fd)

    def close(self) -> None:
        os.close(self._fd)
        if self._index is not None:
            os.close(self._index)
