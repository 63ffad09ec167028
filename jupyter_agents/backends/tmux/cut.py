"""The exact cut of the tmux data path: where in a session's transcript a snapshot falls,
so a viewer gets every byte once (before the cut in the replay, after it live).

Viewers read output from the transcript that ``pipe-pane`` writes, which lags the pane
by whatever is in flight, so a ``capture-pane`` does not say by itself where in the
transcript it was taken. What tmux does order exactly is a control client's ``%output``
against its command replies: commands on one line run with no pane output read between
them. The stream's control client keeps its pane *paused* (``refresh-client -A
%N:pause``: no ``%output``, and on every tmux version the pane is still read, for the
pipe); a cut runs ``refresh-client -A %N:continue`` and the captures on one line, so the
first ``%output`` after the replies is the pane's output right after the snapshot. Found
in the transcript (:func:`locate`), it gives the cut's offset; the pane is then paused
again. A pane that printed nothing more is cut at the settled end of its transcript;
one that tmux read nothing from for :data:`IDLE` before the cut (``#{window_activity}``,
asked on the cut's line: :func:`idle_before`) at its transcript's size taken before the
cut, with no wait: its writer had that long to land all of it.

Output that repeats exactly across the whole anchor (``yes``) may be placed a period
early, which repeats that period for the new viewer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from ...errors import NotFound, OutOfRange

if TYPE_CHECKING:
    from ...transcripts import Transcript

#: a transcript that has not grown for this long holds all tmux read of a quiet pane
QUIET = 0.01
#: the longest a cut waits for output after it, or for the transcript to reach it
SETTLE_LIMIT = 2.0
#: bytes of the pane's output after the cut that locate it in the transcript
ANCHOR = 512
#: a pane tmux read nothing from for this long has all it read in the transcript (25
#: times :data:`QUIET`, which is all the other paths give the writer to land it)
IDLE = 0.25


@dataclasses.dataclass(frozen=True)
class WindowActivity:
    """When tmux last read output of a window's pane (one each): unix time in whole
    seconds, rounded down (a tmux format, :func:`~.formats.format_of`)."""

    window_activity: int | None


def idle_before(activity: WindowActivity | None, since: float) -> bool:
    """Whether tmux read no output of a pane in the :data:`IDLE` seconds before
    ``since`` (a :func:`time.time`), told by the ``activity`` of its window. Then the
    pane's transcript held all tmux read of it by ``since``.

    >>> idle_before(WindowActivity(100), 101.25), idle_before(WindowActivity(100), 101.2)
    (True, False)
    >>> idle_before(WindowActivity(None), 102.0), idle_before(None, 102.0)
    (False, False)
    """
    last = None if activity is None else activity.window_activity
    return last is not None and last + 1 + IDLE <= since


async def settle(transcript: Transcript) -> int:
    """The transcript's length once it has not grown for :data:`QUIET` seconds (all tmux
    read of a pane that stopped printing is then in it), or after :data:`SETTLE_LIMIT`."""
    loop = asyncio.get_running_loop()
    size, quiet_since = transcript.size(), loop.time()
    deadline = quiet_since + SETTLE_LIMIT
    while loop.time() - quiet_since < QUIET and loop.time() < deadline:
        await asyncio.sleep(QUIET / 5)
        now = transcript.size()
        if now != size:
            size, quiet_since = now, loop.time()
    return size


async def anchor(after: bytearray, more: asyncio.Event, transcript: Transcript) -> int | None:
    """Wait for the pane's output after a cut's capture, which its stream collects into
    ``after`` (setting ``more`` as it comes), until it anchors the cut (:data:`ANCHOR`
    bytes: None, to :func:`locate` it), or some came and then none for :data:`QUIET`
    (None too). If none comes while the transcript does not grow either, for
    :data:`QUIET`, all the pane printed is in the transcript: its size then is the cut
    (returned). A transcript that grows with no ``%output`` may hold output after the
    capture whose ``%output`` is late (a loaded machine), so that is waited out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_LIMIT
    while len(after) < ANCHOR and loop.time() < deadline:
        more.clear()
        size = transcript.size()
        try:
            await asyncio.wait_for(more.wait(), QUIET)
        except asyncio.TimeoutError:
            if after:
                return None
            if transcript.size() == size:
                return size
    return None


async def locate(transcript: Transcript, floor: int, after: bytes) -> int | None:
    """The transcript offset where ``after`` starts, searching from ``floor`` (the
    transcript's size before the cut was taken: the cut is at or past it) as the
    transcript grows; None if it is not there within :data:`SETTLE_LIMIT` (its writer
    dropped output: a full disk) or there is no such transcript."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_LIMIT
    while True:
        try:
            data, _ = transcript.read(floor)
        except (NotFound, OutOfRange):  # no transcript (any more), or dropped by the cap
            return None
        found = data.find(after)  # its first occurrence
        if found >= 0:
            return floor + found
        if loop.time() > deadline:
            return None
        await asyncio.sleep(QUIET / 5)
