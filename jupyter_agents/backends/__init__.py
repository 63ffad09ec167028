"""Terminal backends: processes that own the ptys so they outlive the Jupyter server.

:class:`Backends` holds the backends of one state dir by name. Every session record
names the backend that owns it, and only that backend ever judges or touches it, so a
state dir used with tmux one day and the broker the next keeps both working.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets.utils.importstring import import_item

from jupyter_agents.backends.base import (
    Backend,
    LiveSession,
    SpawnRequest,
    Stream,
    StreamListener,
    check_session_id,
)
from jupyter_agents.core.errors import BackendUnavailable

if TYPE_CHECKING:
    from jupyter_agents.terminal.state import Followed

__all__ = [
    "Backend",
    "Backends",
    "LiveSession",
    "SpawnRequest",
    "Stream",
    "StreamListener",
    "check_session_id",
]

#: the built-in backends, by the name their records carry (imported when first used)
BUILTIN = {
    "tmux": "jupyter_agents.backends.tmux.TmuxBackend",
    "broker": "jupyter_agents.backends.broker.BrokerBackend",
}


class Backends:
    """The backends of one state dir: the one new sessions go to (``choice``: ``auto``,
    a built-in name or a Backend class) and every other one, opened on first use.

    Opening a backend never starts its owner process; :meth:`default` does (a spawn
    needs it), reading and judging records does not.
    """

    def __init__(self, state_dir: Path, choice: str | type[Backend], **traits: Any) -> None:
        self.state_dir = state_dir
        self.choice = choice
        self._traits = traits
        self._classes: dict[str, type[Backend]] = {}
        if isinstance(choice, type):
            self._classes[choice.name] = choice
        self._open: dict[str, Backend] = {}
        self._default: Backend | None = None
        self._lock = threading.Lock()
        self._modes_at: Callable[[str, int], Followed] | None = None

    def follow_modes(self, modes_at: Callable[[str, int], Followed]) -> None:
        """Give every backend, opened or to be, its :attr:`Backend.modes_at`."""
        with self._lock:
            self._modes_at = modes_at
            for backend in self._open.values():
                backend.modes_at = modes_at

    def names(self) -> list[str]:
        """Every backend name known here (built-ins and the configured class)."""
        return sorted({*BUILTIN, *self._classes})

    def get(self, name: str) -> Backend:
        """The backend called ``name`` (not started). :class:`BackendUnavailable` for a
        name no configured backend has (e.g. a third backend that was uninstalled)."""
        with self._lock:
            if name not in self._open:
                cls = self._classes.get(name)
                if cls is None:
                    if name not in BUILTIN:
                        raise BackendUnavailable(f"no backend called {name!r} is configured")
                    cls = import_item(BUILTIN[name])
                self._open[name] = cls(self.state_dir, **self._traits)
                self._open[name].modes_at = self._modes_at
            return self._open[name]

    def opened(self) -> list[Backend]:
        """The backends opened so far (by :meth:`get`)."""
        with self._lock:
            return list(self._open.values())

    def present(self) -> list[Backend]:
        """The backends whose owner process may be running in this state dir."""
        return [b for b in (self.get(n) for n in self.names()) if b.present()]

    def default(self) -> Backend:
        """The backend of new sessions, started. ``auto`` is tmux when a usable one is
        on PATH, else the broker. :class:`BackendUnavailable` if it cannot start."""
        if self._default is not None:
            return self._default
        log = self._traits.get("log")
        if self.choice in ("auto", "tmux"):
            tmux = self.get("tmux")
            try:
                tmux.start()
                self._default = tmux
            except BackendUnavailable as e:
                if self.choice == "tmux":
                    raise
                if log is not None:
                    log.info("jupyter_agents: backend auto: %s; using the pty broker", e)
        if self._default is None:
            backend = self.get(self.choice.name if isinstance(self.choice, type) else "broker")
            backend.start()
            self._default = backend
        return self._default
