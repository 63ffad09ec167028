"""Server activity for idle culling: what of ours keeps this Jupyter server from looking idle.

jupyter_server's ``last_activity()`` (``/api/status``'s ``last_activity``, what
jupyterhub-singleuser reports to the hub, where jupyterhub-idle-culler acts on it) is the
latest of ``settings["*_last_activity"]`` and ``settings["last_activity_times"]``; its
``ServerApp.shutdown_no_activity_timeout`` also asks every extension's
``current_activity()`` and never shuts down while one reports something. Ours:

- **terminal input and output** set ``settings["terminal_last_activity"]``, the key stock
  terminals set: a viewer's frames and the output sent to viewers, noted at most every
  ``AgentsApp.activity_interval`` per session (:meth:`ServerActivity.terminal`, called by
  :class:`~jupyter_agents.server.streams.Streams`). Output nobody watches does not count (nor does
  it in stock, where only websocket messages do).
- **an agent at work**: a running session whose attention is ``working`` keeps the server
  active until ``AgentsApp.agent_keepalive`` seconds after the latest of the last human
  input into its terminal (a viewer's ``stdin`` frame), the start of its process and the
  start of this server (:func:`keepalive_until`). :meth:`ServerActivity.refresh`, every
  ``activity_interval``, moves ``settings["last_activity_times"]["jupyter_agents"]`` up to
  the latest such time that has come, and ``current_activity()`` reports these sessions.

This is the *server's* activity. A *session's* ``last_activity`` (``list``, the panel)
is another thing: when its program last printed, watched or not
(:meth:`~jupyter_agents.sessions.refresh.Refresh.follow_activity`, from its transcript),
or when a viewer last typed or was sent output.

A waiting agent, an idle shell, or a session merely running counts for nothing: stock
reports every existing terminal as current activity, but ours outlive the server, so an
idle shell would keep it alive forever. So a server is culled mid-task only after
``agent_keepalive`` without a person's input, and never kept alive by an agent forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.records import Session

if TYPE_CHECKING:
    from jupyter_agents.sessions.service import SessionService

#: our key in ``settings["last_activity_times"]`` (the extension's name)
KEY = "jupyter_agents"
#: the settings key stock terminals set on every websocket message
TERMINAL_KEY = "terminal_last_activity"


def keepalive_until(
    session: Session, last_input: float | None, started: float, keepalive: float
) -> float | None:
    """Until when (epoch seconds) ``session`` keeps the server active; None if it does not.

    Only a running session whose attention is ``working`` does, and only up to
    ``keepalive`` seconds (0: never) after the latest of ``last_input`` (the last human
    input into its terminal, None if none was seen), the start of its process (else its
    record's creation) and ``started`` (this server's start).

    >>> s = Session("a", "1", "running", "tmux", attention="working", pid_created=100.0)
    >>> keepalive_until(s, None, 50.0, 60.0), keepalive_until(s, 130.0, 50.0, 60.0)
    (160.0, 190.0)
    >>> s.attention = "waiting"
    >>> keepalive_until(s, 130.0, 50.0, 60.0) is None
    True
    """
    if keepalive <= 0 or session.status != "running" or session.attention != "working":
        return None
    began = session.pid_created if session.pid_created is not None else clock.epoch(session.created)
    return max(began, started, last_input if last_input is not None else began) + keepalive


class ServerActivity:
    """Our part of the server's activity (module docstring), kept in the web app's
    ``settings``. Call from the IO loop; nothing here blocks but :meth:`run`'s store read,
    which runs in a worker thread."""

    def __init__(
        self,
        settings: MutableMapping[str, Any],
        keepalive: float,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.keepalive = keepalive
        self.log = log or logging.getLogger("jupyter_agents")
        self.clock = clock
        self.started = clock()
        #: the last human input into each running session's terminal (epoch seconds)
        self._inputs: dict[str, float] = {}
        #: the sessions that kept the server active at the last :meth:`refresh`
        self.keepers: list[Session] = []

    def terminal(self) -> None:
        """Terminal input or output happened now (callers throttle it)."""
        self.settings[TERMINAL_KEY] = clock.now()

    def human_input(self, session_id: str) -> None:
        """A person typed into ``session_id``'s terminal now (one dict write: every frame)."""
        self._inputs[session_id] = self.clock()

    def refresh(self, running: Iterable[Session]) -> list[Session]:
        """Apply :func:`keepalive_until` to the ``running`` sessions: the server's activity
        moves up to the latest keep-alive time that has come (never back); returns (and
        keeps in :attr:`keepers`) the sessions keeping it active now. Inputs of sessions
        not in ``running`` are forgotten."""
        now = self.clock()
        sessions = list(running)
        ids = {s.id for s in sessions}
        for gone in self._inputs.keys() - ids:
            del self._inputs[gone]
        until = {
            s.id: keepalive_until(s, self._inputs.get(s.id), self.started, self.keepalive)
            for s in sessions
        }
        self.keepers = [s for s in sessions if (until[s.id] or 0.0) > now]
        reached = [min(now, u) for u in until.values() if u is not None]
        if reached:
            latest = clock.from_epoch(max(reached))
            times = self.settings.setdefault("last_activity_times", {})
            if times.get(KEY) is None or times[KEY] < latest:
                times[KEY] = latest
        return self.keepers

    def current_activity(self) -> dict[str, Any] | None:
        """What ``ExtensionApp.current_activity`` reports: the models of the sessions that
        keep the server active (by terminal name), None when none does."""
        return {s.name: s.to_model() for s in self.keepers} or None

    async def run(self, running: Callable[[], list[Session]], interval: float) -> None:
        """:meth:`refresh` with ``running()`` (blocking: in a worker thread) every
        ``interval`` seconds, until cancelled."""
        while True:
            try:
                self.refresh(await asyncio.to_thread(running))
            except AgentsError as e:
                self.log.warning("jupyter_agents: server activity not refreshed: %s", e)
            await asyncio.sleep(interval)


