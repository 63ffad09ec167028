"""The server's end of an ACP proxy (:mod:`jupyter_agents.acp.proxy`): a connection that
reads the journal's records from a ``seq`` on, and :class:`Ledger`, what those records
leave open.

The server sends the prompts (and cancels them) and shows what the agent does; what
must not wait for a server (the set-up, permission requests, refusing client tools) the
proxy does itself (:mod:`jupyter_agents.acp.clientside`). The server may be restarted
at any moment while the agent runs on, so nothing of a conversation's state is held
only in its memory: a server that comes back attaches from ``seq`` 0 (the journal is
bounded), folds every record into a new :class:`Ledger` and so knows, with its
JSON-RPC id, the prompt still in flight, with no ``session/load``: the agent never
stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_agents.acp.journal import MAX_LINE
from jupyter_agents.acp.proxy import CHUNK, Lines
from jupyter_agents.backends.broker.protocol import peer_not_ours
from jupyter_agents.core.paths import socket_not_ours

Record = dict[str, Any]


class NotOurs(OSError):
    """The proxy's socket, or the process behind it, is another user's."""


def _key(request_id: object) -> str:
    """A JSON-RPC id as a dict key (``1`` and ``"1"`` are different ids)."""
    return json.dumps(request_id)


class Ledger:
    """What the journal's records say is open, folded one record at a time
    (:meth:`feed`, in ``seq`` order; a record seen before is ignored):

    - :attr:`asked`: the agent's requests to the client not answered yet (a permission
      request), by id, in the order asked;
    - :attr:`waiting`: the client's requests the agent has not answered (the prompt in
      flight), by id;
    - :attr:`exit_code`: the agent's, once the proxy saw it exit;
    - :attr:`ready`: how its ACP session began.
    """

    def __init__(self) -> None:
        self.seq = 0
        self.asked: dict[str, Record] = {}
        self.waiting: dict[str, Record] = {}
        self.exit_code: int | None = None
        self.agent_pid: int | None = None
        #: the proxy's ``ready`` record: the ACP session (``sessionId``) and how it
        #: began (``how``: ``new``, ``resumed``, ``loaded``, ``failed``; ``why``)
        self.ready: Record | None = None

    def feed(self, record: Record) -> bool:
        """Fold ``record`` in; False if it was seen before (its ``seq`` is not new)."""
        seq = record.get("seq")
        if not isinstance(seq, int) or seq <= self.seq:
            return False
        self.seq = seq
        side, message = record.get("from"), record.get("msg")
        if side == "proxy":
            if record.get("event") == "started":
                self.agent_pid = record.get("pid")
            elif record.get("event") == "ready":
                self.ready = record
            elif record.get("event") == "exited":
                self.exit_code = record.get("code")
            return True
        if not isinstance(message, dict) or "id" not in message:
            return True  # a notification, or a line that was not JSON
        key = _key(message["id"])
        if "method" in message:  # a request
            (self.asked if side == "agent" else self.waiting)[key] = message
        else:  # a response: what it answers is no longer open
            (self.waiting if side == "agent" else self.asked).pop(key, None)
        return True


class ProxyLink:
    """One connection to a proxy's socket: every record after ``after`` goes to
    ``on_record`` (parsed, in ``seq`` order, each once), then each new one as the proxy
    writes it; :meth:`send` passes a JSON-RPC message to the agent. :attr:`closed` is
    done once the proxy hung up (the agent exited, or another client attached)."""

    def __init__(self, socket_path: Path, on_record: Callable[[Record], object]) -> None:
        self.socket_path = socket_path
        self.on_record = on_record
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self, after: int = 0) -> None:
        """Connect, once the socket and the process behind it are known to be ours
        (:class:`NotOurs` if not; ``OSError`` if no proxy listens), and attach."""
        why = socket_not_ours(self.socket_path)
        if why is not None:
            raise NotOurs(why)
        reader, writer = await asyncio.open_unix_connection(str(self.socket_path), limit=CHUNK)
        sock = writer.get_extra_info("socket")
        why = None if sock is None else peer_not_ours(sock)
        if why is not None:
            writer.close()
            raise NotOurs(why)
        writer.write(json.dumps({"after": after}).encode() + b"\n")
        self._writer = writer
        self._task = asyncio.create_task(self._read(reader))

    def send(self, message: Record) -> None:
        """Pass ``message`` (a JSON-RPC request, response or notification) to the agent.
        ``ConnectionError`` once the link is closed."""
        if self._writer is None or self._writer.is_closing():
            raise ConnectionResetError("the link to the ACP proxy is closed")
        self._writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def close(self) -> None:
        """Hang up (the proxy and the agent go on)."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self, reader: asyncio.StreamReader) -> None:
        lines = Lines(MAX_LINE + 256)
        try:
            while data := await reader.read(CHUNK):
                for line in lines.feed(data):
                    if isinstance(line, int):
                        continue  # (the proxy never sends one: its records are bounded)
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict):
                        self.on_record(record)
        except ConnectionError:
            pass
        finally:
            if not self.closed.done():
                self.closed.set_result(None)
