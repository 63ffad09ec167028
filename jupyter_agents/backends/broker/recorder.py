"""How the broker writes one session's transcript: the segmented, capped layout of
:mod:`jupyter_agents.transcripts`, and reading it back for a lagging client.

A :class:`Recorder` appends output to the newest segment (continuing an earlier run's,
so a restored session's offsets go on), starts a new segment when it is full and deletes
the oldest beyond the number kept (:func:`~jupyter_agents.transcripts.segmenting`). A
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

from ...paths import ensure_private_dir
from ...transcripts import (
    gap_name,
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
        self._fd = self._open(self.starts[-1])
        #: the logical offset of the next output byte
        self.end = self.starts[-1] + os.fstat(self._fd).st_size
        #: where the last gap of this recorder is (output lost from there on)
        self.last_gap: int | None = None
        self._failing = False

    def _open(self, start: int) -> int:
        return os.open(self.directory / segment_name(start), _FLAGS, 0o600)

    def write(self, data: bytes) -> int:
        """Append output; the logical offset it starts at. A failed write loses the
        rest of ``data`` (module docstring)."""
        offset = self.end
        view = memoryview(data)
        try:
            while view:
                room = self.segment - (self.end - self.starts[-1])
                if room <= 0:
                    self._roll()
                    room = self.segment
                written = os.write(self._fd, view[:room])
                self.end += written
                view = view[written:]
        except OSError as e:
            self.end = self.starts[-1] + os.fstat(self._fd).st_size
            if not self._failing:
                self._failing = True
                self.last_gap = self.end
                with contextlib.suppress(OSError):  # an empty file: fits on a full disk
                    os.close(os.open(self.directory / gap_name(self.end, time.time()), _FLAGS))
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

    def _roll(self) -> None:
        """Start a new segment at :attr:`end`; drop the oldest beyond the cap and the
        gap markers before the first kept byte."""
        fd = self._open(self.end)
        os.close(self._fd)
        self._fd = fd
        self.starts.append(self.end)
        for start in segments_to_drop(self.starts, self.keep):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / segment_name(start))
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
