"""ExitWatch: a session that ends while nobody views it is found when it ends, not on
the next listing or refresh.

A viewed session's end comes from its stream (the backend tells it). One nobody views
would otherwise wait for the next :meth:`~jupyter_agents.sessions.refresh.Refresh.tick`.
So the server asks the kernel to say when each running session's process ends
(:func:`~jupyter_agents.core.procs.on_exit`: a pidfd, nothing polls) and then reconciles
(:meth:`~jupyter_agents.sessions.service.SessionService.reconcile`), which records the
end and publishes it. A backend may learn of the end a little after the kernel (tmux
handles its SIGCHLD on its next loop), so the reconcile is repeated, at most
:data:`SETTLE_TRIES` times, until the record is no longer running; one reconcile
serves every session whose process ended meanwhile. The watch follows the service's
events: a session created, restored or adopted is watched from its
``created``/``status`` event, one that ended is not any more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.events import SessionEvent
from jupyter_agents.core.procs import ProcessIdentity, matches, on_exit
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService

#: how many times, and how often, an ended process's session is reconciled until its
#: backend has noticed the end
SETTLE_TRIES = 40
SETTLE_INTERVAL = 0.05


class ExitWatch:
    """The running sessions of ``service``, each watched for its process's end (module
    docstring). Lives on the IO loop: :meth:`start` there, :meth:`stop` when the server
    stops."""

    def __init__(self, service: SessionService, log: logging.Logger) -> None:
        self._service = service
        self._log = log
        #: session id -> (the pid watched, the function that stops watching it)
        self._watching: dict[str, tuple[int, Callable[[], None]]] = {}
        self._tasks: set[asyncio.Future[None]] = set()
        #: sessions whose process ended, until their end is recorded: (pid, tries)
        self._ending: dict[str, tuple[int, int]] = {}
        #: a :meth:`_settle` runs
        self._settling = False
        self._unsubscribe: Callable[[], None] | None = None
        self._stopped = False

    async def start(self) -> None:
        """Watch every running session, and from now on each one the service's events
        say started."""
        loop = asyncio.get_running_loop()

        def on_event(event: SessionEvent) -> None:  # any thread
            loop.call_soon_threadsafe(self._follow, event.session)

        self._unsubscribe = self._service.events.subscribe(on_event)
        for session in await asyncio.to_thread(self._service.terminals):
            self._follow(session)

    def stop(self) -> None:
        """Stop watching; reconciles under way are cancelled."""
        self._stopped = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        for _, stop in self._watching.values():
            stop()
        self._watching.clear()
        for task in list(self._tasks):
            task.cancel()

    def _follow(self, session: Session) -> None:
        """Watch ``session``'s process if it runs one not watched yet; stop watching
        one that ended."""
        if self._stopped:
            return
        watched = self._watching.get(session.id)
        if session.status != "running" or session.pid is None:
            if watched is not None and session.status != "running":
                self._watching.pop(session.id)[1]()
            return
        if watched is not None and watched[0] == session.pid:
            return
        if watched is not None:
            watched[1]()
        pid = session.pid
        self._watching[session.id] = (pid, on_exit(pid, lambda: self._ended(session.id, pid)))
        if session.pid_created is not None:  # the pid may name another process by now
            identity = ProcessIdentity(pid, session.pid_created)
            self._spawn(self._check(session.id, identity))

    async def _check(self, session_id: str, identity: ProcessIdentity) -> None:
        if await asyncio.to_thread(matches, identity) is None:
            self._ended(session_id, identity.pid)

    def _ended(self, session_id: str, pid: int) -> None:
        """Process ``pid`` of session ``session_id`` ended (or is not the session's)."""
        watched = self._watching.get(session_id)
        if watched is None or watched[0] != pid or self._stopped:
            return
        self._watching.pop(session_id)[1]()
        self._ending[session_id] = (pid, 0)
        if not self._settling:
            self._settling = True
            self._spawn(self._settle())

    async def _settle(self) -> None:
        """Reconcile until the backend has recorded the end of each ended process's
        session (or the session runs another process, which is then watched), each at
        most :data:`SETTLE_TRIES` times. One reconcile serves every session whose
        process ended meanwhile (a backend killed ends them all at once)."""
        try:
            while self._ending:
                try:
                    await asyncio.to_thread(self._service.reconcile)
                    ids = list(self._ending)
                    found = await asyncio.to_thread(self._records, set(ids))
                except AgentsError as e:
                    self._log.debug("jupyter_agents: reconcile after an exit failed: %s", e)
                    self._ending.clear()  # (the refresh tick's reconcile finds them)
                    return
                except Exception:
                    self._log.exception("jupyter_agents: reconcile after an exit failed")
                    self._ending.clear()
                    return
                for session_id in ids:
                    pid, tries = self._ending.pop(session_id)
                    session = found.get(session_id)
                    if session is None:
                        continue
                    if session.status != "running" or session.pid != pid:
                        self._follow(session)
                    elif tries + 1 < SETTLE_TRIES and session_id not in self._ending:
                        self._ending[session_id] = (pid, tries + 1)
                if self._ending:
                    await asyncio.sleep(SETTLE_INTERVAL)
        finally:
            self._settling = False

    def _records(self, ids: set[str]) -> dict[str, Session]:
        """The records of ``ids``, by id (one listing). Blocking."""
        return {s.id: s for s in self._service.list() if s.id in ids}

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
