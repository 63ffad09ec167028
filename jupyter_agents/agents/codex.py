"""Codex CLI (docs/agents.md).

Codex cannot be given an id up front, so the id is captured after launch from evidence
tied to *that* process: the thread lock it holds open
(``$CODEX_HOME/thread-writer-locks/<id>.lock``, seen in the open files of the session's
processes), which also follows a switch to a new thread. Only while no lock is visible,
a rollout counts whose ``session_meta`` names the session's cwd, started within a few
seconds of the process, and is held by no other session; never "the newest file".

On resume: ``codex resume <id>``; a session whose id was never known starts a new
conversation in its folder (never ``codex resume --last``: the newest conversation on
the machine may be someone else's), and the folder's rollouts are offered instead.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from contextlib import suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from jupyter_agents.agents.base import (
    AgentKind,
    FolderConversation,
    Launch,
    home_of,
    is_uuid,
    newest_conversations,
)
from jupyter_agents.agents.hooks import ask_command, hook_command, spool_dir
from jupyter_agents.agents.markdown import code, timestamp, tool_call, tool_result, turn
from jupyter_agents.agents.turns import call, other, plan, result, said, turn_event
from jupyter_agents.agents.usage import (
    BadRecord,
    Record,
    Tokens,
    UsageReader,
    count,
    epoch,
    json_object,
    price_row,
)
from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session


def codex_notify(state_dir: Path, session_id: str) -> str:
    """The ``-c`` value that makes Codex run our hook at each turn's end (TOML array).

    Codex passes the payload as one more argument. ``notify`` needs no hook trust,
    so the user's trust settings stay as they are.
    """
    spool_dir(state_dir)
    return "notify=" + json.dumps(hook_command(state_dir, session_id))


#: Codex hook events we subscribe to (besides ``notify``), with the label Codex's hook
#: trust keys use for each (codex-rs ``hooks/src/lib.rs`` ``hook_key``)
CODEX_EVENTS = {
    "PermissionRequest": "permission_request",
    "UserPromptSubmit": "user_prompt_submit",
    "PostToolUse": "post_tool_use",
}
#: where Codex says hooks given with ``-c`` come from, in their trust keys
CODEX_FLAGS_SOURCE = "/<session-flags>/config.toml"


def codex_hook_hash(label: str, handler: Mapping[str, Any]) -> str:
    """The hash Codex 0.171 records for a trusted hook (``trusted_hash``): SHA-256 of the
    hook's identity as compact JSON with sorted keys (codex-rs ``hook_hash``), the
    handler with Codex's defaults filled in.

    >>> codex_hook_hash("stop", {"type": "command", "command": "x", "timeout": 5})[:14]
    'sha256:2dcb998'
    """
    import hashlib

    full = {"async": False, "timeout": 600, **handler}
    identity = {"event_name": label, "hooks": [full]}
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def codex_hooks(state_dir: Path, session_id: str, ask_wait: float) -> list[str]:
    """The ``-c`` options that give a Codex process our hooks (:data:`CODEX_EVENTS`;
    ``PermissionRequest`` waits ``ask_wait`` seconds for an answer from elsewhere, then
    Codex shows its own dialog; 0: no such hook) and trust those hooks, and only those:
    each by the hash Codex records when a person trusts a hook in ``/hooks``, for the
    hooks given on this command line (the user's config and trust stay as they are;
    never the flag that trusts every hook, which would trust a cloned repository's
    hooks too)."""
    import shlex

    spool_dir(state_dir)
    args: list[str] = []
    trusted: dict[str, dict[str, str]] = {}
    for event, label in CODEX_EVENTS.items():
        if event == "PermissionRequest":
            if ask_wait <= 0:
                continue
            argv = ask_command(state_dir, session_id, ask_wait, "dialog")
            handler: dict[str, Any] = {
                "type": "command",
                "command": shlex.join(argv),
                "timeout": int(ask_wait) + 30,
            }
        else:
            handler = {
                "type": "command",
                "command": shlex.join(hook_command(state_dir, session_id)),
                "timeout": 30,
            }
        args += ["-c", f"hooks.{event}=[{{hooks=[{_toml_inline(handler)}]}}]"]
        trusted[f"{CODEX_FLAGS_SOURCE}:{label}:0:0"] = {
            "trusted_hash": codex_hook_hash(label, handler)
        }
    if trusted:
        table = ",".join(
            f"{json.dumps(key)}={_toml_inline(value)}" for key, value in trusted.items()
        )
        args += ["-c", f"hooks.state={{{table}}}"]
    return args


def _toml_inline(table: Mapping[str, Any]) -> str:
    """A TOML inline table of strings and integers (JSON strings are TOML strings).

    >>> _toml_inline({"type": "command", "timeout": 5})
    '{type="command",timeout=5}'
    """
    parts = []
    for key, value in table.items():
        text = str(value) if isinstance(value, int) else json.dumps(str(value))
        parts.append(f"{key}={text}")
    return "{" + ",".join(parts) + "}"


#: how far a rollout's start may be from the process's start to count as its own
ROLLOUT_WINDOW = timedelta(seconds=10)
#: user messages Codex writes itself (context, instructions): not the user's words
_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions")

#: OpenAI's list prices, US dollars per million tokens (OpenAI's models have no cache
#: writes) as of :data:`~jupyter_agents.spend.prices.PRICES_AS_OF`
PRICES: dict[str, dict[str, float]] = {
    "gpt-5.6-sol*": price_row(5.00, 30.00, 6.25, 0.50),
    "gpt-5.6-terra*": price_row(2.00, 12.00, 2.50, 0.20),
    "gpt-5.6-luna*": price_row(0.20, 1.20, 0.25, 0.02),
    "gpt-5.5*": price_row(5.00, 30.00, 0.0, 0.50),
    "gpt-5.4": price_row(2.50, 15.00, 0.0, 0.25),
    "gpt-5.4-mini*": price_row(0.75, 4.50, 0.0, 0.075),
    "gpt-5.4-nano*": price_row(0.20, 1.25, 0.0, 0.02),
    "gpt-5.3-codex*": price_row(1.75, 14.00, 0.0, 0.175),
    "gpt-5.2*": price_row(1.75, 14.00, 0.0, 0.175),
    "gpt-5.1*": price_row(1.25, 10.00, 0.0, 0.125),
    "gpt-5": price_row(1.25, 10.00, 0.0, 0.125),
    "gpt-5-codex*": price_row(1.25, 10.00, 0.0, 0.125),
    "gpt-5-mini*": price_row(0.25, 2.00, 0.0, 0.025),
}


def codex_home(env: Mapping[str, str]) -> Path:
    """``$CODEX_HOME``, else ``~/.codex`` of the session's home."""
    configured = env.get("CODEX_HOME")
    return Path(configured).expanduser() if configured else home_of(env) / ".codex"


