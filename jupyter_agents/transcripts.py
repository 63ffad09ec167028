"""Transcripts: the raw output of a session, on disk, complete while no server runs.

One :class:`Transcript` type serves every reader: the REST log (byte ranges), the CLI
(``log``, ``--tail``, ``--follow``), magics and the dashboard (plain text), and restore
(the tail shown before the new process). The backends write them; nothing here writes.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from .errors import InvalidRequest, NotFound, OutOfRange

#: the most transcript bytes one read (e.g. one log request) returns
MAX_CHUNK = 4 * 1024 * 1024
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_NOT_SGR = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC
    r"|\x1b\[[0-9;?<>=]*[@-ln-~]"  # CSI other than SGR (...m)
    r"|\x1b[()][0-9A-Za-z]|\x1b[=>78cDEHMNOZ]"  # charsets, keypad, save/restore...
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]"  # other control characters
)


def plain_text(data: bytes) -> str:
    r"""Raw transcript bytes as text for a notebook: colours (SGR) kept, cursor movement
    and other control sequences dropped, CRLF -> LF.

    >>> plain_text(b"\x1b[?2004hhi \x1b[1mthere\x1b[0m\r\n\x1b[2Kok")
    'hi \x1b[1mthere\x1b[0m\nok'
    """
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    return _NOT_SGR.sub("", text).replace("\r", "")


def window(
    size: int, offset: str | None, length: str | None, range_header: str | None
) -> tuple[int, int, bool]:
    """Which bytes of a ``size``-byte transcript a request wants: ``(start, count,
    partial)``.

    From ``?offset=&length=`` or an HTTP ``Range: bytes=a-b`` / ``bytes=-n`` header
    (``partial``: answer 206). Capped at ``MAX_CHUNK``. Raises
    :class:`InvalidRequest` for malformed or negative values and :class:`OutOfRange`
    for a start past the end.

    >>> window(100, None, None, None), window(100, "90", "50", None)
    ((0, 100, False), (90, 10, False))
    >>> window(100, None, None, "bytes=-10")
    (90, 10, True)
    """

    def number(name: str, value: str) -> int:
        if not value.isdigit():
            raise InvalidRequest(f"{name} must be a non-negative integer, got {value[:40]!r}")
        return int(value)

    partial = False
    if range_header is not None and offset is None and length is None:
        m = _RANGE.fullmatch(range_header.strip())
        if m is None or m.groups() == ("", ""):
            raise InvalidRequest(f"unsupported Range {range_header[:80]!r}; use bytes=a-b")
        first, last = m.groups()
        if first == "":
            start = max(0, size - int(last))
            end = size
        else:
            start = int(first)
            end = size if last == "" else min(size, int(last) + 1)
        partial = True
    else:
        start = number("offset", offset) if offset is not None else 0
        end = size if length is None else start + number("length", length)
    if start > size or (partial and start >= size and size > 0):
        raise OutOfRange(f"offset {start} is past the end of the transcript ({size} bytes)")
    count = max(0, min(end, size, start + MAX_CHUNK) - start)
    return start, count, partial


class Transcript:
    """The raw output log of one session (``<state dir>/transcripts/<id>.log``)."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.path = path

    def _open(self) -> int:
        try:  # never through a symlink planted in the state dir
            return os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as e:
            raise NotFound(f"session {self.session_id} has no transcript") from e

    def size(self) -> int:
        """Its length in bytes (0 when there is none yet)."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def ended_at(self) -> datetime | None:
        """When it was last written (the last output), if it exists."""
        try:
            return datetime.fromtimestamp(self.path.stat().st_mtime, timezone.utc)
        except OSError:
            return None

    def read(self, offset: int = 0, length: int = MAX_CHUNK) -> tuple[bytes, int]:
        """Up to ``length`` bytes (at most :data:`MAX_CHUNK`) from ``offset``, and the
        size at the time of reading. :class:`NotFound` when there is no transcript."""
        with os.fdopen(self._open(), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(offset)
            return f.read(max(0, min(length, MAX_CHUNK))), size

    def read_window(
        self, offset: str | None, length: str | None, range_header: str | None
    ) -> tuple[bytes, int, int, bool]:
        """What a log request asks for (:func:`window`): ``(data, start, size,
        partial)``. :class:`NotFound` when there is no transcript."""
        with os.fdopen(self._open(), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start, count, partial = window(size, offset, length, range_header)
            f.seek(start)
            return f.read(count), start, size, partial

    def tail(self, nbytes: int) -> bytes:
        """Its last ``nbytes`` bytes (b"" when there is none)."""
        try:
            with os.fdopen(self._open(), "rb") as f:
                f.seek(max(0, f.seek(0, 2) - nbytes))
                return f.read()
        except NotFound:
            return b""

    def text(self, lines: int, tail_bytes: int = 1 << 20) -> str:
        """Its last ``lines`` lines as :func:`plain_text`."""
        return "\n".join(plain_text(self.tail(tail_bytes)).splitlines()[-lines:])

    def follow(
        self, offset: int, running: Callable[[], bool], interval: float = 0.2
    ) -> Iterator[bytes]:
        """Chunks from ``offset`` on, waiting for more while ``running()`` says the
        session still runs. Blocking: for the CLI and threads."""
        with os.fdopen(self._open(), "rb") as f:
            f.seek(offset)
            while True:
                chunk = f.read(1 << 16)
                if chunk:
                    yield chunk
                elif running():
                    time.sleep(interval)
                else:
                    return
