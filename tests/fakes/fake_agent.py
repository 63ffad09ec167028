"""Stand-ins for the ``claude`` and ``codex`` CLIs (which need the network).

They honour the flags jupyter_agents uses and keep their files where the real CLIs do
(DESIGN.md section 10), so the product code under test cannot tell the difference:

claude: ``--session-id <uuid>`` (refused if not a UUID or already used), ``--resume
<id>`` / ``-r`` (refused without a transcript), ``--continue`` / ``-c`` (newest
transcript of the cwd); ``$CLAUDE_CONFIG_DIR`` (else ``~/.claude``)
``/sessions/<pid>.json`` while running; ``projects/<slug>/<id>.jsonl`` from the first
message; ``/clear`` rotates the id.

codex: a new thread per run, ``resume <id>`` / ``resume --last``; ``$CODEX_HOME``
(else ``~/.codex``) ``/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`` with a
``session_meta`` first record; ``thread-writer-locks/<id>.lock`` held open while running
(not with ``FAKE_CODEX_NO_LOCK=1``); ``/new`` starts a new thread.

Both read lines from the terminal: ``/exit`` ends, other text is a "message". Every run
appends one JSON line to ``$FAKE_AGENT_LOG`` (default ``~/fake-agents.jsonl``): pid,
argv, cwd, env, the conversation id
(``start``), or the error (``error``); id changes are logged too.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path


def log(event: str, **fields: object) -> None:
    path = os.environ.get("FAKE_AGENT_LOG") or os.path.expanduser("~/fake-agents.jsonl")
    record = {
        "event": event,
        "pid": os.getpid(),
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        **fields,
    }
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def fail(message: str) -> None:
    log("error", message=message)
    print(message, file=sys.stderr, flush=True)
    sys.exit(1)


def is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False


def _hangup(signum: int, frame: object) -> None:
    # a terminal closing sends HUP, CONT and TERM back to back: the first one ends us,
    # the others must not interrupt the clean-up it starts
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def lines() -> object:
    while True:
        print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        text = line.strip()
        if text == "/exit":
            return
        yield text


# -- claude ---------------------------------------------------------------------------


def claude(args: list[str]) -> None:
    home = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    cwd = os.path.realpath(os.getcwd())
    project = home / "projects" / re.sub(r"[^a-zA-Z0-9]", "-", cwd)
    cid: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--session-id":
            cid = args[i + 1]
            if not is_uuid(cid):
                fail("Invalid session ID. Must be a valid UUID.")
            if list(home.glob(f"projects/*/{cid}.jsonl")):
                fail(f"Session ID {cid} is already in use.")
            i += 1
        elif arg in ("--resume", "-r"):
            cid = args[i + 1]
            if not list(home.glob(f"projects/*/{cid}.jsonl")):
                fail(f"No conversation found with session ID: {cid}")
            i += 1
        elif arg in ("--continue", "-c"):
            found = sorted(project.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
            if not found:
                fail("No conversation found to continue")
            cid = found[-1].stem
        i += 1
    cid = cid or str(uuid.uuid4())
    pid_map = home / "sessions" / f"{os.getpid()}.json"
    pid_map.parent.mkdir(parents=True, exist_ok=True)

    def write_map() -> None:
        pid_map.write_text(
            json.dumps({"pid": os.getpid(), "sessionId": cid, "cwd": cwd, "status": "idle"})
        )

    write_map()
    log("start", id=cid)
    print(f"FAKE CLAUDE conversation {cid}", flush=True)
    try:
        for text in lines():
            if text == "/clear":
                cid = str(uuid.uuid4())
                write_map()
                log("clear", id=cid)
                print(f"cleared; conversation {cid}", flush=True)
            elif text:
                project.mkdir(parents=True, exist_ok=True)
                with (project / f"{cid}.jsonl").open("a") as f:
                    record = {"type": "user", "sessionId": cid, "cwd": cwd, "message": text}
                    f.write(json.dumps(record) + "\n")
                print(f"claude heard: {text}", flush=True)
    finally:
        pid_map.unlink(missing_ok=True)


# -- codex ----------------------------------------------------------------------------


class Thread:
    def __init__(self, home: Path, cwd: str, cid: str | None) -> None:
        self.home = home
        self.lock_fd: int | None = None
        if cid is None:
            now = datetime.now(timezone.utc)
            self.id = str(uuid.uuid4())
            folder = home / "sessions" / now.strftime("%Y/%m/%d")
            folder.mkdir(parents=True, exist_ok=True)
            self.rollout = folder / f"rollout-{now.strftime('%Y-%m-%dT%H-%M-%S')}-{self.id}.jsonl"
            meta = {"id": self.id, "timestamp": now.isoformat().replace("+00:00", "Z"), "cwd": cwd}
            self.rollout.write_text(json.dumps({"type": "session_meta", "payload": meta}) + "\n")
        else:
            self.id = cid
            self.rollout = next(home.glob(f"sessions/*/*/*/rollout-*-{cid}.jsonl"))
        if not os.environ.get("FAKE_CODEX_NO_LOCK"):
            lock = home / "thread-writer-locks" / f"{self.id}.lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            self.lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)

    def close(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            (self.home / "thread-writer-locks" / f"{self.id}.lock").unlink(missing_ok=True)


def codex(args: list[str]) -> None:
    home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    cwd = os.getcwd()
    cid: str | None = None
    if args[:1] == ["resume"]:
        rollouts = list(home.glob("sessions/*/*/*/rollout-*.jsonl"))
        if args[1:2] == ["--last"]:
            mine = [p for p in rollouts if json.loads(p.open().readline())["payload"]["cwd"] == cwd]
            if not mine:
                fail("No saved session found for this directory")
            cid = max(mine, key=lambda p: p.stat().st_mtime).stem[-36:]
        else:
            cid = args[1] if len(args) > 1 else ""
            if not any(p.stem.endswith(cid) for p in rollouts) or not is_uuid(cid):
                fail(f"No saved session found with ID {cid}")
    thread = Thread(home, cwd, cid)
    log("start", id=thread.id)
    print(f"FAKE CODEX thread {thread.id}", flush=True)
    try:
        for text in lines():
            if text == "/new":
                thread.close()
                thread = Thread(home, cwd, None)
                log("new", id=thread.id)
                print(f"new thread {thread.id}", flush=True)
            elif text:
                with thread.rollout.open("a") as f:
                    f.write(json.dumps({"type": "response_item", "text": text}) + "\n")
                print(f"codex heard: {text}", flush=True)
    finally:
        thread.close()


def main() -> None:
    signal.signal(signal.SIGHUP, _hangup)
    signal.signal(signal.SIGTERM, _hangup)
    which, args = sys.argv[1], sys.argv[2:]
    sys.argv = [which, *args]
    {"claude": claude, "codex": codex}[which](args)


if __name__ == "__main__":
    main()
