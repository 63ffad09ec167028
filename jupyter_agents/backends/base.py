"""The Backend contract shared by the tmux backend and the pty broker.

A backend owns terminal sessions in a process that is not the Jupyter server, names
each by its session id, keeps a raw transcript of each on disk, and lets any number of
Jupyter server processes stream them. Everything else (the store, reconcile, the
terminals front) talks to this interface only.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import dataclasses
import re
from abc import ABC, ABCMeta, abstractmethod
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from traitlets import Int
from traitlets.config import LoggingConfigurable

from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.terminal.segments import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from jupyter_agents.terminal.state import Followed

#: the key that detaches a terminal attached by :meth:`Backend.debug_attach_command`
#: (Ctrl-]: what telnet uses; tmux's prefix is off on our socket): its byte, and its name
#: for people and for tmux's ``bind-key``
DETACH_KEY, DETACH_KEY_NAME = b"\x1d", "C-]"

#: what a session id looks like everywhere (store, tmux session names, broker frames)
SESSION_ID = re.compile(r"\w{1,128}", re.ASCII)


def check_session_id(session_id: object) -> str:
    """``session_id`` if it is a valid session id, else :class:`InvalidRequest`.

    The one check of session ids: they become tmux target names, file names and broker
    frame fields, so nothing else may ever reach a backend.

    >>> check_session_id("18c2f1a0b3c4d5e6")
    '18c2f1a0b3c4d5e6'
    """
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        shown = str(session_id)[:80]
        raise InvalidRequest(f"invalid session id {shown!r}: use 1-128 letters, digits or _")
    return session_id


@dataclasses.dataclass(frozen=True)
class SpawnRequest:
    """What to start: ``argv`` run in ``cwd`` with exactly ``env``, on a rows x cols pty."""

    session_id: str
    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str]
    rows: int = 24
    cols: int = 80


@dataclasses.dataclass(frozen=True)
class LiveSession:
    """A session the backend holds right now.

    ``dead`` is True when the process ended but the backend still holds its screen and
    exit status (``exit_code``, None while unknown) until :meth:`Backend.remove` is
    called; ``dead_since`` is when it ended (seconds since the epoch), if known.
    """

    session_id: str
    pid: int | None
    dead: bool = False
    exit_code: int | None = None
    dead_since: float | None = None


class StreamListener(Protocol):
    """Receives a stream's events, in the order the backend produced them."""

    def on_output(self, data: str) -> None: ...

    def on_output_lost(self) -> None:
        """Output between what was delivered and what comes next is lost (the stream
        could not follow the session for a while): what was delivered no longer adds up
        to the session's screen. A :meth:`Stream.snapshot` asked from now on has it."""

    def on_exit(self, exit_code: int | None) -> None: ...


class Stream(ABC):
    """A live connection to one session inside this process.

    Output is delivered to the listener in order; :meth:`snapshot` places its callback
    *in that order too*: every byte delivered before the callback runs is contained in
    the snapshot, every byte delivered after it is not. That is what lets a new viewer
    join with nothing lost and nothing doubled.
    """

    @abstractmethod
    def snapshot(self, callback: Callable[[str], None], screen_rows: int | None = None) -> None:
        """Request a replay of the screen and history; ``callback`` gets it in-order.

        The replay is terminal text that, written into a freshly reset terminal of the
        session's size, reproduces the session's screen, history and cursor. With
        ``screen_rows`` (the terminal's height), only the visible screen: no line of
        history is sent (a read-only watcher must not see what scrolled away).
        """

    @abstractmethod
    def write(self, data: str) -> None:
        """Send input to the session, byte for byte (no byte is interpreted)."""

    @abstractmethod
    def resize(self, rows: int, cols: int) -> None:
        """Set the session's terminal size."""

    @abstractmethod
    def close(self) -> None:
        """Stop streaming. The session itself keeps running."""

    async def aclose(self, timeout: float = 2.0) -> None:
        """:meth:`close` and wait until the connection is gone (server shutdown)."""
        self.close()

    def describe(self) -> str:
        """Where the stream stands, in a few words, for a log line when a viewer waits
        too long for its screen; reads state, changes none."""
        return type(self).__name__


