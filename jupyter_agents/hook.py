"""The hook agent CLIs run.

``python -m jupyter_agents.hook [--as EVENT] [--answer SHAPE] [--ask WAIT FALLBACK] SPOOL
[JSON]``.

An agent CLI runs it for every hook event with the payload on stdin, or at the end of
each turn (a ``notify`` command) with the payload as its last argument, as its kind sets
it up (its module in :mod:`jupyter_agents.agents`). It appends one
line to the session's spool file (``<state dir>/spool/<session id>.jsonl``) holding
only what status needs (:func:`jupyter_agents.agents.spool.digest`: event, time, type,
error kind, conversation id; never prompt text or tool input), then wakes the server
through the spool's datagram socket if one listens. The spool is written whether or
not a server runs, so nothing is lost while none does. Always exits 0: a hook must
never disturb the agent.

With ``--ask WAIT FALLBACK``, a ``PermissionRequest`` event becomes a pending request
(:mod:`jupyter_agents.agents.permissions`): the hook waits up to ``WAIT`` seconds for
its answer, spools its end, and prints the decision the CLI reads (nothing when there
is none: the CLI's own dialog decides). ``FALLBACK`` is ``shown`` when the CLI's dialog
is on screen while the hook waits (Claude Code), ``dialog`` when the CLI shows it only
after the hook ends (Codex). ``--answer SHAPE`` says how the CLI reads the decision
(:func:`jupyter_agents.agents.permissions.hook_output`: ``claude``, which Claude Code
and Codex read, or ``copilot``); its kind's set-up gives it. Without it (hooks of
sessions started before it existed), a payload that names Copilot CLI's
``permissionRequest`` gets ``copilot``, any other ``claude``.

With ``--as EVENT``, the event is recorded as ``EVENT`` (one of the names
:func:`jupyter_agents.agents.attention.state_after` knows), whatever the payload calls
it: for CLIs whose hook events have other names, or whose payload names none.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main(argv: list[str]) -> int:
    from jupyter_agents.agents.spool import digest

    event: str | None = None
    if argv[:1] == ["--as"] and len(argv) >= 2:
        event, argv = argv[1][:80], argv[2:]
    shape: str | None = None
    if argv[:1] == ["--answer"] and len(argv) >= 2:
        shape, argv = argv[1][:20], argv[2:]
    ask: tuple[float, str] | None = None
    if argv[:1] == ["--ask"] and len(argv) >= 4:
        try:
            ask = (float(argv[1]), argv[2])
        except ValueError:
            return 0
        argv = argv[3:]
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
    started = _started()
    record = digest(payload, started)
    if event is not None:
        record["event"] = event
    if ask is not None and record["event"] == "PermissionRequest":
        if shape is None:  # a hook of a session started before --answer
            shape = "copilot" if payload.get("hookName") == "permissionRequest" else "claude"
        return _ask(spool, payload, record, *ask, shape, started)
    _spool(spool, record)
    return 0


def _started() -> float:
    """When this process started, as a unix time: when the CLI ran the hook, which is
    the event's time. Taken later (once Python has started and read the payload), a
    hook run before another could spool a later time: on a loaded machine the
    ``PermissionRequest`` hook Claude Code runs beside its dialog can take longer to
    start than the dialog takes to be answered and the tool to run. Linux counts a
    process's start in clock ticks (10 ms), so this may be up to a tick early; where
    ``/proc`` cannot tell, it is now."""
    now = time.time()
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # the fields after the command name (which may hold spaces): state is the 3rd
        # field, starttime the 22nd
        ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 600 else now


def _spool(spool: str, record: dict[str, object]) -> None:
    """Append ``record`` to the spool and wake the server if one listens."""
    from jupyter_agents.agents.spool import append

    append(spool, record)


def _ask(
    spool: str,
    payload: dict[str, object],
    record: dict[str, object],
    wait: float,
    fallback: str,
    shape: str,
    asked: float,
) -> int:
    """A pending request for ``payload``, asked at ``asked``; wait for its answer; print
    the decision in ``shape``."""
    from pathlib import Path

    from jupyter_agents.agents import permissions

    parent = os.getppid()
    path = Path(spool)
    folder = permissions.RequestFolder(path.parent.parent)
    request = permissions.PendingRequest.from_payload(
        payload, path.stem, wait, "dialog" if fallback == "dialog" else "shown", asked
    )
    try:
        folder.add(request)
    except OSError:
        _spool(spool, record)
        return 0  # nowhere to keep it: the CLI's dialog decides
    _spool(spool, {**record, "request": request.id})

    signalled: list[int] = []  # ended with its CLI (a terminal closing): stop waiting

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: signalled.append(signum))
    answer = folder.wait(request, parent, stop=lambda: bool(signalled))
    ended = {
        "t": time.time(),
        "event": permissions.ENDED,
        "request": request.id,
        "decision": answer.decision,
        "reason": answer.reason,
        "conversation": record.get("conversation"),
    }
    _spool(spool, ended)
    output = permissions.hook_output(request, answer, shape)
    if output is not None:
        sys.stdout.write(json.dumps(output))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
