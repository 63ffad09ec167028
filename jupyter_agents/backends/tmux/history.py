"""The older history of a session's last replay, kept to be sent again while the session
prints nothing.

A replay's history older than its coloured lines (``TmuxBackend.replay_color_lines``) is
most of what tmux captures: 19,000 plain lines take it 6-7 ms, and saving and reading
them 3-4 ms more, for each viewer that connects. Tabs reconnect in bursts (a page
reload, a restarted server's tabs, a second tab on the same terminal), and a terminal
that printed nothing in between has the same history: a cut then captures only its
coloured lines and screen, and takes the older lines from here.

The same means: nothing was written to the session's transcript since (the cut is at
the same offset, and no write was lost there: a full disk), and the pane has the same
size and history length (a resize reflows tmux's history, ``clear-history`` empties it,
with no output). A cut that finds otherwise drops the entry and is taken again in full.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import NamedTuple

from jupyter_agents.backends.tmux.snapshot import PaneState

#: the most text kept for all sessions together (the oldest entries go first)
MAX_CHARS = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What a cut reads of its pane that must not have changed: the transcript offset it
    is placed at, its history length, and its size."""

    offset: int
    history_size: int
    width: int
    height: int

    @classmethod
    def of(cls, offset: int, state: PaneState) -> Geometry:
        """The geometry of a snapshot of a pane in ``state`` placed at ``offset``.

        >>> Geometry.of(7, PaneState(history_size=20000, pane_height=40, pane_width=120))
        Geometry(offset=7, history_size=20000, width=120, height=40)
        """
        return cls(offset, state.history_size, state.pane_width, state.pane_height)


class Kept(NamedTuple):
    """The older history of a session's last cut, and the geometry it was captured at."""

    geometry: Geometry
    text: str


class HistoryCache:
    """Older history text by session id, with the geometry it was captured at."""

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._entries: dict[str, Kept] = {}
        self._chars = 0
        self._lock = threading.Lock()  # a session's removal runs in a worker thread

    def get(self, session_id: str, offset: int, stuck: Callable[[], bool]) -> Kept | None:
        """The entry of ``session_id`` if it was captured at transcript ``offset`` (the
        transcript's size now: nothing was printed since), unless the transcript is
        ``stuck()`` (its writer drops output: a size that did not change proves nothing;
        asked only then); a cut then compares its own geometry with the entry's
        (:meth:`merge`)."""
        with self._lock:
            entry = self._entries.get(session_id)
        if entry is None or entry.geometry.offset != offset or stuck():
            return None
        return entry

    def put(self, session_id: str, geometry: Geometry, text: str) -> None:
        """Keep ``text``, captured at ``geometry``, dropping the oldest entries past the
        bound (a text over it alone is not kept)."""
        with self._lock:
            self._pop(session_id)
            if len(text) > self._max_chars:
                return
            self._entries[session_id] = Kept(geometry, text)
            self._chars += len(text)
            while self._chars > self._max_chars:
                self._pop(next(iter(self._entries)))

    def merge(
        self,
        session_id: str,
        known: Kept | None,
        geometry: Geometry | None,
        captured: str | None,
    ) -> str | None:
        """The older history of a cut: the ``known`` one (:meth:`get`) if the cut's
        ``geometry`` is its own, else None (the entry is dropped: the cut is to be taken
        again in full); without one, the history the cut ``captured`` (``""`` if none),
        kept for the next cut."""
        if known is not None:
            if geometry != known.geometry:
                self.drop(session_id)
                return None
            return known.text
        if geometry is not None and captured:
            self.put(session_id, geometry, captured)
        return captured or ""

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._pop(session_id)

    def _pop(self, session_id: str) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self._chars -= len(entry.text)
