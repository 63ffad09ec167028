"""TurnReader: a session's turns as its agent writes them, for a reader outside the
server (``jupyter agents turns -f``, ``%agent watch``), woken by the writes themselves.

It reads the turns a page at a time from a position
(:func:`~jupyter_agents.sessions.turns.session_turns`) and hands each page to a callback;
while the session runs it then waits for a wake-up and reads what is new. Wake-ups come
from inotify (:func:`~jupyter_agents.backends.tmux.tail.subscribe`, as for the server's
turns watch): in the folders of the CLI's conversation files (a record appended) and in
the state dir (a write to the session store: the session ended, its conversation id was
found, its hooks spoke, which is also when its first file appears). A wake-up is a hint:
a spurious one costs one empty page. What no write there announces (a filesystem whose
inotify misses other hosts' writes) is read at the latest every :data:`RECHECK` seconds.

It ends once it has read what the session wrote before it stopped running (its status
in the store: the server, or whoever reconciles, records the end), or when
:meth:`TurnReader.stop` is called. Blocking: :meth:`TurnReader.run` runs an event loop
of its own in the calling thread, so in a kernel (whose main thread runs a loop already)
it runs in a thread of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from jupyter_agents.acp import journal_folder
from jupyter_agents.backends.tmux.tail import release, subscribe
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sessions.turns import (
    MAX_EVENTS,
    START,
    Position,
    TurnPage,
    check_kind,
    session_turns,
    turn_source,
)

#: the longest a running session's new turns wait to be read (s) when no inotify event
#: announces them
RECHECK = 5.0


class TurnReader:
    """Reads session ``session_id``'s turns from ``after`` and calls ``on_page`` (in the
    thread of :meth:`run`) with each page that holds events or starts over (``reset``:
    the CLI rewrote its file; the page holds the conversation from its start). With
    ``follow``, it goes on while the session runs (module docstring).

    :class:`~jupyter_agents.core.errors.NotFound` for an unknown session and
    :class:`~jupyter_agents.core.errors.InvalidRequest` for one whose kind keeps no
    conversation files, at once."""

    def __init__(
        self,
        service: SessionService,
        session_id: str,
        on_page: Callable[[TurnPage], None],
        after: Position = START,
        follow: bool = True,
    ) -> None:
        self._service = service
        self.session = service.get(session_id)
        if self.session.mode != "acp":
            check_kind(self.session, service.kinds)  # (InvalidRequest for a shell)
        self._on_page = on_page
        #: where the next read starts
        self.position = after
        self._follow = follow
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None

    def run(self) -> Session:
        """Read until the session has stopped running and all it wrote was read (or
        once, without ``follow``), or until :meth:`stop`; the session as last read."""
        if not self._follow:
            self._read()
            return self.session
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(self._watch())
        finally:
            with self._lock:
                self._loop = None
            release(loop)
            loop.close()

    def stop(self) -> None:
        """End :meth:`run` soon, from any thread (what it has not read stays unread)."""
        self._stopped.set()
        with self._lock:
            if self._loop is not None:
                with suppress(RuntimeError):  # (closed meanwhile)
                    self._loop.call_soon_threadsafe(self._wake)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped.is_set()

    async def _watch(self) -> Session:
        self._woken = asyncio.Event()
        with self._lock:
            self._loop = asyncio.get_running_loop()
        watched: dict[Path, Callable[[], None]] = {}
        try:
            watched[self._service.state_dir] = subscribe(self._service.state_dir, self._woke)
            while not self._stopped.is_set():
                self._woken.clear()
                self.session = self._service.get(self.session.id)  # before the read: none missed
                running = self.session.status == "running"
                if running:
                    self._watch_folders(watched)
                self._read()
                if not running or self._stopped.is_set():
                    break
                with suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), RECHECK)
        finally:
            for cancel in watched.values():
                cancel()
        return self.session

    def _watch_folders(self, watched: dict[Path, Callable[[], None]]) -> None:
        """Watch the folders of the session's files that are not watched yet (a file
        appears with the first prompt, a new one with a new conversation)."""
        try:
            _source, files = turn_source(self._service, self.session)
        except (AgentsError, OSError):
            return  # asked again at the next wake-up
        paths = [f.path for f in files]
        if self.session.mode == "acp":  # its journal's folder, before its first segment
            paths.append(journal_folder(self._service.state_dir, self.session.id) / "-")
        for folder in {path.parent for path in paths} - set(watched):
            with suppress(OSError):  # gone meanwhile: asked again at the next wake-up
                watched[folder] = subscribe(folder, self._woke)

    def _read(self) -> None:
        """Every page from :attr:`position` on, each given to ``on_page``."""
        while not self._stopped.is_set():
            page = session_turns(self._service, self.session.id, self.position, MAX_EVENTS)
            if page.events or page.reset:
                self._on_page(page)
            self.position = page.next
            if not page.more:
                return

    def _woke(self, _created: set[str]) -> None:
        self._wake()

    def _wake(self) -> None:
        if self._woken is not None:
            self._woken.set()
