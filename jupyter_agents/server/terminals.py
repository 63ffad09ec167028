"""The terminal manager code written for stock terminals finds.

``web_app.settings["terminal_manager"]`` holds a :class:`TerminalManager`: the public
methods and traits of jupyter_server_terminals' ``TerminalManager`` (``create``,
``get``, ``list``, ``get_terminal_model``, ``terminate``, ``terminate_all``,
``terminals``, ``cull_inactive_timeout``, ``cull_interval``) with the same return
shapes, over the session service. Configure it like the stock one:
``c.TerminalManager.cull_inactive_timeout = 3600`` (or under ``c.ServerApp``).
Differences: terminals are sessions that outlive the server; a culled terminal is
recorded ``killed`` with the reason.

Like the stock one it keeps jupyter_server's prometheus gauge
``terminal_currently_running_total`` (``TERMINAL_CURRENTLY_RUNNING_TOTAL``) at the number
of running terminals, so dashboards built on stock keep working: stock counts what it
creates and terminates, ours follows every session's status (:meth:`TerminalManager.follow`),
so terminals that exit, and those the CLI or another server starts, count too.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import threading
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from jupyter_server.prometheus import metrics
from traitlets import Integer
from traitlets.config import LoggingConfigurable

from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError, http_error
from jupyter_agents.core.events import SessionEvent
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService

MODEL = dict[str, Any]
#: the gauge stock terminals keep (jupyter_server_terminals' terminalmanager.py)
RUNNING_TOTAL = metrics.TERMINAL_CURRENTLY_RUNNING_TOTAL

#: how many restores on open :attr:`TerminalManager.restored_on_open` keeps
RESTORED_KEPT = 256


def terminal_model(session: Session) -> MODEL:
    """The stock terminals REST model: ``{"name", "last_activity"}``."""
    return {"name": session.name, "last_activity": session.last_activity}


def idle_seconds(session: Session, output_at: datetime | None, now: datetime) -> float:
    """Seconds since the session last showed activity: its recorded ``last_activity``
    (input, or output while streamed) or ``output_at`` (its transcript's last write,
    which tmux and the broker keep up to date while nobody watches), whichever is later.

    >>> s = Session("a", "1", "running", "tmux", last_activity="2026-11-30T10:00:00Z")
    >>> idle_seconds(s, None, datetime(2026, 11, 30, 10, 1, tzinfo=timezone.utc))
    60.0
    """
    last = clock.parse(session.last_activity)
    if output_at is not None and output_at > last:
        last = output_at
    return (now - last).total_seconds()


class TerminalManager(LoggingConfigurable):
    """jupyter_server_terminals' manager API over a :class:`SessionService` (module
    docstring). Unknown names raise tornado's ``HTTPError(404)``, like the stock one."""

    cull_inactive_timeout = Integer(
        0,
        config=True,
        help="Timeout (in seconds) in which a terminal has been inactive and ready to be "
        "culled. Values of 0 or lower disable culling.",
    )
    cull_interval_default = 300
    cull_interval = Integer(
        cull_interval_default,
        config=True,
        help="The interval (in seconds) on which to check for terminals exceeding the "
        "inactive timeout value.",
    )

    def __init__(
        self, service: SessionService, restore_on_open: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.service = service
        self.restore_on_open = restore_on_open
        self._culler: asyncio.Task[None] | None = None
        #: the running sessions' ids, as :data:`RUNNING_TOTAL` counts them
        self._running: set[str] = set()
        self._counting = threading.Lock()
        #: the sessions this server run restored in place because a tab was opened on
        #: their name (JupyterLab reopening its tabs): oldest first, the last
        #: :data:`RESTORED_KEPT` (the front end's banner says what happened to each)
        self._restored_on_open: collections.OrderedDict[str, None] = collections.OrderedDict()

    # -- the running total ------------------------------------------------------------

    def count(self, running: Iterable[Session]) -> None:
        """Set :data:`RUNNING_TOTAL` to the sessions ``running`` (a listing)."""
        with self._counting:
            self._running = {s.id for s in running if s.status == "running"}
            RUNNING_TOTAL.set(len(self._running))

    def follow(self, event: SessionEvent) -> None:
        """Keep :data:`RUNNING_TOTAL` with a session's status (subscribe it to the
        service's events: any thread)."""
        with self._counting:
            if event.session.status == "running":
                self._running.add(event.session.id)
            else:
                self._running.discard(event.session.id)
            RUNNING_TOTAL.set(len(self._running))

    def _session(self, name: str) -> Session:
        try:
            return self.service.terminal(name)
        except AgentsError as e:
            raise http_error(e) from e

    @property
    def terminals(self) -> dict[str, MODEL]:
        """The running terminals by name, as models."""
        return {s.name: terminal_model(s) for s in self.service.terminals()}

    def create(self, **kwargs: Any) -> MODEL:
        """Start a terminal (``name``, ``cwd`` as the REST API takes them); its model.

        A ``name`` that is running returns that terminal. With ``restore_on_open``, a
        ``name`` whose latest session was ``interrupted`` (JupyterLab reopening its tabs
        after a reboot) restores that session in place: the old tail, the marker line,
        an agent resumed with its conversation id. Blocking: call it in a thread."""
        name = kwargs.get("name")
        try:
            if self.restore_on_open and isinstance(name, str):
                lost = self.service.interrupted_terminal(name)
                if lost is not None:
                    restored = self.service.restorer.restore(lost.id)
                    self._note_restored(restored.id)
                    # a resume that fails at once is recorded (interrupted, with why)
                    threading.Thread(
                        target=self._check_resumed, args=(restored,), daemon=True
                    ).start()
                    return terminal_model(restored)
            session, _ = self.service.create(name=name, cwd=kwargs.get("cwd"))
        except AgentsError as e:
            raise http_error(e) from e
        return terminal_model(session)

    def _note_restored(self, session_id: str) -> None:
        with self._counting:
            self._restored_on_open[session_id] = None
            self._restored_on_open.move_to_end(session_id)
            while len(self._restored_on_open) > RESTORED_KEPT:
                self._restored_on_open.popitem(last=False)

    @property
    def restored_on_open(self) -> builtins.list[str]:
        """The ids of the sessions this server run restored in place when a tab opened
        on their name (whatever interrupted them: a reboot, or a backend lost while the
        previous server ran), oldest first."""
        with self._counting:
            return builtins.list(self._restored_on_open)

    def _check_resumed(self, session: Session) -> None:
        try:
            self.service.restorer.check_resumed(session)
        except AgentsError as e:
            self.log.warning("jupyter_agents: watching restored session %s: %s", session.id, e)

    def get(self, name: str) -> MODEL:
        """The model of terminal ``name``."""
        return self.get_terminal_model(name)

    def get_terminal_model(self, name: str) -> MODEL:
        """The model of terminal ``name`` (404 if there is none)."""
        return terminal_model(self._session(name))

    def list(self) -> builtins.list[MODEL]:
        """The running terminals' models, as the store holds them (a session that ended
        drops out once its end is recorded: at once for a process the server watches)."""
        try:
            running = self.service.terminals()
        except AgentsError as e:
            raise http_error(e) from e
        self.count(running)  # as stock does on every listing
        return [terminal_model(s) for s in running]

    async def terminate(self, name: str, force: bool = False) -> None:
        """End terminal ``name``: its process tree, then its backend hold."""
        session = await asyncio.to_thread(self._session, name)
        try:
            await asyncio.to_thread(self.service.terminate, session.id)
        except AgentsError as e:
            raise http_error(e) from e

    async def terminate_all(self) -> None:
        """End every running terminal."""
        for session in await asyncio.to_thread(self.service.terminals):
            try:
                await asyncio.to_thread(self.service.terminate, session.id)
            except AgentsError as e:
                self.log.warning("jupyter_agents: %s", e)

    # -- culling -----------------------------------------------------------------------

    def start_culling(self) -> None:
        """Cull idle terminals every ``cull_interval`` s when ``cull_inactive_timeout``
        is positive (call from the running loop)."""
        if self.cull_inactive_timeout <= 0 or self._culler is not None:
            return
        if self.cull_interval <= 0:
            self.log.warning(
                "Invalid value for 'cull_interval' detected (%s) - using default value (%s).",
                self.cull_interval,
                self.cull_interval_default,
            )
            self.cull_interval = self.cull_interval_default
        self.log.info(
            "Culling terminals with inactivity > %s seconds at %s second intervals ...",
            self.cull_inactive_timeout,
            self.cull_interval,
        )
        self._culler = asyncio.ensure_future(self._cull_loop())

    def stop_culling(self) -> None:
        if self._culler is not None:
            self._culler.cancel()
            self._culler = None

    async def _cull_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cull_interval)
            try:
                await asyncio.to_thread(self.cull_terminals)
            except AgentsError as e:
                self.log.warning("jupyter_agents: culling failed: %s", e)

    def cull_terminals(self) -> builtins.list[str]:
        """End the terminals idle longer than ``cull_inactive_timeout``; their names.
        Blocking."""
        culled = []
        now = datetime.now(timezone.utc)
        for session in self.service.terminals():
            output_at = self.service.transcript(session.id).ended_at()
            idle = idle_seconds(session, output_at, now)
            if idle <= self.cull_inactive_timeout:
                continue
            self.log.warning(
                "Culling terminal '%s' due to %s seconds of inactivity.", session.name, int(idle)
            )
            try:
                self.service.terminate(session.id, reason=f"culled after {int(idle)} s idle")
                culled.append(session.name)
            except AgentsError as e:  # ended meanwhile
                self.log.info("jupyter_agents: not culled: %s", e)
        return culled
