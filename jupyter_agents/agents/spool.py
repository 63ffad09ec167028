"""The spool: what an agent's hooks record, one JSON line per event, in
``<state dir>/spool/<session id>.jsonl``, and the datagram socket beside it that wakes a
server.

:mod:`jupyter_agents.hook` writes it (in the agent CLI's process, for every hook event:
this module imports only the standard library), :class:`~.attention.AttentionTracker`
reads it. A line keeps what status needs (:func:`digest`), never prompt text or tool
input.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: the datagram socket in the spool dir a server listens on to hear of new lines
WAKE_SOCKET = "wake"


def digest(payload: Mapping[str, Any], now: float) -> dict[str, Any]:
    """What the spool keeps of a hook payload: event name, time, notification type, error
    kind, source and the conversation id. Never prompt text, messages or tool input.

    >>> d = digest({"hook_event_name": "UserPromptSubmit", "prompt": "s", "session_id": "c1"}, 5)
    >>> "prompt" in d, d["event"], d["conversation"]
    (False, 'UserPromptSubmit', 'c1')
    """
    event = payload.get("hook_event_name") or payload.get("type")
    conversation = payload.get("session_id") or payload.get("thread-id")

    def short(value: object) -> str | None:
        return value[:80] if isinstance(value, str) else None

    return {
        "t": now,
        "event": short(event),
        "tool": short(payload.get("tool_name")),
        "type": short(payload.get("notification_type")),
        "error": short(payload.get("error")),
        "source": short(payload.get("source")),
        "conversation": short(conversation),
    }


def spool_path(state_dir: Path, session_id: str) -> Path:
    """The spool file of one session."""
    return state_dir / "spool" / f"{session_id}.jsonl"


def read_spool(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete lines of a spool file from ``offset`` on, parsed (bad lines skipped),
    and the offset after the last complete line."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(1 << 20)
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("t"), (int, float)):
            records.append(record)
    return records, offset + end


def append(spool: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Append ``record`` to the spool file ``spool`` (0600, made if new) and wake the
    server if one listens; nothing is raised (no server listening, or no spool dir: the
    next start reads the spool)."""
    line = json.dumps(record) + "\n"
    try:
        fd = os.open(spool, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
            wake.sendto(b"1", os.path.join(os.path.dirname(spool), WAKE_SOCKET))
    except OSError:
        pass