class Attendance:
    """Who watches each session and when a person typed, from the live terminals
    (:class:`~jupyter_agents.server.streams.Streams` calls it on the IO loop), into the usage
    ledger (:meth:`~jupyter_agents.spend.ledger.UsageLedger.set_watched`,
    :meth:`~jupyter_agents.spend.ledger.UsageLedger.reset_allowance`) by one worker thread,
    in the order things happened. Input is written once after each unattended stretch
    (the first keystroke), not per keystroke."""

    def __init__(self, service: SessionService, log: logging.Logger | None = None) -> None:
        self.service = service
        self.log = log or logging.getLogger("jupyter_agents")
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "jupyter-agents-attendance")
        self._watched: dict[str, int] = {}
        #: sessions whose allowance is fresh since their last unattended stretch
        self._fresh: set[str] = set()

    def viewers(self, session_id: str, count: int) -> None:
        """``count`` viewers that can type watch the session now."""
        was = self._watched.get(session_id, 0)
        if count:
            self._watched[session_id] = count
        else:
            self._watched.pop(session_id, None)
            self._fresh.discard(session_id)
        if bool(was) != bool(count):
            self._write(self.service.usage.set_watched, session_id, bool(count), time.time())

    def human_input(self, session_id: str) -> None:
        """A person typed into the session: its allowance starts again (once per
        stretch: one dict lookup for every later keystroke)."""
        if session_id not in self._fresh:
            self._fresh.add(session_id)
            self._write(self.service.usage.reset_allowance, session_id, time.time())

    def _write(self, fn: Any, *args: Any) -> None:
        def run() -> None:
            try:
                fn(*args)
            except AgentsError as e:
                self.log.warning("jupyter_agents: attendance not recorded: %s", e)
            except Exception:
                self.log.exception("jupyter_agents: attendance not recorded")

        with contextlib.suppress(RuntimeError):  # shut down
            self._writer.submit(run)

    def flush(self) -> None:
        """Wait for every write so far (blocking: tests and shutdown)."""
        self._writer.submit(lambda: None).result()

    def close(self) -> None:
        self._writer.shutdown(wait=True)
