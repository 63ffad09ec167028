"""The hook command agent CLIs run: ``python -m jupyter_agents.hook SPOOL [JSON]``.

An agent CLI runs it for every hook event with the payload on stdin, or at the end of
each turn (a ``notify`` command) with the payload as its last argument, as its kind sets
it up (:mod:`jupyter_agents.agents.attention`). It appends one
line to the session's spool file (``<state dir>/spool/<session id>.jsonl``) holding
only what status needs (:func:`jupyter_agents.agents.attention.digest`: event, time, type,
error kind, conversation id; never prompt text or tool input), then wakes the server
through the spool's datagram socket if one listens. The spool is written whether or
not a server runs, so nothing is lost while none does. Always exits 0: a hook must
never disturb the agent.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main(argv: list[str]) -> int:
    from jupyter_agents.agents.attention import WAKE_SOCKET, digest

    if not argv:
        return 0
    spool = argv[0]
    try:
        raw = argv[1] if len(argv) > 1 else sys.stdin.read(1 << 20)
        payload = json.loads(raw)
    except (OSError, ValueError):
        return 0
    if not isinstance(payload, dict):
        return 0
    line = json.dumps(digest(payload, time.time())) + "\n"
    try:
        fd = os.open(spool, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
            wake.sendto(b"1", os.path.join(os.path.dirname(spool), WAKE_SOCKET))
    except OSError:
        pass  # no server listening (or no spool dir): the next start reads the spool
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
