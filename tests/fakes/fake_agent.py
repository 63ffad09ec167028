"""Stand-ins for the ``claude`` and ``codex`` CLIs (which need the network).

They honour the flags jupyter_agents uses and keep their files where the real CLIs do
(docs/agents.md), so the product code under test cannot tell the difference:

claude: ``--session-id <uuid>`` (refused if not a UUID or already used), ``--resume
<id>`` / ``-r`` (refused without a transcript: "No conversation found with session ID:
<id>"; a resumed one prints ``resumed prompt: <text>`` for each old prompt, as the real
CLI draws the old conversation, and refreshes the file's mtime), ``--continue`` / ``-c``
(newest transcript of the cwd); ``$CLAUDE_CONFIG_DIR`` (else ``~/.claude``)
``/sessions/<pid>.json`` while running; ``projects/<slug>/<id>.jsonl`` from the first
message, with records of the real CLI's shape (``user`` and ``assistant`` records whose
``message.content`` is text or ``tool_use``/``tool_result`` blocks, ``timestamp``,
``sessionId``, ``cwd``); at its first prompt Claude's retention clean-up: other
conversation files not written for ``cleanupPeriodDays`` (``settings.json``, default 30)
are deleted (logged as ``cleanup``; the real CLI does it in the background of an
interactive session, at least ten minutes after that prompt); ``/clear`` rotates the
id. Hooks: those of ``--settings <file or JSON>`` and of
the user's own ``settings.json`` (both fire, as with the real CLI) run through
``/bin/sh -c`` with the payload JSON on stdin, waited for, with the real CLI's payload
shapes (``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``, ...):
``SessionStart`` (source ``startup``, ``resume`` with ``--resume``/``--continue``,
``clear`` with the new id after ``/clear``, which first ends the old id with
``SessionEnd`` reason ``clear``, as 2.1.197 does).

Lines typed into the fake claude (a "turn" runs ``UserPromptSubmit`` first):

- text: ``PreToolUse`` + ``PostToolUse`` (tool ``Bash``), the reply ``claude heard:
  <text>``, ``Stop``;
- ``/hold``: ``PreToolUse``, then the tool "runs" (working) until the next line;
- ``/perm``: ``PreToolUse``, ``PermissionRequest`` (run in the background, as the real
  CLI does while its dialog shows; tool ``Bash``, command ``echo fake``, one suggestion
  :data:`PERM_SUGGESTION`) + ``Notification`` (``permission_prompt``), then waits for
  the answer line or a hook's decision, whichever comes first: a hook's allow goes on
  as an answer line would (``Allowed by PermissionRequest hook``); its deny ends the
  turn with no tool run (``claude heard: denied: <message>``, ``Stop``);
- ``/fail``: ``StopFailure`` (``error`` ``authentication_failed``), ends the turn;
- after ``/hold`` or an answer to ``/perm``: ``PostToolUse``, then the line goes on:
  ``/hold``, ``/perm`` or ``/fail`` continue the same turn as above, anything else ends
  it (reply, ``Stop``). So ``/hold`` then ``/perm`` then ``/hold`` then ``/fail`` walks
  working -> permission -> working -> error with every state held until the next line;
- ``/idle``: ``Notification`` (``idle_prompt``), no turn;
- ``/write PATH TEXT``: an edit, as its tools make one: TEXT and a newline written to
  PATH (relative to its folder), then ``wrote PATH``; no turn;
- ``/commit MESSAGE``: what its Bash tool does when asked to commit: ``git add -A`` and
  ``git commit -m MESSAGE`` in its folder, then ``committed`` (or git's words); no turn;
- ``/bulk N``: N assistant records of about 1 KiB each appended to the conversation;
- ``/spend N [S]``: works (``PreToolUse``) and writes an assistant record using ``N``
  output tokens (and :data:`SPEND_USAGE`) every ``S`` seconds (default 0.2) until it
  reads Escape: it then prints ``Interrupted by user`` and is back at its prompt, with
  no hook (as the real CLI: none fires on an Esc interrupt). Every byte it reads
  meanwhile is logged (``input``, ``data``), the interrupt too (``interrupted``).
- ``/clear``: see above; ``/exit``: ``SessionEnd`` (``prompt_input_exit``), exit.

Usage, as the real CLI records it: each assistant message has ``message.id``,
``message.model`` (``--model``, default :data:`CLAUDE_MODEL`) and ``message.usage``
(:data:`TOOL_USAGE` for a turn's tool call; :data:`REPLY_USAGE` for its reply, which
is written as two records of one message, a thinking and a text block, the first with
:data:`PARTIAL_OUTPUT` output tokens: the counts of a message still streaming).

codex: a new thread per run, ``resume <id>`` / ``resume --last`` (a resumed one prints
``resumed prompt: <text>`` for each old user message); ``$CODEX_HOME`` (else
``~/.codex``) ``/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`` of real rollout lines
(``{timestamp, type, payload}``: ``session_meta`` first, then per message ``response_item``
payloads ``message`` (user), ``function_call`` (shell) and ``function_call_output``,
``message`` (assistant)); ``thread-writer-locks/<id>.lock`` held open while running
(not with ``FAKE_CODEX_NO_LOCK=1``); ``/new`` starts a new thread. Usage, as Codex
records it: a ``token_count`` event without ``info`` when a thread starts (rate limits
first), a ``turn_context`` record (``model``: ``-m``/``--model`` or ``-c model=...``,
default :data:`CODEX_MODEL`) at each turn, and after its answer a ``token_count`` event
(``info``: ``total_token_usage`` cumulative, ``last_token_usage`` = :data:`CODEX_USAGE`)
written twice (codex repeats it unchanged for a rate-limit update); ``/spend N [S]`` as
for claude, with ``token_count`` events of ``N`` output tokens. ``-c key=value`` /
``--config key=value`` and ``--no-daemon`` (before or after ``resume``): ``notify`` (a
TOML array) is run directly (no shell) at the end of every turn with one more argument,
the JSON
``{"type": "agent-turn-complete", "thread-id", "turn-id", "cwd", "input-messages",
"last-assistant-message"}`` (the fake waits for it; the real one does not).
``FAKE_CODEX_DAEMON=1`` models Codex 0.171's TUI instead: the thread lock is held by a
detached ``codex app-server`` daemon (its own session, outside the terminal's process
tree; one per ``$CODEX_HOME``, shared by every codex of that home, see
:func:`app_server`), and the rollout appears only at the first message (``--no-daemon`` opts out, as
with the real one). The daemon
outlives the codex processes for ``FAKE_CODEX_DAEMON_LINGER`` seconds (default 3) after
its last client went, then exits, so tests leave nothing behind.

Both read lines from the terminal: ``/exit`` ends, other text is a "message". Every run
appends one JSON line to ``$FAKE_AGENT_LOG`` (default ``~/fake-agents.jsonl``): pid,
argv, cwd, env, the conversation id
(``start``), or the error (``error``); id changes are logged too, and every hook or
notify command run (``hook``: ``name``, ``payload``, ``command``, ``returncode``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


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


def read_line(prompt: str = "> ") -> str | None:
    """The next line typed (stripped), None at the end of input."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    return line.strip() if line else None