R = TypeVar("R")


class ListenedStream(Stream):
    """What every stream does for its listener: output decoded as UTF-8 across chunk
    boundaries, the end reported once (and not after :meth:`close`)."""

    def __init__(self, listener: StreamListener) -> None:
        self._listener = listener
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._closed = False
        self._exit_reported = False

    def _deliver(self, raw: bytes) -> None:
        """Raw output bytes to the listener, as text (UTF-8 split across reads kept)."""
        text = self._decoder.decode(raw)
        if text:
            self._listener.on_output(text)

    def _report_exit(self, exit_code: int | None) -> None:
        if self._exit_reported or self._closed:
            return
        self._exit_reported = True
        self._listener.on_exit(exit_code)

    def describe(self) -> str:
        flags = [f for f, on in (("closed", self._closed), ("ended", self._exit_reported)) if on]
        return ", ".join([type(self).__name__, *flags])


class QueuedStream(ListenedStream, Generic[R]):
    """The skeleton of a stream with its own connection (the broker's): one asyncio
    connection per stream, requests queued until it is up, replies matched to requests
    in order, the end of the connection reported as the stream's end.

    Subclasses implement :meth:`_connect` (open the connection, send the queue with
    :meth:`_flush_outbox`, read until it ends), :meth:`_transmit` and :meth:`_hang_up`.
    """

    def __init__(self, listener: StreamListener) -> None:
        super().__init__(listener)
        #: what each outstanding reply answers, in request order
        self._pending: deque[R] = deque()
        self._outbox: list[bytes] = []
        self._ready = False
        self._task: asyncio.Future[None] | None = None

    def _start(self, connect: Coroutine[Any, Any, None]) -> None:
        self._task = asyncio.ensure_future(self._guard(connect))

    async def _guard(self, connect: Coroutine[Any, Any, None]) -> None:
        try:
            await connect
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # the connection broke: the session is gone or unreachable
        finally:
            self._report_exit(None)

    def _send(self, data: bytes, *replies: R) -> None:
        """Send one request (queued until connected); ``replies`` are what its replies
        answer, in order."""
        if self._closed:
            return
        self._pending.extend(replies)
        if self._ready:
            self._transmit(data)
        else:
            self._outbox.append(data)

    def _flush_outbox(self) -> None:
        """The connection is up: send what was queued, in order."""
        self._ready = True
        for data in self._outbox:
            self._transmit(data)
        self._outbox.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._ready:
            self._hang_up()
        elif self._task is not None:
            self._task.cancel()

    async def aclose(self, timeout: float = 2.0) -> None:
        """:meth:`close`, then wait (bounded) until the connection is really gone, so a
        server stopping leaves no transport open."""
        self.close()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            if not self._task.done():
                self._abort()
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(self._task, timeout)

    @abstractmethod
    def _transmit(self, data: bytes) -> None:
        """Write ``data`` on the open connection."""

    @abstractmethod
    def _hang_up(self) -> None:
        """Start closing the open connection (the reader then ends)."""

    def _abort(self) -> None:
        """Force the connection closed when :meth:`_hang_up` did not end it in time."""
        if self._task is not None:
            self._task.cancel()


class _BackendMeta(ABCMeta, type(LoggingConfigurable)):  # type: ignore[misc]
    """Lets an ABC also be a traitlets configurable."""


