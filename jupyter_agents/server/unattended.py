"""Applying the unattended limit (:mod:`jupyter_agents.spend.limits`) to running agents:
:class:`UnattendedGuard` decides in a worker thread and sends the interrupt key on the
IO loop, through :func:`send_keys`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.records import Session
from jupyter_agents.server.streams import Streams
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.spend.ledger import Change
from jupyter_agents.spend.limits import exceeded

#: seconds before the key is sent again to an agent still spending past its limit
RETRY = 60.0
#: seconds a stream opened only to send the key waits for its session to answer
SEND_TIMEOUT = 10.0


class UnattendedGuard:
    """Applies the unattended limit (module docstring) each refresh of the server:
    :meth:`check` in a worker thread (reads the ledger, decides, records), then
    :meth:`interrupt` on the IO loop (sends the keys)."""

    def __init__(
        self,
        service: SessionService,
        streams: Streams,
        log: logging.Logger | None = None,
        clock: Any = time.time,
    ) -> None:
        self.service = service
        self.streams = streams
        self.log = log or logging.getLogger("jupyter_agents")
        self.clock = clock

    def check(self, changes: Mapping[str, Change]) -> list[tuple[Session, str]]:
        """Count the working time of unwatched agents, then the sessions to interrupt
        now and why (their attention is ``error`` with the reason, published, logged).
        Blocking."""
        ledger = self.service.usage
        kinds = [name for name, kind in self.service.kinds.items() if kind.interrupt_key]
        running = self.service.list(["running"], kinds)
        working = [s for s in running if s.attention == "working" or s.id in changes]
        ledger.tick(s.id for s in working)
        now = self.clock()
        found = ledger.usage(s.id for s in working)
        chosen: list[tuple[Session, str]] = []
        for session in working:
            usage = found.get(session.id)
            if usage is None or usage.watched or usage.allowance is None:
                continue
            limit = ledger.limit if usage.limit is None else usage.limit
            reason = exceeded(limit, usage.allowance) if limit else None
            if reason is None:
                continue
            hit = usage.allowance.hit
            if hit is not None and (now - hit < RETRY or session.id not in changes):
                continue  # acted on: again only if it still spends, and not at once
            ledger.note_limit(session.id, now, reason)
            changed = self.service.change(
                session.id,
                "attention",
                attention="error",
                attention_reason=reason,
                attention_since=clock.iso(now),
            )
            if changed is None:
                continue  # it ended meanwhile
            session = changed
            self.log.warning(
                "jupyter_agents: interrupted session %s (terminal %r): %s",
                session.id,
                session.name,
                reason,
            )
            chosen.append((session, reason))
        return chosen

    async def interrupt(self, chosen: list[tuple[Session, str]]) -> None:
        """Send each session its kind's interrupt key (on the IO loop)."""
        for session, _ in chosen:
            key = self.service.kinds[session.kind].interrupt_key
            if key is None or not await send_keys(self.streams, session, key):
                self.log.warning(
                    "jupyter_agents: could not send the interrupt key to session %s",
                    session.id,
                )


class _Quiet:
    """The listener of a stream opened only to send keys: it wants no output."""

    def __init__(self, ended: asyncio.Future[bool]) -> None:
        self.ended = ended

    def on_output(self, data: str) -> None:
        pass

    def on_output_lost(self) -> None:
        pass

    def on_exit(self, exit_code: int | None) -> None:
        if not self.ended.done():
            self.ended.set_result(False)


async def send_keys(streams: Streams, session: Session, keys: str) -> bool:
    """Write ``keys`` to a running session's terminal through its backend, as if typed:
    into its live stream when one is open here (a read-only watcher's), else into a
    stream opened for it (once it answers with its screen, so nothing typed is held
    back), closed again. Whether they were sent. Call on the IO loop."""
    term = streams.terminals.get(session.id)
    if term is not None:
        term.stream.write(keys)
        return True
    ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    try:
        stream = streams.backends.get(session.backend).attach(session.id, _Quiet(ready))
    except AgentsError:
        return False
    try:

        def answered(_: str) -> None:
            if not ready.done():
                ready.set_result(True)

        stream.snapshot(answered, screen_rows=session.rows or 24)
        try:
            sent = await asyncio.wait_for(ready, SEND_TIMEOUT)
        except asyncio.TimeoutError:
            sent = False
        if sent:
            stream.write(keys)
            await asyncio.sleep(0.2)  # let the write go out before the stream closes
        return sent
    finally:
        await stream.aclose()