def line_or(decided: threading.Event, prompt: str) -> str | None:
    """The next line typed (stripped), or None once ``decided`` is set first (or at the
    end of input)."""
    print(prompt, end="", flush=True)
    while not decided.is_set():
        ready, _, _ = select.select([sys.stdin], [], [], 0.05)
        if ready:
            line = sys.stdin.readline()
            return line.strip() if line else None
    return None


def lines() -> Iterator[str]:
    while True:
        text = read_line()
        if text is None or text == "/exit":
            return
        yield text


# -- claude ---------------------------------------------------------------------------

CLAUDE_MODEL = "claude-fake-4"
#: ``message.usage`` of a turn's tool-call message and of its reply (realistic shapes:
#: most input read from the prompt cache)
TOOL_USAGE = {
    "input_tokens": 4,
    "cache_creation_input_tokens": 2048,
    "cache_read_input_tokens": 12000,
    "output_tokens": 120,
}
REPLY_USAGE = {
    "input_tokens": 6,
    "cache_creation_input_tokens": 180,
    "cache_read_input_tokens": 14000,
    "output_tokens": 64,
}
#: the "allow from now on" suggestion a ``/perm`` request offers (Claude's shape)
PERM_SUGGESTION = {
    "type": "addRules",
    "rules": [{"toolName": "Bash", "ruleContent": "echo:*"}],
    "behavior": "allow",
    "destination": "session",
}
#: the output tokens of the reply's first record (its message still streaming)
PARTIAL_OUTPUT = 12
#: ``/spend``: each record's usage (its output tokens are the N given)
SPEND_USAGE = {
    "input_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 20000,
}


