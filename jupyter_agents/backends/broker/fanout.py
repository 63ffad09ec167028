"""How the broker fans a session's output out to its clients.

A :class:`Session` is one pty the broker holds, with its bounded replay and the clients
attached to it. A :class:`Client` is one connection with its own send queue: output to a
client whose queue holds more than :data:`CLIENT_QUEUE_BYTES` is dropped for that client
and the session marked lagging; once the queue has drained, the client gets a
``resync`` frame (a fresh snapshot) and live output again. Replies are never dropped; a
client whose queue passes :data:`CLIENT_HARD_LIMIT` is disconnected.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from .protocol import encode
from .ptys import Pty
from .replay import Replay

log = logging.getLogger("jupyter_agents.broker")

#: output bytes queued for one client before output is dropped (then resynced)
CLIENT_QUEUE_BYTES = 1 << 20
#: bytes queued for one client (replies included) before it is disconnected
CLIENT_HARD_LIMIT = 32 << 20


class Session:
    """One pty the broker holds, its transcript, replay and subscribed clients."""

    def __init__(self, sid: str, pty: Pty, transcript_fd: int) -> None:
        self.sid = sid
        self.pty = pty
        self.transcript_fd = transcript_fd
        self.replay = Replay()
        self.clients: set[Client] = set()
        #: the tasks serving connections (waited for at stop)
        self._handlers: set[asyncio.Task[None]] = set()
        self.dead = False
        self.exit_code: int | None = None
        self.dead_since: float | None = None

    def model(self) -> dict[str, Any]:
        return {
            "sid": self.sid,
            "pid": self.pty.pid,
            "dead": self.dead,
            "exit_code": self.exit_code,
            "dead_since": self.dead_since,
        }

    def exit_frame(self) -> bytes:
        return encode({"op": "exit", "exit_code": self.exit_code})


class Client:
    """One connection: its bounded send queue and the sessions it is attached to."""

    def __init__(self, sessions: dict[str, Session], writer: asyncio.StreamWriter) -> None:
        self.sessions = sessions
        self.writer = writer
        self.queue: deque[bytes] = deque()
        self.queued = 0
        #: attached sessions whose output was dropped for this client: resync them
        self.lagging: set[str] = set()
        self.attached: set[str] = set()
        self.closed = False
        self._wake = asyncio.Event()

    def send(self, frame: bytes) -> None:
        """Queue a frame that must arrive (a reply, an event)."""
        if self.closed:
            return
        self.queue.append(frame)
        self.queued += len(frame)
        self._wake.set()
        if self.queued > CLIENT_HARD_LIMIT:
            log.warning("client reads nothing (%d bytes queued): disconnecting it", self.queued)
            self.close()

    def send_output(self, sid: str, frame: bytes) -> None:
        """Queue output of session ``sid``, or drop it and mark the session lagging."""
        if sid in self.lagging:
            return
        if self.queued + len(frame) > CLIENT_QUEUE_BYTES:
            self.lagging.add(sid)
            self._wake.set()
            return
        self.send(frame)

    async def pump(self) -> None:
        """Write the queue out; when it is empty, resync the lagging sessions."""
        try:
            while not self.closed:
                while self.queue:
                    frame = self.queue.popleft()
                    self.queued -= len(frame)
                    self.writer.write(frame)
                    await self.writer.drain()
                if self.lagging:
                    self._resync()
                    continue
                self._wake.clear()
                await self._wake.wait()
        except (ConnectionError, OSError):  # the peer went away
            self.close()

    def _resync(self) -> None:
        for sid in sorted(self.lagging):
            session = self.sessions.get(sid)
            if session is not None and sid in self.attached:
                self.send(encode({"op": "resync"}, session.replay.snapshot()))
        self.lagging.clear()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.queue.clear()
        self.queued = 0
        for sid in self.attached:
            session = self.sessions.get(sid)
            if session is not None:
                session.clients.discard(self)
        self.attached.clear()
        self._wake.set()
        self.writer.close()
