"""The on-disk layout of a transcript: file names, what a directory listing holds, how a
capped transcript is cut into segments and the timing index format (functions over
plain data), and the move of a transcript of the older one-file layout
(:func:`migrate_legacy`, the one function here that touches the disk).
:class:`~jupyter_agents.terminal.transcripts.Transcript` reads by these rules; the writers
(tmux's :mod:`~jupyter_agents.backends.tmux.writer`, the broker's recorder) write by them.

Layout of one session's transcript, ``<state dir>/transcripts/<session id>/`` (0700)::

    <start>.log               a segment (0600): the output from byte <start> on
    <start>.idx               its timing index (0600): when its output was written
    gap-<offset>-<unixtime>   empty: output at byte <offset> was lost at that time
                              (a write failed, e.g. the disk was full)
    replay-<offset>           empty: the output from byte <offset> on begins with a
                              replay of earlier output (a restore's prelude: an old
                              tail, then its marker line), which search and the text
                              exports skip: its original is found where it was first
                              printed

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
that offset on was written at that time. A writer that opens a segment another writer
began (a restored session appends to its transcript) starts with an absolute line too:
a line whose time is at least :data:`ABSOLUTE_MS` (2001 in unix ms; no delta is ever
that long) is absolute, offset and time. A writer adds an entry for a write of output
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
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from jupyter_agents.core.paths import ensure_private_dir

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
#: an index line with a time at least this is absolute (module docstring)
ABSOLUTE_MS = 10**12
_SEGMENT = re.compile(r"(0|[1-9][0-9]*)\.log")
_GAP = re.compile(r"gap-(0|[1-9][0-9]*)-([0-9]+)")
_REPLAY = re.compile(r"replay-(0|[1-9][0-9]*)")


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
    its first malformed line (a writer killed mid-line). Absolute lines after the first
    (a second writer's: module docstring) restart the sums.

    >>> parse_index(b"4096 1767225600250\n100 250\n7 1")
    [(4096, 1767225600250), (4196, 1767225600500)]
    >>> parse_index(b"0 1767225600250\n100 250\n5000 1767229200000\n10 5\n")[2:]
    [(5000, 1767229200000), (5010, 1767229200005)]
    """
    entries: list[tuple[int, int]] = []
    offset = ms = 0
    for line in data.split(b"\n")[:-1]:
        fields = line.split(b" ")
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            break
        first, second = int(fields[0]), int(fields[1])
        if not entries or second >= ABSOLUTE_MS:
            offset, ms = first, second
        else:
            offset, ms = offset + first, ms + second
        entries.append((offset, ms))
    return entries


def time_at(timeline: list[tuple[int, int]], offset: int) -> int | None:
    """When (unix ms) the byte at ``offset`` was written, by a transcript's
    :meth:`~jupyter_agents.terminal.transcripts.Transcript.timeline`: its last entry at or before
    ``offset``.

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


def replay_name(offset: int) -> str:
    """The file name of the marker of a replay starting at ``offset``.

    >>> replay_name(4096)
    'replay-4096'
    """
    return f"replay-{offset}"


@dataclasses.dataclass(frozen=True)
class Listing:
    """What a transcript directory holds: segment starts, gaps ``(offset, unix time)``
    and replay starts, all ascending."""

    starts: list[int]
    gaps: list[tuple[int, int]]
    replays: list[int] = dataclasses.field(default_factory=list)

    @property
    def first(self) -> int:
        """The first kept byte (0 before anything was written)."""
        return self.starts[0] if self.starts else 0


def parse_listing(names: Iterable[str]) -> Listing:
    """The segments, gap and replay markers among a transcript directory's file names
    (anything else, e.g. a zero-padded name, is ignored).

    >>> parse_listing(["65536.log", "0.log", "gap-70000-1767225600", "x.log", "007.log"])
    Listing(starts=[0, 65536], gaps=[(70000, 1767225600)], replays=[])
    >>> parse_listing(["0.log", "replay-512", "replay-0"]).replays
    [0, 512]
    """
    starts, gaps, replays = [], [], []
    for name in names:
        if m := _SEGMENT.fullmatch(name):
            starts.append(int(m[1]))
        elif m := _GAP.fullmatch(name):
            gaps.append((int(m[1]), int(m[2])))
        elif m := _REPLAY.fullmatch(name):
            replays.append(int(m[1]))
    return Listing(sorted(starts), sorted(gaps), sorted(replays))


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