class Backend(LoggingConfigurable, metaclass=_BackendMeta):  # type: ignore[misc,metaclass]
    """Owns sessions outside the Jupyter server process (see module docstring)."""

    #: the value stored in a session record's ``backend`` field
    name: str = ""

    transcript_max_bytes = Int(
        DEFAULT_MAX_BYTES,
        help="The most bytes a session's transcript keeps (``AgentsApp.transcript_max_bytes``"
        " hands it over): the oldest of its segments are dropped beyond it.",
    )

    #: what a session's program set (its modes), at a transcript offset, as the session
    #: service follows it (:class:`~jupyter_agents.terminal.state.ModeFollower`): for a
    #: replay that cannot ask its terminal for all of it (tmux keeps no bracketed paste,
    #: focus reporting or cursor shape). Blocking. None: not followed (no service).
    modes_at: Callable[[str, int], Followed] | None = None

    def __init__(self, state_dir: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.state_dir = state_dir
        self.transcript_dir = state_dir / "transcripts"

    def transcript_path(self, session_id: str) -> Path:
        """The directory of a session's raw output log (its segments, see
        :mod:`jupyter_agents.terminal.segments`); it stays complete while no server runs, up to
        :attr:`transcript_max_bytes`."""
        return self.transcript_dir / session_id

    @abstractmethod
    def present(self) -> bool:
        """Whether an owner process of this state dir may be running (its socket
        exists). Reading and judging records never starts one."""

    @abstractmethod
    def start(self) -> None:
        """Make sure the owning process is reachable (start it if needed).

        Raises :class:`~jupyter_agents.core.errors.BackendUnavailable` with the reason if not.
        """

    @abstractmethod
    def spawn(self, request: SpawnRequest) -> LiveSession:
        """Start a session; its transcript is recorded from its first byte (appended to
        the transcript of an earlier run of the same id), in the segments of
        ``segments.segmenting(transcript_max_bytes)``, the oldest dropped beyond the
        number kept; a failed write leaves a gap marker, never blocks the session."""

    @abstractmethod
    def list_live(self) -> list[LiveSession]:
        """Every session the backend holds, ours or not, dead-but-held included."""

    def session_files(self, session_id: str) -> list[Path]:
        """What the backend may keep of a session in the state dir beyond its transcript
        (``jupyter agents prune`` removes these with it); none by default."""
        return []

    @abstractmethod
    def remove(self, session_id: str) -> None:
        """Drop the session from the backend (hangs up whatever still runs in it).

        Callers end the process tree first (procs.terminate_tree); this only releases
        the backend's hold. Unknown ids are ignored.
        """

    @abstractmethod
    def kill_server(self) -> None:
        """Emergency stop: end the owning process and every session in it. Transcripts
        stay on disk; the next :meth:`spawn` starts a new owner."""

    @abstractmethod
    def attach(self, session_id: str, listener: StreamListener) -> Stream:
        """Open a stream to a live session (see :class:`Stream`)."""

    async def detach_streams(self, timeout: float = 2.0) -> None:
        """Server shutdown, once its streams are closed: let go of what they shared
        (the tmux backend's control client), waiting (bounded) until it is gone. Nothing
        by default: a stream's connection is its own."""

    @abstractmethod
    def debug_attach_command(self, session_id: str) -> list[str]:
        """The command a user can run to look at the session directly: it attaches the
        terminal it runs in, and :data:`DETACH_KEY` (which then never reaches the
        session's program) returns from it with exit status 0, the session running."""

    #: whether :meth:`debug_attach_command` discards output written to its terminal
    #: just before it starts (tmux flushes the terminal's output queue as it takes it
    #: over): a line printed before it must be given time to reach the screen
    attach_flushes_output: bool = False

    def monitor(self, on_lost: Callable[[], object]) -> Callable[[], None]:
        """Start checking, from the running event loop, that the owning process lives.

        When it was found dead or hung and a new one was started, ``on_lost`` runs in
        the loop (the caller reconciles: the lost sessions become ``interrupted``).
        Returns a function that stops watching. By default nothing is watched: a
        backend without a heartbeat is checked by every reconcile only.
        """
        return _unmonitored


def _unmonitored() -> None:
    """Stopping a monitor that monitors nothing."""
