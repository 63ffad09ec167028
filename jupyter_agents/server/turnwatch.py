"""TurnWatch: a ``turns`` session event the moment a running agent's conversation file
grows, so a view of its turns (``GET /api/agents/sessions/<id>/turns?after=``) reads
what is new then instead of asking on a timer.

The folders of each running agent session's conversation files (the CLI's own,
:meth:`~jupyter_agents.agents.base.AgentKind.conversation_files`) are watched
(:func:`~jupyter_agents.backends.tmux.tail.subscribe`: inotify on Linux, nothing polls);
a write there publishes one ``turns`` event for the session, at most every
:data:`INTERVAL` seconds (the writes of a burst are one event). Which files a session
has is asked again on each event that may change them (:data:`RECHECK`: a prompt's
hook, a new conversation id, a restore) until one exists: a session's first file
appears with its first prompt. A CLI writes that file a moment after its prompt's hook
ran (the hook's event can be here first), so after an event that says a file is
coming (:data:`SOON`) and none is there yet, the lookup is repeated every
:data:`SETTLE_INTERVAL` seconds for at most :data:`SETTLE_TRIES` times, until one is.
A wake-up is a hint: the view reads from its last event's id, so a spurious one costs
one empty page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from jupyter_agents.acp import journal_folder
from jupyter_agents.backends.tmux.tail import subscribe
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.events import SessionEvent
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService

#: the shortest time between two ``turns`` events of one session (s)
INTERVAL = 0.1
#: the events after which a session's files are looked for again: it started or
#: ended, its conversation changed, its hooks spoke (a prompt makes its first file)
RECHECK = frozenset({"created", "status", "conversation", "attention", "request"})
#: the events after which a session's first file is due (its hooks spoke, it has an id)
SOON = frozenset({"conversation", "attention", "request"})
#: how often, and how many times, a due first file is looked for
SETTLE_INTERVAL = 0.1
SETTLE_TRIES = 50


class TurnWatch:
    """The conversation folders of ``service``'s running agent sessions, watched (module
    docstring). Lives on the IO loop: :meth:`start` there, :meth:`stop` when the server
    stops."""

    def __init__(self, service: SessionService, log: logging.Logger) -> None:
        self._service = service
        self._log = log
        #: session id -> folder -> the function that stops watching it
        self._folders: dict[str, dict[Path, Callable[[], None]]] = {}
        #: sessions with a ``turns`` event due
        self._due: set[str] = set()
        #: sessions whose first file is being looked for again (:data:`SOON`)
        self._settling: set[str] = set()
        self._tasks: set[asyncio.Future[None]] = set()
        self._unsubscribe: Callable[[], None] | None = None
        self._stopped = False

    async def start(self) -> None:
        """Watch every running agent session's files, and follow the service's events."""
        loop = asyncio.get_running_loop()

        def on_event(event: SessionEvent) -> None:  # any thread
            if event.action in RECHECK:
                soon = event.action in SOON
                loop.call_soon_threadsafe(self._check, event.session, soon)

        self._unsubscribe = self._service.events.subscribe(on_event)
        for session in await asyncio.to_thread(self._service.terminals):
            self._check(session)

    def stop(self) -> None:
        self._stopped = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        for folders in self._folders.values():
            for cancel in folders.values():
                cancel()
        self._folders.clear()
        for task in list(self._tasks):
            task.cancel()

    def _check(self, session: Session, soon: bool = False) -> None:
        """Watch the folders of ``session``'s files now (off the loop: it stats them);
        stop watching a session that ended. ``soon``: a first file is due, looked for
        again until it is there when none is yet."""
        if self._stopped:
            return
        kind = self._service.kinds.get(session.kind)
        has_turns = session.mode == "acp" or (kind is not None and kind.keeps_conversations)
        if session.status != "running" or not has_turns:
            for cancel in self._folders.pop(session.id, {}).values():
                cancel()
            return
        self._spawn(self._watch(session, soon))

    async def _watch(self, session: Session, soon: bool = False) -> None:
        def files() -> list[Path]:
            if session.mode == "acp":  # its journal's folder, made as its proxy starts
                return [journal_folder(self._service.state_dir, session.id) / "-"]
            return self._service.kinds[session.kind].conversation_files(session)

        if soon and (session.id in self._settling or self._folders.get(session.id)):
            soon = False  # looked for already, or watched: one lookup
        if soon:
            self._settling.add(session.id)
        try:
            for _ in range(SETTLE_TRIES if soon else 1):
                try:
                    paths = await asyncio.to_thread(files)
                except (AgentsError, OSError) as e:
                    self._log.debug("jupyter_agents: no files of %s: %s", session.id, e)
                    return
                if paths or self._stopped or not soon:
                    break
                await asyncio.sleep(SETTLE_INTERVAL)
        finally:
            if soon:
                self._settling.discard(session.id)
        if soon and paths:  # it may have ended while its file was looked for
            try:
                now = await asyncio.to_thread(self._service.get, session.id)
            except AgentsError:
                return
            if now.status != "running":
                return
        if self._stopped:
            return
        folders = self._folders.setdefault(session.id, {})
        new = False
        for folder in {path.parent for path in paths} - set(folders):
            try:
                folders[folder] = subscribe(folder, lambda _: self._grew(session.id))
                new = True
            except OSError as e:  # gone meanwhile: the next event asks again
                self._log.debug("jupyter_agents: cannot watch %s: %s", folder, e)
        if new:
            self._grew(session.id)  # what it wrote before the watch

    def _grew(self, session_id: str) -> None:
        if session_id in self._due or self._stopped:
            return
        self._due.add(session_id)
        self._spawn(self._publish(session_id))

    async def _publish(self, session_id: str) -> None:
        try:
            await asyncio.sleep(INTERVAL)
            session = await asyncio.to_thread(self._service.get, session_id)
        except AgentsError:
            return
        finally:
            self._due.discard(session_id)
        if not self._stopped:
            self._service.publish("turns", session)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