def spend(write: Any, every: float) -> bool:
    """Work until Escape is read from the terminal: ``write()`` a usage record every
    ``every`` seconds, log every byte read (``input``). Whether Escape ended it (else
    the terminal went away, or 600 s passed)."""
    import select
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    if saved is not None:
        tty.setcbreak(fd)
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], every)
            if not ready:
                write()
                continue
            data = os.read(fd, 1024)
            if not data:
                return False
            log("input", data=data.decode("utf-8", "replace"))
            if b"\x1b" in data:
                log("interrupted", data=data.decode("utf-8", "replace"))
                return True
        return False
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def user_prompts(path: Path) -> list[str]:
    """The prompts typed in a conversation file (user records with text content)."""
    prompts = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if entry.get("type") == "user" and isinstance(content, str):
            prompts.append(content)
    return prompts


def clean_up(home: Path, keep: Path) -> None:
    """Claude's retention clean-up: conversation files not written for
    ``cleanupPeriodDays`` (settings.json; default 30) are deleted (the real CLI does it
    in the background of an interactive session; this one at its first prompt)."""
    try:
        days = json.loads((home / "settings.json").read_text()).get("cleanupPeriodDays", 30)
    except (OSError, ValueError, AttributeError):
        days = 30
    cutoff = time.time() - float(days) * 86400
    for path in home.glob("projects/*/*.jsonl"):
        with contextlib.suppress(OSError):
            if path != keep and path.stat().st_mtime < cutoff:
                path.unlink()
                log("cleanup", path=str(path))


