"""What each session's program has set (its modes and title,
:class:`~jupyter_agents.terminal.vt.TerminalModes`), followed from its transcript, so that it is
known when the bytes that set it are long gone: a TUI sets its modes once at start,
and transcripts drop their oldest segments.

:class:`ModeFollower` keeps, per session, the modes at a transcript offset and moves
that point forward over the output written since (each byte read once). The point is
kept in the session store (``modes``), so a restarted server starts from it rather
than from the first kept byte. What it cannot know: output written and dropped while
no server followed it (more than ``transcript_max_bytes`` while the server was down,
or within one refresh); the tmux replay then still has what tmux itself reports.
Blocking (reads files): call it from a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from typing import Any

from jupyter_agents.core.errors import NotFound, OutOfRange
from jupyter_agents.terminal.transcripts import MAX_CHUNK, Transcript
from jupyter_agents.terminal.vt import TerminalModes

#: the most a single call reads of one transcript: older output is skipped (the modes
#: it set are then unknown until they are set again)
MAX_FOLLOW = 64 << 20
#: the longest escape sequence the end of a read may split (read again next time)
_CARRY = 512


@dataclasses.dataclass
class Followed:
    """The modes in force at transcript offset ``offset`` of a session; ``exact``: every
    byte before it was followed (none was dropped or skipped unread), so ``modes`` is
    what a terminal that showed all of it has."""

    offset: int
    modes: TerminalModes
    exact: bool = True

    def dump(self) -> str:
        """As kept in the store (JSON).

        >>> Followed.load(Followed(7, TerminalModes(private={2004: True})).dump())
        Followed(offset=7, modes=TerminalModes(private={2004: True}, ...), exact=True)
        """
        state = dataclasses.asdict(self.modes)
        state["private"] = {str(k): v for k, v in self.modes.private.items()}
        return json.dumps({"offset": self.offset, "modes": state, "exact": self.exact})

    @classmethod
    def load(cls, text: str | None) -> Followed | None:
        """A kept point (:meth:`dump`); None for none, or one of another shape."""
        if not text:
            return None
        try:
            data: Any = json.loads(text)
            state = dict(data["modes"])
            state["private"] = {int(k): bool(v) for k, v in state["private"].items()}
            if isinstance(state.get("scroll_region"), list):
                state["scroll_region"] = tuple(state["scroll_region"])
            return cls(int(data["offset"]), TerminalModes(**state), bool(data.get("exact")))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class ModeFollower:
    """The modes of sessions at points of their transcripts (module docstring)."""

    def __init__(self) -> None:
        self._points: dict[str, Followed] = {}
        self._lock = threading.Lock()

    def at(
        self, session_id: str, transcript: Transcript, kept: str | None, end: int | None = None
    ) -> Followed:
        """The modes at offset ``end`` (None: the transcript's end), from the point reached
        so far (else ``kept``, the store's :meth:`Followed.dump`, else the first kept
        byte). An ``end`` before the point reached gives that point: a replay taken at
        ``end`` is followed by every byte after it, which sets anything that changed
        since again, so the state the terminal ends in is the same. One call at a time."""
        with self._lock:
            point = (
                self._points.get(session_id) or Followed.load(kept) or Followed(0, TerminalModes())
            )
            with contextlib.suppress(NotFound):  # no transcript (yet): nothing set
                point = self._advance(point, transcript, end)
            self._points[session_id] = point
            modes = dataclasses.replace(point.modes, private=dict(point.modes.private))
            return Followed(point.offset, modes, point.exact)

    @staticmethod
    def _advance(point: Followed, transcript: Transcript, end: int | None) -> Followed:
        stop = transcript.size() if end is None else end
        start = max(point.offset, transcript.start(), stop - MAX_FOLLOW)
        exact = point.exact and start == point.offset
        pos = start
        while pos < stop:
            try:
                data, _ = transcript.read(pos, min(MAX_CHUNK, stop - pos))
            except OutOfRange:  # dropped meanwhile
                pos, exact = max(pos, transcript.start()), False
                continue
            if not data:
                break
            # a sequence the end of a read may split is read again next time, whole
            # (feeding a complete one twice sets the same state)
            cut = data.rfind(b"\x1b", max(0, len(data) - _CARRY))
            data = data[:cut] if cut > 0 else data
            point.modes.feed(data)
            pos += len(data)
        return Followed(max(pos, point.offset), point.modes, exact and point.exact)

    def forget(self, session_id: str) -> None:
        """Drop a session's point (it ended, or was restored into a new process)."""
        with self._lock:
            self._points.pop(session_id, None)