def held_thread(home: Path, pids: Iterable[int]) -> str | None:
    """The thread id whose writer lock one of ``pids`` holds open, if any."""
    locks = home / "thread-writer-locks"
    for pid in pids:
        try:
            files = psutil.Process(pid).open_files()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for f in files:
            path = Path(f.path)
            if path.parent == locks and path.suffix == ".lock" and is_uuid(path.stem):
                return path.stem
    return None


def rollout_meta(path: Path) -> dict[str, object] | None:
    """The ``session_meta`` payload of a rollout file (its first record), if readable."""
    try:
        with path.open("rb") as f:
            first = json.loads(f.readline(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or first.get("type") != "session_meta":
        return None
    payload = first.get("payload", first)
    return payload if isinstance(payload, dict) else None


def matching_rollouts(home: Path, cwd: str, started: datetime) -> list[str]:
    """Ids of rollouts that began in ``cwd`` within ``ROLLOUT_WINDOW`` of ``started``."""
    found: list[str] = []
    days = {started + d for d in (-ROLLOUT_WINDOW, timedelta(0), ROLLOUT_WINDOW)}
    for day in sorted({(d.year, d.month, d.day) for d in days}):
        folder = home / "sessions" / f"{day[0]:04d}" / f"{day[1]:02d}" / f"{day[2]:02d}"
        for path in folder.glob("rollout-*.jsonl"):
            meta = rollout_meta(path)
            if meta is None or not is_uuid(meta.get("id")) or meta.get("cwd") != cwd:
                continue
            when = clock.parse_or_none(meta.get("timestamp"))
            if when is not None and abs(when - started) <= ROLLOUT_WINDOW:
                found.append(str(meta["id"]))
    return found


# -- usage ------------------------------------------------------------------------------


@dataclasses.dataclass
class CodexCursor:
    """What :func:`parse_usage` carries from line to line of one rollout: the model of
    the current turn, the cumulative ``total_tokens`` last counted and the time of the
    last event counted (a rollout read again from its start counts nothing twice)."""

    model: str = "unknown"
    total: int | None = None
    last: float | None = None

    def dump(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def load(cls, text: str | None) -> CodexCursor:
        try:
            data = json.loads(text or "{}")
            return cls(str(data.get("model", "unknown")), data.get("total"), data.get("last"))
        except (ValueError, AttributeError, TypeError):
            return cls()


def parse_usage(line: bytes, cursor: CodexCursor) -> Record | None:
    """The usage of one line of a Codex rollout (``cursor`` is updated: the model from
    ``turn_context``, the total counted); None for lines that add none; :class:`BadRecord`
    for a ``token_count`` event that does not parse.

    >>> c = CodexCursor()
    >>> parse_usage(b'{"type": "turn_context", "payload": {"model": "gpt-5.4"}}', c)
    >>> ev = (b'{"timestamp": "2026-12-01T10:00:00Z", "type": "event_msg", "payload": '
    ...       b'{"type": "token_count", "info": {"total_token_usage": {"total_tokens": 150}, '
    ...       b'"last_token_usage": {"input_tokens": 100, "cached_input_tokens": 60, '
    ...       b'"output_tokens": 50, "reasoning_output_tokens": 20, "total_tokens": 150}}}}')
    >>> r = parse_usage(ev, c)
    >>> r.model, r.tokens
    ('gpt-5.4', Tokens(input=40, output=50, cache_creation=0, cache_read=60))
    >>> parse_usage(ev, c) is None  # the same event again: total unchanged
    True
    """
    if b'"turn_context"' in line:
        entry = json_object(line)
        payload = entry.get("payload")
        if entry.get("type") == "turn_context" and isinstance(payload, dict):
            model = payload.get("model")
            if isinstance(model, str) and model:
                cursor.model = model
        return None
    if b'"token_count"' not in line:
        return None
    entry = json_object(line)
    payload = entry.get("payload")
    if entry.get("type") != "event_msg" or not isinstance(payload, dict):
        return None
    if payload.get("type") != "token_count":
        return None
    info = payload.get("info")
    if info is None:
        return None  # usage not known yet (codex sends rate limits first)
    if not isinstance(info, dict):
        raise BadRecord("token_count info is not an object")
    total_usage, last_usage = info.get("total_token_usage"), info.get("last_token_usage")
    if not isinstance(total_usage, dict) or not isinstance(last_usage, dict):
        raise BadRecord("token_count without total_token_usage and last_token_usage")
    total = count(total_usage.get("total_tokens"))
    when = epoch(entry.get("timestamp"))
    if total == cursor.total:
        return None  # repeated (e.g. for a rate-limit update)
    if when is not None and cursor.last is not None and when < cursor.last:
        return None  # counted before (the rollout is being read again)
    given = count(last_usage.get("input_tokens"))
    cached = min(count(last_usage.get("cached_input_tokens")), given)
    written = min(count(last_usage.get("cache_write_input_tokens")), given - cached)
    output = count(last_usage.get("output_tokens"))
    tokens = Tokens(given - cached - written, output, written, cached)
    cursor.total = total
    if when is not None:
        cursor.last = when
    return Record(None, cursor.model, when, tokens) if tokens.total else None


class CodexUsage(UsageReader):
    """Codex records ``token_count`` events in its rollout (``{"timestamp", "type":
    "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage",
    "last_token_usage", "model_context_window"}, "rate_limits"}}``; openai/codex
    ``codex-rs/protocol/src/protocol.rs`` ``TokenCountEvent``/``TokenUsageInfo``/
    ``TokenUsage``: ``input_tokens`` includes ``cached_input_tokens`` and
    ``cache_write_input_tokens``, ``output_tokens`` includes
    ``reasoning_output_tokens``), and the model of each turn in ``turn_context``
    records (``payload.model``). :func:`parse_usage` counts ``last_token_usage`` of
    every event whose cumulative ``total_tokens`` moved (codex repeats an event
    unchanged, e.g. for a rate-limit update), as ``input - cached - written`` input,
    ``cached`` cache reads, ``written`` cache creation and ``output``; the
    :class:`CodexCursor` carries."""

    def __init__(self, saved: str | None = None) -> None:
        self.cursor = CodexCursor.load(saved)

    def parse(self, line: bytes) -> Record | None:
        return parse_usage(line, self.cursor)

    def dump(self) -> str:
        return self.cursor.dump()


# -- the conversation as Markdown -------------------------------------------------------


#: the lines Codex's ``exec_command`` and ``write_stdin`` put before a command's output
#: (openai/codex ``codex-rs/core/src/tools/handlers/unified_exec.rs``, its response
#: text: ``Chunk ID``, ``Wall time``, ``Process exited with code <n>`` or ``Process
#: running with session ID <id>``, ``Original token count``, then ``Output:``)
_EXEC_HEADER = ("Chunk ID: ", "Wall time: ")
_EXEC_EXIT = re.compile(r"^Process exited with code (-?[0-9]+)$", re.MULTILINE)


def call_output(payload: Mapping[str, Any]) -> tuple[Any, bool]:
    """What a ``function_call_output`` (or custom tool's) payload says the call returned,
    and whether it failed: its ``output`` is a JSON string ``{output, metadata:
    {exit_code}}`` for the shell (a nonzero exit code is a failure), the text of
    ``exec_command`` (its header lines, then ``Output:`` and the command's output: the
    output, and failed for a nonzero exit code), other text, or a dict with
    ``content``.

    >>> call_output({"output": '{"output": "a.txt", "metadata": {"exit_code": 2}}'})
    ('a.txt', True)
    >>> call_output({"output": "Chunk ID: 4a8476\\nWall time: 0.0000 seconds\\n"
    ...     "Process exited with code 1\\nOriginal token count: 2\\nOutput:\\nno\\n"})
    ('no\\n', True)
    """
    output: Any = payload.get("output")
    if isinstance(output, dict):
        return output.get("content", output), False
    if not isinstance(output, str):
        return output, False
    if output.startswith(_EXEC_HEADER):
        header, found, rest = output.partition("\nOutput:\n")
        if found:
            code = _EXEC_EXIT.search(header)
            return rest, code is not None and int(code[1]) != 0
    try:
        parsed = json.loads(output)
    except ValueError:
        return output, False
    if not isinstance(parsed, dict) or "output" not in parsed:
        return output, False
    meta = parsed.get("metadata")
    code = meta.get("exit_code") if isinstance(meta, dict) else None
    return parsed["output"], isinstance(code, int) and code != 0


def markdown(record: Mapping[str, Any]) -> Iterator[str]:
    """The Markdown of one rollout line (``{timestamp, type, payload}``; nothing for
    lines that are not turns): ``session_meta``, ``compacted``, and ``response_item``
    payloads ``message``, ``function_call``, ``function_call_output``,
    ``custom_tool_call``..."""
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return
    when = timestamp(record.get("timestamp"))
    kind, item = record.get("type"), payload.get("type")
    if kind == "session_meta":
        where = f" in {code(str(payload['cwd']))}" if payload.get("cwd") else ""
        yield f"*Codex thread {code(str(payload.get('id', '?')))} started{where}.*\n\n"
    elif kind == "compacted":
        yield f"*The conversation was compacted{when and ' at ' + when}.*\n\n"
    elif kind != "response_item":
        return
    elif item == "message" and payload.get("role") in ("user", "assistant"):
        texts = [
            str(part["text"])
            for part in payload.get("content") or []
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        texts = [t for t in texts if not t.lstrip().startswith(_CONTEXT)]
        if texts:
            user = payload["role"] == "user"
            yield from turn("User" if user else "Assistant", when, texts, [], user)
    elif item in ("function_call", "custom_tool_call", "local_shell_call"):
        arguments: Any = payload.get("arguments", payload.get("input", payload.get("action")))
        if isinstance(arguments, str):
            with suppress(ValueError):
                arguments = json.loads(arguments)
        name = str(payload.get("name") or ("shell" if item == "local_shell_call" else "tool"))
        yield from turn("Assistant", when, [], [tool_call(name, arguments)], False)
    elif item in ("function_call_output", "custom_tool_call_output"):
        output, _ = call_output(payload)
        yield from turn("Tool", when, [], [tool_result(output, False)], False)


#: the rollout's ``event_msg`` payloads that repeat a ``response_item`` or report usage
_ECHOES = frozenset(
    {
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "token_count",
        "task_started",
        "exec_command_begin",
        "exec_command_end",
    }
)


def turns(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The turn events of one rollout line (:mod:`jupyter_agents.agents.turns`):
    ``response_item`` messages (the context Codex adds left out), ``reasoning``
    summaries (``thought``), function, custom and local shell calls and their outputs
    (``update_plan`` is a ``plan`` too), ``compacted``, and a task's end (``turn_end``).

    >>> rec = {"type": "response_item", "payload": {"type": "function_call",
    ...     "name": "shell", "call_id": "c1", "arguments": '{"command": ["bash", "-lc", "ls"]}'}}
    >>> [(e["type"], e["title"], e["tool_kind"]) for e in turns(rec)]
    [('tool_call', 'shell: ls', 'execute')]
    """
    at = record.get("timestamp")
    payload = record.get("payload")
    kind = record.get("type")
    item = payload.get("type") if isinstance(payload, dict) else None
    if not isinstance(payload, dict):
        yield other(at, kind)
    elif kind == "compacted":
        message = payload.get("message")
        yield turn_event("compaction", at, text=message if isinstance(message, str) else None)
    elif kind == "event_msg" and item == "task_complete":
        yield turn_event("turn_end", at)
    elif kind == "event_msg" and item in _ECHOES:
        return  # what a response_item says too, or usage (the usage ledger's)
    elif kind != "response_item":
        yield other(at, f"{kind}/{item}" if item else kind)
    elif item == "message" and payload.get("role") in ("user", "assistant"):
        for part in payload.get("content") or []:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and not text.lstrip().startswith(_CONTEXT):
                yield said(payload["role"] == "user", at, text)
    elif item == "reasoning":
        for part in payload.get("summary") or []:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str):
                yield turn_event("thought", at, text=text)
    elif item in ("function_call", "custom_tool_call", "local_shell_call"):
        arguments: Any = payload.get("arguments", payload.get("input", payload.get("action")))
        if isinstance(arguments, str):
            with suppress(ValueError):
                arguments = json.loads(arguments)
        name = str(payload.get("name") or ("shell" if item == "local_shell_call" else "tool"))
        call_id = payload.get("call_id", payload.get("id"))
        yield call(at, call_id, name, arguments)
        steps = arguments.get("plan") if isinstance(arguments, dict) else None
        if name == "update_plan" and isinstance(steps, list):
            yield plan(at, [(s.get("step"), s.get("status")) for s in steps if isinstance(s, dict)])
    elif item in ("function_call_output", "custom_tool_call_output"):
        output, failed = call_output(payload)
        yield result(at, payload.get("call_id"), output, failed)
    else:
        yield other(at, f"response_item/{item}")


class CodexKind(AgentKind):
    """``codex`` with its id captured from its thread lock (or its own rollout)."""

    name = "codex"
    label = "Codex"
    badge = ("X", "#10a37f")
    install = "npm install -g @openai/codex"
    #: its ACP agent: the adapter on ``codex app-server``, which runs the Codex it
    #: bundles (``CODEX_PATH`` chooses another); its ACP session id is the thread id
    acp_command = ("codex-acp",)
    acp_install = "npm install -g @agentclientprotocol/codex-acp"
    follows_conversation = True
    reports = "notify"
    keeps_conversations = True
    reports_usage = True
    prices = PRICES
    #: Escape interrupts a turn: its TUI sends ``Op::Interrupt`` on Esc while a task runs
    #: (openai/codex ``codex-rs/tui/src/bottom_pane/mod.rs``)
    interrupt_key = "\x1b"
    #: how long a permission request waits for an answer from elsewhere before Codex
    #: shows its own dialog (it shows none while a hook runs): ``AgentsApp.permission_wait``
    ask_wait: float = 120.0
    own_env = ("CODEX_THREAD_ID",)

    def usage_reader(self, saved: str | None) -> UsageReader:
        return CodexUsage(saved)

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        return markdown(record)

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return turns(record)

    def with_reporting(self, argv: list[str], state_dir: Path, session_id: str) -> list[str]:
        """Our options go right after ``codex`` (or ``codex resume``): ``notify`` runs
        the hook at each turn's end; our hooks (:func:`~jupyter_agents.agents.attention.
        codex_hooks`), trusted by their hashes, report a prompt, a tool's end and a
        permission request, which waits :attr:`ask_wait` seconds for an answer; and
        ``--no-daemon`` keeps the thread in the session's own process tree, so its
        thread lock (the exact conversation id) is visible from the first second
        instead of held by a shared ``codex app-server`` daemon that also outlives the session."""
        width = len(self.command) + (argv[len(self.command) : len(self.command) + 1] == ["resume"])
        ours = [
            "-c",
            codex_notify(state_dir, session_id),
            *codex_hooks(state_dir, session_id, self.ask_wait),
            "--no-daemon",
        ]
        return [*argv[:width], *ours, *argv[width:]]

    def check_args(self, args: object) -> list[str]:
        checked = super().check_args(args)
        if checked and checked[0] in ("resume", "fork"):
            raise InvalidRequest(
                f"'codex {checked[0]}' is chosen by jupyter_agents; to continue a "
                "conversation, restore its session"
            )
        return checked

    def launch(self, args: list[str]) -> Launch:
        return Launch([*self.command, *args])

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        cid = session.conversation_id
        if cid:
            return Launch([*self.command, "resume", cid, *session.args], cid)
        return Launch([*self.command, *session.args], None, fresh=True)

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """Rollouts whose ``session_meta`` names the session's folder, newest first (by
        the file's last write; only the newest 500 rollouts of the machine are read)."""
        if not session.cwd:
            return []
        home = codex_home(session.env or {})
        rollouts = sorted(
            home.glob("sessions/[0-9]*/[0-9]*/[0-9]*/rollout-*.jsonl"),
            key=lambda p: p.name,
            reverse=True,
        )[:500]
        metas = ((rollout_meta(path), path) for path in rollouts)
        found = (
            (str(meta["id"]), path)
            for meta, path in metas
            if meta is not None and is_uuid(meta.get("id")) and meta.get("cwd") == session.cwd
        )
        return newest_conversations(found, limit)

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        """The rollout of the thread: ``sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

        That file is all ``codex resume <id>`` needs: it looks the id up in the
        ``state_*.sqlite`` thread index first and, when the index has no row or a stale
        path, searches ``sessions/`` for the id and repairs the index (openai/codex
        ``codex-rs/rollout/src/list.rs``, ``find_thread_path_by_id_str_in_subdir``)."""
        if not is_uuid(conversation_id):
            return None
        home = codex_home(session.env or {})
        found = sorted(
            home.glob(f"sessions/[0-9]*/[0-9]*/[0-9]*/rollout-*-{conversation_id}.jsonl")
        )
        return found[-1] if found else None

    def discover(
        self,
        session: Session,
        pids: Sequence[int],
        env: Mapping[str, str],
        taken: Set[str],
    ) -> str | None:
        home = codex_home(env)
        held = held_thread(home, pids)
        if held is not None or session.conversation_id is not None:
            return held or session.conversation_id
        if session.pid_created is None or not session.cwd:
            return None
        started = clock.from_epoch(session.pid_created)
        candidates = [c for c in matching_rollouts(home, session.cwd, started) if c not in taken]
        return candidates[0] if len(candidates) == 1 else None
