"""How the broker fans a session's output out to its clients.

A :class:`HeldPty` is one pty the broker holds, with its bounded replay and the clients
attached to it. A :class:`Client` is one connection with its own send queue. Live output
goes into the queue while it holds less than :data:`CLIENT_QUEUE_BYTES`; past that the
client *lags* for that session from a known transcript offset, and once its queue has
drained it catches up by reading the transcript (which holds every byte, in order) a
:data:`CATCH_UP_CHUNK` at a time, then takes live output again. So a slow client that
keeps reading gets every byte exactly once, and the broker's memory stays bounded
whatever the sessions print. Only when the transcript no longer holds what the client
missed (a failed write, e.g. a full disk, or segments dropped by the cap) does the client
get a ``resync`` frame (a fresh snapshot) instead. Replies are never dropped; a client
whose queue passes :data:`CLIENT_HARD_LIMIT` is disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from jupyter_agents.backends.broker.protocol import encode
from jupyter_agents.backends.broker.ptys import Pty
from jupyter_agents.backends.broker.recorder import Recorder
from jupyter_agents.backends.broker.replay import Replay

log = logging.getLogger("jupyter_agents.broker")

#: output bytes queued for one client before output is dropped (then resynced)
CLIENT_QUEUE_BYTES = 1 << 20
#: bytes queued for one client (replies included) before it is disconnected
CLIENT_HARD_LIMIT = 32 << 20
#: transcript bytes a lagging client is sent per catch-up read
CATCH_UP_CHUNK = 256 << 10


class HeldPty:
    """One pty the broker holds, its transcript, replay and subscribed clients."""

    def __init__(self, sid: str, pty: Pty, recorder: Recorder) -> None:
        self.sid = sid
        self.pty = pty
        self.recorder = recorder
        self.replay = Replay()
        self.clients: set[Client] = set()
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
    """The sending side of one connection: its bounded queue, the sessions it is
    attached to, and the transport's flow control (:meth:`pause`, :meth:`resume`).

    A frame goes straight to the transport while nothing is queued ahead of it and the
    transport takes more; only then is it queued for :meth:`pump`. (Handing each frame to
    the pump cost a turn of the event loop: 50-70 us of every keystroke's echo, measured.)
    """

    def __init__(self, sessions: dict[str, HeldPty], transport: asyncio.WriteTransport) -> None:
        self.sessions = sessions
        self.transport = transport
        self.queue: deque[bytes] = deque()
        self.queued = 0
        #: attached sessions whose live output this client missed: the transcript offset
        #: it has to catch up from
        self.lagging: dict[str, int] = {}
        #: snapshots asked for while lagging: answered once caught up, so each one holds
        #: exactly the output sent before it
        self.held_snapshots: dict[str, int] = {}
        self.attached: set[str] = set()
        self.closed = False
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._pump = asyncio.ensure_future(self.pump())  # held: the loop keeps weak refs
        self._finishing: asyncio.Future[None] | None = None

    def send(self, frame: bytes) -> None:
        """Send a frame that must arrive (a reply, an event): now, or queued."""
        if self.closed:
            return
        if not self.queue and self._writable.is_set():
            self.transport.write(frame)
            return
        self.queue.append(frame)
        self.queued += len(frame)
        self._wake.set()
        if self.queued > CLIENT_HARD_LIMIT:
            log.warning("client reads nothing (%d bytes queued): disconnecting it", self.queued)
            self.close()

    def send_output(self, sid: str, frame: bytes, offset: int) -> None:
        """Send output of session ``sid`` that starts at transcript ``offset``; past the
        queue's bound, lag from there instead (the transcript has it)."""
        if sid in self.lagging:
            return
        if self.queued + len(frame) > CLIENT_QUEUE_BYTES:
            self.lagging[sid] = offset
            self._wake.set()
            return
        self.send(frame)

    def pause(self) -> None:
        """The transport's buffer is full (``pause_writing``): queue from now on."""
        self._writable.clear()

    def resume(self) -> None:
        """The transport's buffer has drained (``resume_writing``)."""
        self._writable.set()

    async def pump(self) -> None:
        """Write the queue out as the transport takes it; when it is empty, catch the
        lagging sessions up. Runs from the client's creation until it is closed."""
        while not self.closed:
            if not self._writable.is_set():
                await self._writable.wait()
            elif self.queue:
                frame = self.queue.popleft()
                self.queued -= len(frame)
                self.transport.write(frame)
            elif self.lagging:
                self._catch_up()
            else:
                self._wake.clear()
                await self._wake.wait()

    async def flushed(self) -> None:
        """Return once everything queued has gone to the transport and it takes more."""
        while self.queue and not self.closed:
            await asyncio.sleep(0.01)
        await self._writable.wait()

    def finish(self, timeout: float = 2.0) -> None:
        """Close once what is queued has gone out (or after ``timeout`` seconds)."""
        if self._finishing is None and not self.closed:
            self._finishing = asyncio.ensure_future(self._finish(timeout))

    async def _finish(self, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.flushed(), timeout)
        self.close()

    def _catch_up(self) -> None:
        """Send each lagging session's next chunk from its transcript; a session caught
        up takes live output again (nothing is printed between the read and that: one
        loop). Output the transcript no longer holds is replaced by a resync (a fresh
        snapshot)."""
        for sid, offset in sorted(self.lagging.items()):
            session = self.sessions.get(sid)
            if session is None or sid not in self.attached:
                del self.lagging[sid]
                self.held_snapshots.pop(sid, None)
                continue
            recorder = session.recorder
            chunk = b""
            try:
                if not recorder.lost_since(offset):
                    chunk = recorder.read(offset, CATCH_UP_CHUNK)
            except OSError as e:
                log.warning("session %s: catching up from the transcript: %s", sid, e)
            if not chunk:  # the transcript no longer holds what this client missed
                del self.lagging[sid]
                self.send(encode({"op": "resync"}, session.replay.snapshot()))
                for _ in range(self.held_snapshots.pop(sid, 0)):
                    self.send(encode({"op": "ok"}, session.replay.snapshot()))
                continue
            self.send(encode({"op": "output"}, chunk))
            if offset + len(chunk) >= recorder.end:
                del self.lagging[sid]
                for _ in range(self.held_snapshots.pop(sid, 0)):
                    self.send(encode({"op": "ok"}, session.replay.snapshot()))
            else:
                self.lagging[sid] = offset + len(chunk)

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
        self._writable.set()
        self.transport.close()
