"""The server's part in ACP sessions (issue 58): prompts and cancels sent to the agent
through its proxy (:mod:`jupyter_agents.acp`), over one link per session, opened when
first needed and read from the journal's start, so a restarted server knows the prompt
in flight. What must not wait for a server (set-up, permission requests) the proxy
does itself.

``POST /api/agents/sessions/<id>/prompt`` ``{text}``: 202 ``{prompt}`` (the JSON-RPC id
of the ``session/prompt`` sent); ``POST /api/agents/sessions/<id>/cancel``: 204
(``session/cancel``). 409 for a terminal session, one not running, or an agent whose
ACP session is not ready yet (or failed: saying why); 400 for no text or more than
:data:`MAX_PROMPT` bytes of it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from jupyter_agents.acp import journal_folder, proxy_socket
from jupyter_agents.acp.client import Ledger, ProxyLink
from jupyter_agents.acp.journal import Journal
from jupyter_agents.core.errors import Conflict
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService

#: the longest prompt text accepted (bytes of UTF-8)
MAX_PROMPT = 64 * 1024
#: seconds a link waits to have read the journal up to where it was when it opened
CATCH_UP = 10.0


class AcpLinks:
    """The open links to this server's ACP sessions' proxies, by session id."""

    def __init__(self, service: SessionService) -> None:
        self.service = service
        self._links: dict[str, tuple[ProxyLink, Ledger]] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def ledger(self, session: Session) -> tuple[ProxyLink, Ledger]:
        """The link to ``session``'s proxy and what it read, opened (from ``seq`` 0)
        and caught up with the journal if it was not; :class:`Conflict` if no proxy
        answers."""
        lock = self._opening.setdefault(session.id, asyncio.Lock())
        async with lock:
            held = self._links.get(session.id)
            if held is not None and not held[0].closed.done():
                return held
            state_dir = self.service.state_dir
            written = await asyncio.to_thread(
                lambda: Journal(journal_folder(state_dir, session.id)).seq
            )
            ledger = Ledger()
            link = ProxyLink(proxy_socket(state_dir, session.id), ledger.feed)
            try:
                await link.open(after=0)
            except OSError as e:
                raise Conflict(f"session {session.id}'s ACP proxy does not answer: {e}") from e
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CATCH_UP
            while ledger.seq < written and loop.time() < deadline and not link.closed.done():
                await asyncio.sleep(0.02)
            self._links[session.id] = (link, ledger)
            return link, ledger

    async def send(
        self, session: Session, method: str, params: dict[str, Any], request: bool
    ) -> str:
        """Send ``method`` to ``session``'s agent with its ACP session id added to
        ``params``; the JSON-RPC id of a request (``""`` for a notification)."""
        if session.mode != "acp":
            raise Conflict(f"session {session.id} is a terminal session; it takes no prompts")
        if session.status != "running":
            raise Conflict(f"session {session.id} is {session.status}, not running")
        link, ledger = await self.ledger(session)
        ready = ledger.ready
        if ready is None or not ready.get("sessionId"):
            why = (ready or {}).get("why")
            raise Conflict(
                f"session {session.id}'s agent has no ACP session"
                + (f": {why}" if why else " yet (it is starting)")
            )
        message: dict[str, Any] = {
            "jsonrpc": "2.0",
            "method": method,
            "params": {"sessionId": ready["sessionId"], **params},
        }
        request_id = f"srv-{uuid.uuid4().hex[:16]}" if request else ""
        if request:
            message["id"] = request_id
        try:
            link.send(message)
        except ConnectionError as e:
            raise Conflict(f"session {session.id}'s ACP proxy hung up: {e}") from e
        return request_id

    async def close(self) -> None:
        """Hang up every link (the proxies and agents go on)."""
        for link, _ledger in self._links.values():
            await link.close()
        self._links.clear()
