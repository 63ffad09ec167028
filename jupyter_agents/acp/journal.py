"""An ACP session's journal: every message between the agent and its client, in order,
numbered, kept on disk by the proxy (:mod:`jupyter_agents.acp.proxy`) so that a client
that comes back (a restarted Jupyter server) gets what it missed, and a reader after a
reboot has the conversation as it went.

A record is one line of JSON:

- ``{"seq": n, "from": "agent", "msg": {...}}``: a JSON-RPC message the agent wrote;
- ``{"seq": n, "from": "client", "msg": {...}}``: one the client sent (and the proxy
  passed on);
- ``{"seq": n, "from": "agent", "text": "..."}``: a line of the agent's stdout that is
  not a JSON object (cut to :data:`MAX_TEXT` characters), kept, never passed on;
- ``{"seq": n, "from": "proxy", "event": "...", ...}``: what the proxy itself saw
  (``started`` with the agent's pid, argv and the client tools it may use,
  ``dropped`` for a line over :data:`MAX_LINE` bytes, ``exited`` with the agent's exit
  code).

``seq`` starts at 1 and grows by one per record, also across proxies of one journal
(a restore after a reboot goes on from the last). Bounded: the journal is segments of at
most :data:`SEGMENT_BYTES` (a record longer than that fills one alone) named by their
first ``seq``; only the newest :data:`KEEP_SEGMENTS` are kept. Blocking; the proxy is
its only writer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_agents.agents.archive import ConversationFile
from jupyter_agents.core.paths import create_private_file

#: the longest line of JSON the proxy passes on in either direction (a longer one is
#: dropped and journaled as ``dropped``)
MAX_LINE = 32 << 20
#: how much of a line that is not JSON is kept
MAX_TEXT = 4096
#: a segment's size before the next starts, and how many are kept
SEGMENT_BYTES = 8 << 20
KEEP_SEGMENTS = 4

_SUFFIX = ".jsonl"


class Journal:
    """The journal in ``folder`` (a private directory the caller made): :meth:`append`
    writes a record, :meth:`after` reads those after a ``seq``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        segments = self._segments()
        self._seq = 0
        self._size = 0
        self._path: Path | None = None
        if segments:
            self._path = segments[-1][1]
            self._size = self._path.stat().st_size
            for record in _records(self._path):
                self._seq = max(self._seq, int(record.get("seq", 0)))
            if self._seq == 0:  # an empty newest segment: its name says where it starts
                self._seq = segments[-1][0] - 1

    @property
    def seq(self) -> int:
        """The ``seq`` of the last record written (0: none)."""
        return self._seq

    def append(self, side: str, /, **fields: Any) -> bytes:
        """Write the next record (``from`` = ``side``, then ``fields``); returns its line
        (what a client is sent)."""
        return self.append_raw(side, json.dumps(fields, separators=(",", ":"))[1:-1].encode())

    def append_message(self, side: str, message: bytes) -> bytes:
        """Write a record holding ``message``, a line of JSON already known to be an
        object (not parsed again); returns its line."""
        return self.append_raw(side, b'"msg":' + message.strip())

    def append_raw(self, side: str, body: bytes) -> bytes:
        """Write the record ``{"seq": ..., "from": side, <body>}`` (``body``: the
        members after those two, as JSON text); returns its line."""
        self._seq += 1
        head = b'{"seq":%d,"from":%s' % (self._seq, json.dumps(side).encode())
        line = head + (b"," + body if body else b"") + b"}\n"
        if self._path is None or (self._size and self._size + len(line) > SEGMENT_BYTES):
            self._start_segment()
        assert self._path is not None
        with self._path.open("ab") as f:
            f.write(line)
        self._size += len(line)
        return line

    def after(self, seq: int) -> Iterator[bytes]:
        """The lines of the records after ``seq`` that are still kept, in order."""
        segments = self._segments()
        start = 0
        for index, (first, _path) in enumerate(segments):
            if first <= seq + 1:
                start = index
        for _first, path in segments[start:]:
            try:
                f = path.open("rb")
            except FileNotFoundError:  # dropped meanwhile
                continue
            with f:
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # being written: a later read has it
                    if _seq_of(line) > seq:
                        yield line

    def _segments(self) -> list[tuple[int, Path]]:
        return segments(self.folder)

    def _start_segment(self) -> None:
        self._path = self.folder / f"{self._seq:012d}{_SUFFIX}"
        create_private_file(self._path)
        self._size = 0
        for _first, old in self._segments()[:-KEEP_SEGMENTS]:
            old.unlink(missing_ok=True)


def segments(folder: Path) -> list[tuple[int, Path]]:
    """The journal's segments in ``folder``, oldest first, each with its first ``seq``
    (none when there is no such folder)."""
    found = []
    for path in folder.glob("*" + _SUFFIX):
        try:
            found.append((int(path.name[: -len(_SUFFIX)]), path))
        except ValueError:
            continue
    return sorted(found)


def journal_files(folder: Path) -> list[ConversationFile]:
    """The journal's segments, oldest first, as the conversation files a turn reader
    reads (:mod:`jupyter_agents.sessions.turns`)."""
    return [ConversationFile("", path, False) for _first, path in segments(folder)]


def _seq_of(line: bytes) -> int:
    """The ``seq`` of a record's line (written first by :meth:`Journal.append_raw`)."""
    end = line.find(b",", 7)
    try:
        return int(line[7:end])
    except ValueError:
        return 0


def _records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as f:
        for line in f:
            if line.endswith(b"\n"):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield record


def is_object(line: bytes) -> bool:
    """Whether ``line`` is one JSON object (what a JSON-RPC message is)."""
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def check_folder(folder: Path) -> Path:
    """``folder`` made private if new (journals hold the conversation)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder
