"""The broker's wire protocol: length-prefixed frames over a private unix socket.

A frame is an 8-byte prefix, a JSON header and a raw payload::

    !II  header length, payload length   (big-endian uint32 each)
    header   UTF-8 JSON object, at most MAX_HEADER bytes, always with a string "op"
    payload  raw bytes (terminal input/output, snapshots), at most MAX_PAYLOAD bytes

Requests (client -> broker; ``sid`` is the session id). Every request but ``write``
and ``resize`` gets exactly one reply frame ``{"op": "ok", ...}`` or
``{"op": "error", "error": message}``, in request order on that connection.

==========  =================================================  ===========================
op          header fields / payload                            reply
==========  =================================================  ===========================
ping                                                           ok: ``pid``, ``version``
spawn       ``sid argv cwd env rows cols``                     ok: ``session``
            ``transcript_max_bytes``
list                                                           ok: ``sessions`` [session]
write       ``sid``; payload = input bytes                     (none)
resize      ``sid rows cols``                                  (none)
snapshot    ``sid``                                            ok; payload = replay bytes
attach      ``sid``                                            ok, then events (below)
remove      ``sid``                                            ok (unknown ids too)
shutdown                                                       ok, then every session and
                                                               the broker end
==========  =================================================  ===========================

A ``session`` is ``{"sid", "pid", "dead", "exit_code", "dead_since"}`` (the fields of
:class:`~jupyter_agents.backends.base.LiveSession`).

After ``attach`` the connection also carries the session's events, in the order the
broker produced them, interleaved with replies (a ``snapshot`` reply on an attached
connection holds every byte of output sent before it and none sent after it):

- ``{"op": "output"}``, payload = raw pty output;
- ``{"op": "resync"}``, payload = a fresh snapshot: this client fell behind and output
  was dropped for it (see the server's flow control); the snapshot redraws the screen;
- ``{"op": "exit", "exit_code": int | null}``: the process ended (sent once; at attach
  time if it had already ended).

A frame that breaks these rules (bad prefix, oversize, bad JSON, unknown op, wrong field
types) gets an ``error`` reply and the connection is closed; the broker keeps serving
everyone else.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jupyter_agents.core.paths import socket_dir, socket_not_ours

PREFIX = struct.Struct("!II")
MAX_HEADER = 1 << 20  # spawn carries a whole environment
MAX_PAYLOAD = 4 << 20
VERSION = 1

#: ops a client may send, with the header fields each requires and their types
REQUESTS: Mapping[str, Mapping[str, type | tuple[type, ...]]] = {
    "ping": {},
    "list": {},
    "shutdown": {},
    "spawn": {
        "sid": str,
        "argv": list,
        "cwd": str,
        "env": dict,
        "rows": int,
        "cols": int,
        "transcript_max_bytes": int,
    },
    "write": {"sid": str},
    "resize": {"sid": str, "rows": int, "cols": int},
    "snapshot": {"sid": str},
    "attach": {"sid": str},
    "remove": {"sid": str},
}


def broker_paths(state_dir: Path) -> tuple[Path, Path, Path]:
    """(socket, pid file, log file) of the broker of ``state_dir`` (in ``broker/``; the
    socket where :func:`~jupyter_agents.core.paths.socket_dir` puts it)."""
    base = state_dir / "broker"
    return socket_dir(state_dir, "broker") / "socket", base / "broker.pid", base / "broker.log"


def peer_not_ours(sock: socket.socket) -> str | None:
    """Why the process at the other end of a connected unix socket must not be talked
    to: it runs as another user (Linux ``SO_PEERCRED``); None if it runs as us, or the
    platform cannot tell (then the 0600 socket in a 0700 dir is the only guard). The
    broker asks it of every client, and every client of the broker before it sends."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    if uid != os.getuid():
        return f"the process at the other end (pid {pid}) runs as uid {uid}, not as you"
    return None


def connect_checked(path: Path, timeout: float | None = None) -> socket.socket:
    """A connection to the broker socket ``path`` once the socket file and the peer are
    known to be ours (:func:`~jupyter_agents.core.paths.socket_not_ours`,
    :func:`peer_not_ours`), else :class:`NotOurs` with why, before a byte is sent.
    ``FileNotFoundError``/``ConnectionRefusedError``: no broker listens."""
    why = socket_not_ours(path)
    if why is not None:
        raise NotOurs(why)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
        why = peer_not_ours(sock)
        if why is not None:
            raise NotOurs(why)
    except BaseException:
        sock.close()
        raise
    return sock


class NotOurs(OSError):
    """The broker socket, or the process listening on it, is another user's: nothing
    may be sent there (it could be a planted listener)."""


class ProtocolError(Exception):
    """A frame that breaks the protocol; the message says how."""


