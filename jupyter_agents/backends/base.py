"""The Backend contract shared by the tmux backend and the pty broker.

A backend owns terminal sessions in a process that is not the Jupyter server, names
each by its session id, keeps a raw transcript of each on disk, and lets any number of
Jupyter server processes stream them. Everything else (the store, reconcile, the
terminals front) talks to this interface only.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from traitlets.config import LoggingConfigurable


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

    def on_exit(self, exit_code: int | None) -> None: ...


class Stream(ABC):
    """A live connection to one session inside this process.

    Output is delivered to the listener in order; :meth:`snapshot` places its callback
    *in that order too*: every byte delivered before the callback runs is contained in
    the snapshot, every byte delivered after it is not. That is what lets a new viewer
    join with nothing lost and nothing doubled.
    """

    @abstractmethod
    def snapshot(self, callback: Callable[[str], None]) -> None:
        """Request a replay of the screen and history; ``callback`` gets it in-order.

        The replay is terminal text that, written into a freshly reset terminal of the
        session's size, reproduces the session's screen, history and cursor.
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


class _BackendMeta(ABCMeta, type(LoggingConfigurable)):  # type: ignore[misc]
    """Lets an ABC also be a traitlets configurable."""


class Backend(LoggingConfigurable, metaclass=_BackendMeta):  # type: ignore[misc,metaclass]
    """Owns sessions outside the Jupyter server process (see module docstring)."""

    #: the value stored in a session record's ``backend`` field
    name: str = ""

    def __init__(self, state_dir: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.state_dir = state_dir
        self.transcript_dir = state_dir / "transcripts"

    def transcript_path(self, session_id: str) -> Path:
        """The raw output log of a session; it stays complete while no server runs."""
        return self.transcript_dir / f"{session_id}.log"

    @abstractmethod
    def start(self) -> None:
        """Make sure the owning process is reachable (start it if needed).

        Raises :class:`~jupyter_agents.errors.BackendUnavailable` with the reason if not.
        """

    @abstractmethod
    def spawn(self, request: SpawnRequest) -> LiveSession:
        """Start a session; its transcript is recorded from its first byte."""

    @abstractmethod
    def list_live(self) -> list[LiveSession]:
        """Every session the backend holds, ours or not, dead-but-held included."""

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

    @abstractmethod
    def debug_attach_command(self, session_id: str) -> list[str]:
        """The command a user can run to look at the session directly."""

    def watch(self, on_lost: Callable[[], object]) -> Callable[[], None]:
        """Start checking, from the running event loop, that the owning process lives.

        When it was found dead or hung and a new one was started, ``on_lost`` runs in
        the loop (the caller reconciles: the lost sessions become ``interrupted``).
        Returns a function that stops watching. By default nothing is watched: a
        backend without a heartbeat is checked by every reconcile only.
        """
        return _unwatched


def _unwatched() -> None:
    """Stopping a watch that watches nothing."""
