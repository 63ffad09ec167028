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
again. A pane that prints only a few bytes and then pauses is placed by them only where
they tell (:func:`placed`): a line end alone occurs in every line the transcript had yet
to land when the cut began. A pane that printed nothing more is cut at the settled end
of its transcript; one that tmux read nothing from for :data:`IDLE` before the cut
(``#{window_activity}``, asked on the cut's line: :func:`idle_before`) at its
transcript's size taken before the cut, with no wait: its writer had that long to land
all of it.

A :class:`Cut` is one such snapshot: it captures the pane (its history into tmux
buffers, saved into files: :meth:`~.control.TmuxControl.save_buffers`), places it, and
says how it went (:data:`Outcome`); its stream delivers it, takes it again, or streams
from control mode.

Output that repeats exactly across the whole anchor (``yes``) may be placed a period
early, which repeats that period for the new viewer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_agents.backends.tmux.control import resolve
from jupyter_agents.backends.tmux.formats import Commands, Replies, format_of, parse_reply
from jupyter_agents.backends.tmux.history import Geometry, HistoryCache
from jupyter_agents.backends.tmux.snapshot import Snapshot, SnapshotRequest
from jupyter_agents.core.errors import NotFound, OutOfRange

if TYPE_CHECKING:
    from jupyter_agents.backends.tmux.control import TmuxControl
    from jupyter_agents.terminal.transcripts import Transcript

#: a transcript that has not grown for this long holds all tmux read of a quiet pane
QUIET = 0.01
#: the longest a cut waits for output after it, or for the transcript to reach it
SETTLE_LIMIT = 2.0
#: bytes of the pane's output after the cut that locate it in the transcript
ANCHOR = 512
#: a pane tmux read nothing from for this long has all it read in the transcript (25
#: times :data:`QUIET`, which is all the other paths give the writer to land it)
IDLE = 0.25
#: numbers the tmux buffers (and files) of this process's cuts
_CUTS = itertools.count()


@dataclasses.dataclass(frozen=True)
class Placed:
    """The cut is at transcript ``offset``; ``snapshot`` is the pane there (None: the
    session vanished meanwhile, its end follows)."""

    offset: int
    snapshot: Snapshot | None


@dataclasses.dataclass(frozen=True)
class Unplaced:
    """The transcript cannot place the snapshot: ``why`` tmux could not save its
    history (a full disk), or (None) the transcript lacks the output after it (its
    writer drops output), or that output does not tell where it is (a few bytes, the
    same as others near it, for :data:`SETTLE_LIMIT`). The stream then goes on through
    control mode."""

    why: str | None


@dataclasses.dataclass(frozen=True)
class Lost:
    """No answer came: the control client went away (tmux detached it), or the session
    did (its end follows). To be taken again; if it cannot be, ``otherwise``."""

    otherwise: Unplaced | None


@dataclasses.dataclass(frozen=True)
class Changed:
    """The pane changed after all since its older history was kept: to be taken again,
    in full (the kept history is dropped)."""


#: how a cut went
Outcome = Placed | Unplaced | Lost | Changed


class Cut:
    """One snapshot of ``pane`` of session ``session_id`` placed in its
    ``transcript`` (module docstring), through ``control``; ``recent`` history lines
    come with escapes (``TmuxBackend.replay_color_lines``). The older history comes
    from ``history`` while nothing changed, else it is captured and kept there; tmux
    saves captures into ``buffer_dir``. ``stuck()``: the transcript's writer is dropping
    output. While it is taken, the pane's ``%output`` goes to :meth:`on_output`."""

    def __init__(
        self,
        control: TmuxControl,
        transcript: Transcript,
        session_id: str,
        pane: str,
        recent: int,
        history: HistoryCache,
        buffer_dir: Path,
        stuck: Callable[[], bool],
    ) -> None:
        self._control = control
        self._transcript = transcript
        self._session_id = session_id
        self._pane = pane
        self._recent = recent
        self._history = history
        self._buffer_dir = buffer_dir
        self._stuck = stuck
        #: the pane's ``%output`` after the capture (None before it and once it is done)
        self._after: bytearray | None = None
        self._more = asyncio.Event()

    def on_output(self, data: bytes) -> None:
        """``%output`` of the pane: after the capture, the anchor of the cut."""
        if self._after is not None and len(self._after) < ANCHOR:
            self._after += data
            self._more.set()

    async def take(self, sent: Callable[[], None]) -> Outcome:
        """Capture the pane (with the control client to itself), save its history and
        place it in the transcript; ``sent()`` once the capture is on its way (input
        typed from then on is not in it)."""
        async with self._control.cut_lock:
            since = time.time()
            floor = self._transcript.size()  # the cut is at or past it
            known = self._history.get(self._session_id, floor, self._stuck)
            name = f"ja-replay-{os.getpid()}-{next(_CUTS)}"  # tmux's buffers are shared
            old, recent = (None if known else f"{name}-old"), f"{name}-recent"
            request = SnapshotRequest(f"={self._session_id}:", self._recent, (old, recent))
            replies, quiet = await self._capture(request, floor, since, sent)
            after = bytes(self._after or b"")[:ANCHOR]
            self._after = None
        # also when the capture failed: it removes the buffers a partial one left
        saved, error = await self._control.save_buffers(
            [b for b in (old, recent) if b], self._buffer_dir
        )
        if replies is None:
            return Lost(None)
        if saved is None:  # tmux could not save it (a full disk): replies carry it
            unsaved = Unplaced(error or "no answer")
            return unsaved if error else Lost(unsaved)
        if len(after) >= ANCHOR:
            cut = await locate(self._transcript, floor, after)
        elif after:  # a few bytes after it, which do not tell where it is
            cut = quiet
        else:
            cut = quiet if quiet is not None else await settle(self._transcript)
        if cut is None:
            return Unplaced(None)
        snapshot = Snapshot.read(request, replies)
        geometry = None if snapshot is None else Geometry.of(cut, snapshot.state)
        captured = None if old is None else saved[old]
        older = self._history.merge(self._session_id, known, geometry, captured)
        if older is None:
            return Changed()
        return Placed(cut, snapshot and snapshot.with_history(older, saved[recent]))

    async def _capture(
        self, request: SnapshotRequest, floor: int, since: float, sent: Callable[[], None]
    ) -> tuple[Replies | None, int | None]:
        """Attach the control client to the session, turn the pane's output on and
        take ``request`` on one line; collect the pane's output after it
        (:meth:`on_output`) until it anchors the cut, then pause the pane again. The
        replies (None if the line failed before the capture), and the cut if the pane
        was quiet after it (:func:`anchor`), or ``floor`` (the transcript's size at
        ``since``) if tmux had read nothing from it for a while before
        (:func:`idle_before`)."""
        control, pane = self._control, self._pane
        captured: asyncio.Future[Replies] = asyncio.get_running_loop().create_future()

        def done(replies: Replies) -> None:
            if replies["resume"] is not None:  # on: the pane's next %output is after the cut
                self._after = bytearray()
            resolve(captured)(replies)

        control.on_panes.add(pane)
        line = Commands.of(
            activity=f"display-message -p -t '{pane}' '{format_of(WindowActivity)}'",
            switch=f"switch-client -t ={self._session_id}",
            resume=f"refresh-client -A '{pane}:continue'",
        )
        control.ask(line + request.commands(), done)
        sent()
        try:
            replies = await captured
            if self._after is None:
                return None, None
            if idle_before(parse_reply(WindowActivity, replies["activity"]), since):
                self._after = None  # the cut is ``floor``: no anchor is looked for
                return replies, floor
            return replies, await anchor(self._after, self._more, self._transcript, floor)
        finally:
            control.on_panes.discard(pane)
            control.command(f"refresh-client -A '{pane}:pause'")


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


async def anchor(
    after: bytearray, more: asyncio.Event, transcript: Transcript, floor: int
) -> int | None:
    """Wait for the pane's output after a cut's capture, which its stream collects into
    ``after`` (setting ``more`` as it comes), until it anchors the cut (:data:`ANCHOR`
    bytes: None, to :func:`locate` it) or the pane is quiet: no ``%output`` while the
    transcript does not grow either, for :data:`QUIET`. A pane quiet with no output
    after the capture has all it printed in the transcript: its size then is the cut
    (returned). One quiet after a few bytes is cut where :func:`placed` finds them; if
    it cannot tell yet, the wait goes on. A transcript that grows with no ``%output``
    may hold output after the capture whose ``%output`` is late (a loaded machine), so
    that is waited out. None also when :data:`SETTLE_LIMIT` passed first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_LIMIT
    quiet_since = loop.time()
    while len(after) < ANCHOR and loop.time() < deadline:
        more.clear()
        size = transcript.size()
        try:
            await asyncio.wait_for(more.wait(), QUIET)
        except asyncio.TimeoutError:
            if transcript.size() != size:
                quiet_since = loop.time()
            elif not after:
                return size
            else:
                found = placed(transcript, floor, bytes(after), loop.time() - quiet_since)
                if found is not None:
                    return found
        else:
            quiet_since = loop.time()
    return None


def placed(transcript: Transcript, floor: int, after: bytes, quiet: float) -> int | None:
    """Where ``after``, all a pane printed after a cut (fewer than :data:`ANCHOR`
    bytes), starts in its ``transcript``, searched from ``floor`` (its size before the
    cut), the pane and the transcript having been quiet for ``quiet`` seconds: where it
    occurs there once; or else, once ``quiet`` reaches :data:`IDLE` (its writer had that
    long to land all tmux read), where it ends the transcript. None while that cannot be
    told: a few bytes that occur more than once (a line end, in the lines a lagging
    transcript had yet to land at ``floor``) would place the cut at the first of them,
    and the new viewer would get again everything from there.

    Also None when there is no such transcript (any more)."""
    try:
        data, size = transcript.read(floor)
    except (NotFound, OutOfRange):
        return None
    first = data.find(after)
    if first >= 0 and data.find(after, first + 1) < 0:
        return floor + first
    if quiet >= IDLE and floor + len(data) == size and data.endswith(after):
        return size - len(after)
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