def encode(header: Mapping[str, Any], payload: bytes = b"") -> bytes:
    """One frame.

    >>> frame = encode({"op": "ping"})
    >>> frame
    b'\\x00\\x00\\x00\\x0e\\x00\\x00\\x00\\x00{"op": "ping"}'
    >>> decode_header(frame[8:])
    {'op': 'ping'}
    """
    head = json.dumps(header).encode()
    if len(head) > MAX_HEADER or len(payload) > MAX_PAYLOAD:
        raise ProtocolError("frame too large")
    return PREFIX.pack(len(head), len(payload)) + head + payload


def parse_prefix(prefix: bytes) -> tuple[int, int]:
    """(header length, payload length) from the 8-byte prefix, bounds checked."""
    head_len, payload_len = PREFIX.unpack(prefix)
    if not 0 < head_len <= MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise ProtocolError(f"bad frame lengths {head_len}/{payload_len}")
    return head_len, payload_len


def decode_header(raw: bytes) -> dict[str, Any]:
    """The header object; :class:`ProtocolError` unless it is a JSON object with an op."""
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise ProtocolError("header must be a JSON object with a string 'op'")
    return header


def take_frame(received: bytearray) -> tuple[dict[str, Any], bytes] | None:
    """Remove the first whole frame from ``received`` (bytes read so far) and return it
    as (header, payload); None while it is incomplete. :class:`ProtocolError` for a
    malformed one.

    >>> received = bytearray(encode({"op": "output"}, b"hi") + encode({"op": "exit"})[:5])
    >>> take_frame(received), take_frame(received), len(received)
    (({'op': 'output'}, b'hi'), None, 5)
    """
    if len(received) < PREFIX.size:
        return None
    head_len, payload_len = parse_prefix(bytes(received[: PREFIX.size]))
    end = PREFIX.size + head_len + payload_len
    if len(received) < end:
        return None
    header = decode_header(bytes(received[PREFIX.size : PREFIX.size + head_len]))
    payload = bytes(received[PREFIX.size + head_len : end])
    del received[:end]
    return header, payload


def check_request(header: Mapping[str, Any]) -> None:
    """:class:`ProtocolError` unless ``header`` is a known request with well-typed fields.

    >>> check_request({"op": "resize", "sid": "a", "rows": 24, "cols": 80})
    >>> check_request({"op": "resize", "sid": "a", "rows": "24", "cols": 80})
    Traceback (most recent call last):
    ...
    jupyter_agents.backends.broker.protocol.ProtocolError: resize: 'rows' must be int
    """
    op = header["op"]
    fields = REQUESTS.get(op)
    if fields is None:
        raise ProtocolError(f"unknown op {op[:40]!r}")
    for name, kind in fields.items():
        value = header.get(name)
        # bool is an int subclass: never a valid size
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ProtocolError(f"{op}: {name!r} must be {getattr(kind, '__name__', kind)}")


def read_frame_sync(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """One frame from a blocking socket (``ConnectionResetError`` at EOF)."""

    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionResetError("the pty broker closed the connection")
            buf += chunk
        return bytes(buf)

    head_len, payload_len = parse_prefix(exactly(PREFIX.size))
    raw = exactly(head_len + payload_len)
    return decode_header(raw[:head_len]), raw[head_len:]


class FrameReader(asyncio.Protocol):
    """A connection's frames as they arrive: each goes to ``on_frame`` in the callback
    that received it (no turn of the loop in between, as a task awaiting frames would
    take: measured at 50-70 us a frame); ``on_frame`` returning False hangs up; a
    malformed frame (or ``on_frame`` raising :class:`ProtocolError`) goes to
    :meth:`refuse`. ``read_done``, if given, is called after the frames of each read
    (whole or not), so that a reader can hand on what one read brought at once.
    ``gone`` is set when the connection is closed."""

    def __init__(
        self,
        on_frame: Callable[[dict[str, Any], bytes], bool],
        gone: asyncio.Future[None],
        read_done: Callable[[], None] | None = None,
    ) -> None:
        self._on_frame = on_frame
        self._read_done = read_done
        self._gone = gone
        self._received = bytearray()
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._received += data
        try:
            while not self._transport.is_closing():
                frame = take_frame(self._received)
                if frame is None:
                    break
                if not self._on_frame(*frame):
                    self._transport.close()
        except ProtocolError as e:
            self._received.clear()
            self.refuse(e)
        finally:
            if self._read_done is not None:
                self._read_done()

    def refuse(self, error: ProtocolError) -> None:
        """A frame broke the protocol: hang up (a subclass may answer it first)."""
        assert self._transport is not None
        self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._gone.done():
            self._gone.set_result(None)