class ClaudeHooks:
    """The hook commands of one claude process: ``--settings`` plus the user's own
    ``settings.json`` (both fire)."""

    def __init__(self, home: Path, settings: list[str], cwd: str) -> None:
        self.cwd = cwd
        self.sources: list[dict[str, Any]] = []
        for value in [str(home / "settings.json"), *settings]:
            config = self._load(value)
            if isinstance(config, dict) and isinstance(config.get("hooks"), dict):
                self.sources.append(config["hooks"])

    @staticmethod
    def _load(value: str) -> Any:
        if value.lstrip().startswith("{"):
            try:
                return json.loads(value)
            except ValueError:
                fail(f"Invalid JSON in --settings: {value[:80]}")
        try:
            return json.loads(Path(value).read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _matches(matcher: object, value: object) -> bool:
        if matcher in (None, "", "*"):
            return True
        if not isinstance(matcher, str) or not isinstance(value, str):
            return False
        return any(re.fullmatch(m, value) for m in matcher.split("|"))

    def commands(self, event: str, payload: dict[str, Any]) -> list[tuple[str, float]]:
        target = {
            "PreToolUse": "tool_name",
            "PostToolUse": "tool_name",
            "PermissionRequest": "tool_name",
            "SessionStart": "source",
            "SessionEnd": "reason",
            "Notification": "notification_type",
            "StopFailure": "error",
        }.get(event)
        found = []
        for hooks in self.sources:
            for group in hooks.get(event) or []:
                if not isinstance(group, dict):
                    continue
                if target and not self._matches(group.get("matcher"), payload.get(target)):
                    continue
                for hook in group.get("hooks") or []:
                    if isinstance(hook, dict) and hook.get("type") == "command":
                        found.append((str(hook["command"]), float(hook.get("timeout", 60))))
        return found

    def ask(self, cid: str, transcript: Path, **fields: Any) -> threading.Event:
        """Run the ``PermissionRequest`` hooks in the background, as the real CLI does
        while its dialog is on screen; the event is set once one printed a decision
        (in ``self.decision``), never if none did."""
        decided = threading.Event()
        self.decision: dict[str, Any] | None = None

        def run() -> None:
            out = self.fire("PermissionRequest", cid, transcript, **fields)
            for text in out:
                try:
                    decision = json.loads(text)["hookSpecificOutput"]["decision"]
                except (ValueError, KeyError, TypeError):
                    continue
                self.decision = decision
                decided.set()
                return

        threading.Thread(target=run, daemon=True).start()
        return decided

    def fire(self, event: str, cid: str, transcript: Path, **fields: Any) -> list[str]:
        """Run the hooks of ``event``, waited for; what each printed."""
        printed = []
        payload = {
            "session_id": cid,
            "transcript_path": str(transcript),
            "cwd": self.cwd,
            "hook_event_name": event,
            **fields,
        }
        env = {**os.environ, "CLAUDE_PROJECT_DIR": self.cwd, "CLAUDE_CODE_SESSION_ID": cid}
        for command, timeout in self.commands(event, payload):
            try:
                done = subprocess.run(
                    ["/bin/sh", "-c", command],
                    input=json.dumps(payload).encode(),
                    env=env,
                    cwd=self.cwd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    timeout=timeout,
                    check=False,
                )
                code: int | None = done.returncode
                printed.append(done.stdout.decode(errors="replace"))
            except subprocess.TimeoutExpired:
                code = None
            log("hook", name=event, payload=payload, command=command, returncode=code)
        return printed


def claude(args: list[str]) -> None:
    home = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    cwd = os.path.realpath(os.getcwd())
    project = home / "projects" / re.sub(r"[^a-zA-Z0-9]", "-", cwd)
    cid: str | None = None
    source = "startup"
    settings: list[str] = []
    model = CLAUDE_MODEL
    resumed: Path | None = None
    cleaned = False
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
            found = list(home.glob(f"projects/*/{cid}.jsonl"))
            if not found:
                fail(f"No conversation found with session ID: {cid}")
            resumed = found[0]
            source = "resume"
            i += 1
        elif arg in ("--continue", "-c"):
            found = sorted(project.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
            if not found:
                fail("No conversation found to continue")
            cid = found[-1].stem
            resumed = found[-1]
            source = "resume"
        elif arg == "--settings":
            settings.append(args[i + 1])
            i += 1
        elif arg == "--model":
            model = args[i + 1]
            i += 1
        i += 1
    cid = cid or str(uuid.uuid4())
    hooks = ClaudeHooks(home, settings, cwd)
    pid_map = home / "sessions" / f"{os.getpid()}.json"
    pid_map.parent.mkdir(parents=True, exist_ok=True)

    def write_map() -> None:
        pid_map.write_text(
            json.dumps({"pid": os.getpid(), "sessionId": cid, "cwd": cwd, "status": "idle"})
        )

    def fire(event: str, **fields: Any) -> None:
        hooks.fire(event, cid, project / f"{cid}.jsonl", **fields)

    def tool(event: str, **fields: Any) -> None:
        tool_input = {"command": "echo fake", "description": "a fake tool call"}
        fire(event, tool_name="Bash", tool_input=tool_input, **fields)

    def record(kind: str, message: dict[str, Any], **extra: Any) -> None:
        """Append one record of the real CLI's shape to the conversation's file."""
        project.mkdir(parents=True, exist_ok=True)
        entry = {
            "parentUuid": None,
            "isSidechain": False,
            "type": kind,
            "message": message,
            "uuid": str(uuid.uuid4()),
            "timestamp": now_iso(),
            "cwd": cwd,
            "sessionId": cid,
            "version": "2.1.197-fake",
            **extra,
        }
        with (project / f"{cid}.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def assistant(
        content: list[dict[str, Any]],
        usage: dict[str, int] | None = None,
        message_id: str | None = None,
    ) -> None:
        message: dict[str, Any] = {
            "id": message_id or f"msg_{uuid.uuid4().hex[:24]}",
            "role": "assistant",
            "model": model,
            "type": "message",
            "content": content,
        }
        if usage is not None:
            message["usage"] = {"service_tier": "standard", **usage}
        record("assistant", message, requestId=f"req_{uuid.uuid4().hex[:24]}")

    def turn(text: str) -> None:
        """One prompt, until Stop or StopFailure (see the module docstring)."""
        nonlocal cleaned
        prompt_id = str(uuid.uuid4())
        fire("UserPromptSubmit", prompt=text, prompt_id=prompt_id, permission_mode="default")
        record("user", {"role": "user", "content": text}, promptId=prompt_id)
        if not cleaned:  # Claude's housekeeping starts with the first prompt
            cleaned = True
            clean_up(home, project / f"{cid}.jsonl")
        step: str | None = text
        while True:
            if step == "/fail":
                message = "Not logged in · Please run /login"
                fire("StopFailure", error="authentication_failed", last_assistant_message=message)
                print(f"API error: authentication_failed ({message})", flush=True)
                return
            tool("PreToolUse")
            if step == "/perm":
                decided = hooks.ask(
                    cid,
                    project / f"{cid}.jsonl",
                    tool_name="Bash",
                    tool_input={"command": "echo fake", "description": "a fake tool call"},
                    permission_suggestions=[PERM_SUGGESTION],
                )
                fire(
                    "Notification",
                    message="Claude needs your permission to use Bash",
                    notification_type="permission_prompt",
                )
                print("Do you want to proceed? (any line answers)", flush=True)
                step = line_or(decided, "permission> ")
                if step is None and decided.is_set():
                    decision = hooks.decision or {}
                    log("decision", decision=decision)
                    if decision.get("behavior") == "deny":
                        denied = str(decision.get("message"))
                        print(f"Denied by PermissionRequest hook: {denied}", flush=True)
                        print(f"claude heard: denied: {denied}", flush=True)
                        fire("Stop", stop_hook_active=False)
                        return
                    print("Allowed by PermissionRequest hook", flush=True)
                    step = ""
            elif step == "/hold":
                print("working (until the next line)", flush=True)
                step = read_line("working> ")
            if step is None:
                return
            tool("PostToolUse", tool_response={"stdout": "fake", "stderr": ""})
            if step not in ("/hold", "/perm", "/fail"):
                break
        use = f"toolu_{uuid.uuid4().hex[:20]}"
        tool_input = {"command": "echo fake", "description": "a fake tool call"}
        assistant(
            [{"type": "tool_use", "id": use, "name": "Bash", "input": tool_input}], TOOL_USAGE
        )
        result = {"type": "tool_result", "tool_use_id": use, "content": "fake", "is_error": False}
        record("user", {"role": "user", "content": [result]})
        reply = f"msg_{uuid.uuid4().hex[:24]}"
        thinking = [{"type": "thinking", "thinking": "the user typed a line", "signature": "x"}]
        assistant(thinking, {**REPLY_USAGE, "output_tokens": PARTIAL_OUTPUT}, reply)
        assistant([{"type": "text", "text": f"claude heard: {text}"}], REPLY_USAGE, reply)
        print(f"claude heard: {text}", flush=True)
        fire("Stop", stop_hook_active=False)

    write_map()
    log("start", id=cid)
    try:
        fire("SessionStart", source=source, model=model)
        print(f"FAKE CLAUDE conversation {cid}", flush=True)
        if resumed is not None:  # the real one draws the old conversation
            for prompt in user_prompts(resumed):
                print(f"resumed prompt: {prompt}", flush=True)
            os.utime(resumed)
        while True:
            text = read_line()
            if text is None or text == "/exit":
                # the pid map goes first: whoever ends us may be waiting for that
                pid_map.unlink(missing_ok=True)
                fire("SessionEnd", reason="other" if text is None else "prompt_input_exit")
                break
            if text == "/clear":
                fire("SessionEnd", reason="clear")
                cid = str(uuid.uuid4())
                write_map()
                log("clear", id=cid)
                fire("SessionStart", source="clear")
                print(f"cleared; conversation {cid}", flush=True)
            elif text.startswith("/bulk "):
                kib = int(text.split()[1])
                chunk = "x" * 900
                for n in range(kib):
                    assistant([{"type": "text", "text": f"bulk {n} {chunk}"}])
                print(f"bulk wrote {kib} records", flush=True)
            elif text.startswith("/write "):
                _, target, content = text.split(" ", 2)
                Path(target).write_text(content + "\n")
                print(f"wrote {target}", flush=True)
            elif text.startswith("/commit "):
                message = text.split(" ", 1)[1]
                done = subprocess.run(["git", "add", "-A"], capture_output=True, text=True)
                if not done.returncode:
                    done = subprocess.run(
                        ["git", "commit", "-q", "-m", message], capture_output=True, text=True
                    )
                said = (done.stderr or done.stdout).strip()
                print("committed" if not done.returncode else f"git: {said}", flush=True)
            elif text == "/idle":
                fire(
                    "Notification",
                    message="Claude is waiting for your input",
                    notification_type="idle_prompt",
                )
            elif text.startswith("/spend "):
                words = text.split()
                output, every = int(words[1]), float(words[2]) if len(words) > 2 else 0.2
                fire("UserPromptSubmit", prompt=text, prompt_id=str(uuid.uuid4()))
                tool("PreToolUse")
                print("spending (Escape interrupts)", flush=True)
                usage = {**SPEND_USAGE, "output_tokens": output}
                more = [{"type": "text", "text": "more"}]
                if spend(functools.partial(assistant, more, usage), every):
                    print("Interrupted by user", flush=True)
            elif text:
                turn(text)
    finally:
        pid_map.unlink(missing_ok=True)


# -- codex ----------------------------------------------------------------------------


def new_rollout(home: Path, cwd: str, cid: str) -> Path:
    now = datetime.now(timezone.utc)
    folder = home / "sessions" / now.strftime("%Y/%m/%d")
    folder.mkdir(parents=True, exist_ok=True)
    rollout = folder / f"rollout-{now.strftime('%Y-%m-%dT%H-%M-%S')}-{cid}.jsonl"
    stamp = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    meta = {
        "id": cid,
        "timestamp": stamp,
        "cwd": cwd,
        "originator": "codex_cli_rs",
        "cli_version": "0.171.0-fake",
    }
    rollout.write_text(
        json.dumps({"timestamp": stamp, "type": "session_meta", "payload": meta}) + "\n"
    )
    return rollout


def rollout_prompts(path: Path) -> list[str]:
    """The user messages of a rollout (``response_item`` messages of role user)."""
    prompts = []
    for line in path.read_text().splitlines():
        try:
            item = json.loads(line).get("payload") or {}
        except (ValueError, AttributeError):
            continue
        if item.get("type") == "message" and item.get("role") == "user":
            prompts += [c["text"] for c in item.get("content", []) if c.get("type") == "input_text"]
    return prompts


def _text(direction: str, text: str) -> dict[str, str]:
    return {"type": f"{direction}_text", "text": text}


CODEX_MODEL = "gpt-5.4"
#: ``last_token_usage`` of each turn (input includes the cached part, output the
#: reasoning)
CODEX_USAGE = {
    "input_tokens": 9000,
    "cached_input_tokens": 6000,
    "output_tokens": 400,
    "reasoning_output_tokens": 128,
    "total_tokens": 9400,
}


def take_lock(home: Path, cid: str) -> int:
    lock = home / "thread-writer-locks" / f"{cid}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def drop_lock(home: Path, cid: str, fd: int) -> None:
    os.close(fd)
    (home / "thread-writer-locks" / f"{cid}.lock").unlink(missing_ok=True)


class Thread:
    def __init__(
        self, home: Path, cwd: str, cid: str | None, daemon: AppServerClient | None = None
    ) -> None:
        self.home = home
        self.cwd = cwd
        self.daemon = daemon
        self.lock_fd: int | None = None
        self.rollout: Path | None = None
        self.total: dict[str, int] = {}
        self.model = CODEX_MODEL
        if cid is None:
            self.id = str(uuid.uuid4())
            if daemon is None:  # the daemon's TUI writes it at the first message only
                self.rollout = new_rollout(home, cwd, self.id)
        else:
            self.id = cid
            self.rollout = next(home.glob(f"sessions/*/*/*/rollout-*-{cid}.jsonl"))
        if daemon is not None:
            daemon.call("open", self.id)
        elif not os.environ.get("FAKE_CODEX_NO_LOCK"):
            self.lock_fd = take_lock(home, self.id)

    def token_count(self, usage: dict[str, int] | None, repeat: int = 1) -> None:
        """A ``token_count`` event (``usage``: the last request's; None: no info yet),
        the cumulative total kept; written ``repeat`` times."""
        info = None
        if usage is not None:
            for key, value in usage.items():
                self.total[key] = self.total.get(key, 0) + value
            info = {
                "total_token_usage": dict(self.total),
                "last_token_usage": dict(usage),
                "model_context_window": 272000,
            }
        limits = {"primary": {"used_percent": 7.0, "window_minutes": 300, "resets_at": 0}}
        for _ in range(repeat):
            self.append({"type": "token_count", "info": info, "rate_limits": limits}, "event_msg")

    def append(self, payload: dict[str, Any], kind: str = "response_item") -> None:
        """One rollout line of the real shape: ``{timestamp, type, payload}``."""
        if self.rollout is None:
            self.rollout = new_rollout(self.home, self.cwd, self.id)
        line = {"timestamp": now_iso(), "type": kind, "payload": payload}
        with self.rollout.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def turn(self, text: str, reply: str) -> None:
        """A user message, a shell call and its output, the assistant's answer, its
        token count."""
        context = {"cwd": self.cwd, "approval_policy": "on-request", "model": self.model}
        self.append(context, "turn_context")
        self.append({"type": "message", "role": "user", "content": [_text("input", text)]})
        call = f"call_{uuid.uuid4().hex[:20]}"
        command = {"command": ["bash", "-lc", "echo fake"], "workdir": self.cwd}
        self.append(
            {
                "type": "function_call",
                "name": "shell",
                "arguments": json.dumps(command),
                "call_id": call,
            }
        )
        output = json.dumps({"output": "fake\n", "metadata": {"exit_code": 0}})
        self.append({"type": "function_call_output", "call_id": call, "output": output})
        self.append({"type": "message", "role": "assistant", "content": [_text("output", reply)]})
        self.token_count(CODEX_USAGE, repeat=2)

    def close(self) -> None:
        if self.daemon is not None:
            with contextlib.suppress(OSError):
                self.daemon.call("close", self.id)
        if self.lock_fd is not None:
            drop_lock(self.home, self.id, self.lock_fd)
            self.lock_fd = None


def codex_config(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``-c key=value`` / ``--config key=value`` overrides (values parsed as TOML, else
    kept as strings, as codex does; ``--no-daemon`` shows as the key ``--no-daemon``)
    and the other arguments."""
    overrides: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "--config") and i + 1 < len(args):
            pair = args[i + 1]
            i += 2
        elif arg.startswith("--config="):
            pair = arg.split("=", 1)[1]
            i += 1
        elif arg == "--no-daemon":
            overrides["--no-daemon"] = True
            i += 1
            continue
        else:
            rest.append(arg)
            i += 1
            continue
        key, sep, value = pair.partition("=")
        if not sep:
            fail(f"Invalid override (missing '='): {pair}")
        overrides[key.strip()] = parse_toml_value(value.strip())
    return overrides, rest


def _codex_model(config: dict[str, Any], args: list[str]) -> str:
    """``-m``/``--model`` (among the other arguments), else ``-c model=...``."""
    for i, arg in enumerate(args):
        if arg in ("-m", "--model") and i + 1 < len(args):
            return args[i + 1]
    value = config.get("model")
    return value if isinstance(value, str) else CODEX_MODEL


def parse_toml_value(value: str) -> Any:
    try:
        import tomllib
    except ImportError:  # Python 3.10: JSON arrays of strings are TOML too
        try:
            return json.loads(value)
        except ValueError:
            return value
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def notify(command: object, thread: Thread, text: str, reply: str) -> None:
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        return
    payload = {
        "type": "agent-turn-complete",
        "thread-id": thread.id,
        "turn-id": str(uuid.uuid4()),
        "cwd": thread.cwd,
        "input-messages": [text],
        "last-assistant-message": reply,
    }
    try:
        done = subprocess.run(
            [*command, json.dumps(payload)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        code: int | None = done.returncode
    except (OSError, subprocess.TimeoutExpired):
        code = None
    log("hook", name="notify", payload=payload, command=command, returncode=code)


def codex(args: list[str]) -> None:
    if args[:2] == ["app-server", "--fake-daemon"]:
        app_server(Path(args[2]))
        return
    home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    cwd = os.getcwd()
    config, args = codex_config(args)
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
    wants_daemon = os.environ.get("FAKE_CODEX_DAEMON") and not config.get("--no-daemon")
    daemon = AppServerClient(home) if wants_daemon else None
    thread = Thread(home, cwd, cid, daemon)
    model = _codex_model(config, args)
    thread.model = model
    if thread.rollout is not None:
        thread.token_count(None)
    log("start", id=thread.id)
    print(f"FAKE CODEX thread {thread.id}", flush=True)
    if cid is not None and thread.rollout is not None:  # the real one draws the old thread
        for prompt in rollout_prompts(thread.rollout):
            print(f"resumed prompt: {prompt}", flush=True)
    try:
        for text in lines():
            if text == "/new":
                thread.close()
                thread = Thread(home, cwd, None, daemon)
                thread.model = model
                log("new", id=thread.id)
                print(f"new thread {thread.id}", flush=True)
            elif text.startswith("/spend "):
                words = text.split()
                output, every = int(words[1]), float(words[2]) if len(words) > 2 else 0.2
                usage = {"input_tokens": 20000, "cached_input_tokens": 18000}
                usage.update(output_tokens=output, reasoning_output_tokens=0)
                usage["total_tokens"] = usage["input_tokens"] + output
                print("spending (Escape interrupts)", flush=True)
                if spend(functools.partial(thread.token_count, usage), every):
                    print("■ Conversation interrupted", flush=True)
            elif text:
                reply = f"codex heard: {text}"
                thread.turn(text, reply)
                print(reply, flush=True)
                notify(config.get("notify"), thread, text, reply)
    finally:
        thread.close()
        if daemon is not None:
            daemon.close()


# -- codex app-server daemon (FAKE_CODEX_DAEMON=1) ------------------------------------


def daemon_socket(home: Path) -> str:
    """The daemon's socket: abstract (no file, no path length limit), one per home."""
    import hashlib

    return "\0fake-codex-app-server-" + hashlib.sha256(str(home).encode()).hexdigest()[:16]


class AppServerClient:
    """A codex TUI's connection to the app-server daemon of its ``$CODEX_HOME``, which
    it starts (detached: a new session, reparented to init) when none answers."""

    def __init__(self, home: Path) -> None:
        path = daemon_socket(home)
        deadline = time.monotonic() + 10
        started = False
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                break
            except OSError:
                sock.close()
                if not started:
                    self._spawn(home)
                    started = True
                if time.monotonic() > deadline:
                    fail("codex app-server daemon did not start")
                time.sleep(0.05)
        self.sock = sock
        self.reader = sock.makefile("r")

    @staticmethod
    def _spawn(home: Path) -> None:
        argv = [sys.executable, os.path.abspath(__file__), "codex", "app-server"]
        # double fork: the daemon's parent exits at once, so it is re-parented to init
        # (or the nearest subreaper) and is in no terminal's process tree or session
        middle = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True,"
                " stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
                " close_fds=True)",
                *argv,
                "--fake-daemon",
                str(home),
            ],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        middle.wait()

    def call(self, op: str, cid: str) -> None:
        self.sock.sendall((json.dumps({"op": op, "id": cid}) + "\n").encode())
        self.reader.readline()  # done: the lock is held (or dropped)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def app_server(home: Path) -> None:
    """The daemon: holds ``thread-writer-locks/<id>.lock`` for its clients' threads,
    drops a client's locks when it disconnects, exits ``FAKE_CODEX_DAEMON_LINGER``
    seconds after its last client went (or when another daemon owns the socket)."""
    import selectors

    linger = float(os.environ.get("FAKE_CODEX_DAEMON_LINGER", "3"))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(daemon_socket(home))
    except OSError:
        return  # another daemon serves this home
    server.listen()
    log("daemon", home=str(home))
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    clients: dict[socket.socket, tuple[bytearray, dict[str, int]]] = {}
    idle_since: float | None = time.monotonic()
    try:
        while True:
            if idle_since is not None and time.monotonic() - idle_since > linger:
                return
            for key, _ in sel.select(0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is server:
                    conn, _ = server.accept()
                    clients[conn] = (bytearray(), {})
                    sel.register(conn, selectors.EVENT_READ)
                    idle_since = None
                    continue
                buf, locks = clients[sock]
                data = sock.recv(4096)
                if not data:
                    sel.unregister(sock)
                    sock.close()
                    for cid, fd in locks.items():
                        drop_lock(home, cid, fd)
                    del clients[sock]
                    if not clients:
                        idle_since = time.monotonic()
                    continue
                buf += data
                while b"\n" in buf:
                    line, _, rest = bytes(buf).partition(b"\n")
                    buf[:] = rest
                    request = json.loads(line)
                    cid = request["id"]
                    if request["op"] == "open" and cid not in locks:
                        locks[cid] = take_lock(home, cid)
                    elif request["op"] == "close" and cid in locks:
                        drop_lock(home, cid, locks.pop(cid))
                    sock.sendall(b"ok\n")
    finally:
        for _, locks in clients.values():
            for cid, fd in locks.items():
                drop_lock(home, cid, fd)
        server.close()


def main() -> None:
    signal.signal(signal.SIGHUP, _hangup)
    signal.signal(signal.SIGTERM, _hangup)
    which, args = sys.argv[1], sys.argv[2:]
    sys.argv = [which, *args]
    {"claude": claude, "codex": codex}[which](args)


if __name__ == "__main__":
    main()
