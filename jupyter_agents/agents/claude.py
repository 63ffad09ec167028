"""Claude Code (docs/agents.md).

The conversation id is assigned at launch (``--session-id <uuid4>``), so it is exact
from the first second. While the session runs, Claude keeps
``$CLAUDE_CONFIG_DIR/sessions/<pid>.json`` = ``{"pid", "sessionId", "cwd", ...}`` up to
date (``/clear`` rotates the id and rewrites it): that per-pid file is how the id is
followed, never "the newest transcript in the folder".

On resume: ``--resume <id>`` when the conversation's transcript exists, ``--session-id
<id>`` when none does (no message was ever sent, so there is nothing to resume yet), and
a new conversation (a new ``--session-id``) when the id is unknown: never
``--continue``, whose "most recent in the folder" may be another session's. The folder's
conversations are offered instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from jupyter_agents.agents.base import (
    AssignedIdKind,
    FolderConversation,
    home_of,
    is_uuid,
    newest_conversations,
    pid_file_conversation,
)
from jupyter_agents.agents.hooks import (
    ask_command,
    hook_command,
    hook_settings_path,
    write_hook_settings,
)
from jupyter_agents.agents.markdown import code, one_line, timestamp, tool_call, tool_result, turn
from jupyter_agents.agents.turns import call, other, plan, plan_change, result, said, turn_event
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
from jupyter_agents.core.records import Session

#: Claude Code hook events we subscribe to
CLAUDE_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "PermissionRequest",
    "Stop",
    "StopFailure",
    "SessionEnd",
)

#: how long Claude Code's permission hook waits for an answer from elsewhere (its dialog
#: is on screen meanwhile, and the first answer wins)
CLAUDE_ASK_WAIT = 3600.0


def claude_settings(state_dir: Path, session_id: str) -> Path:
    """Write the session's private Claude Code settings file (hooks only; the user's
    own hooks fire too) and return its path, for ``--settings``. ``PermissionRequest``
    runs the asking hook (:func:`ask_command`), with a timeout past its wait."""
    import shlex

    command = shlex.join(hook_command(state_dir, session_id))
    hooks: dict[str, list[dict[str, Any]]] = {
        event: [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]
        for event in CLAUDE_EVENTS
    }
    ask = shlex.join(ask_command(state_dir, session_id, CLAUDE_ASK_WAIT, "shown"))
    hooks["PermissionRequest"] = [
        {
            "matcher": "*",
            "hooks": [{"type": "command", "command": ask, "timeout": int(CLAUDE_ASK_WAIT) + 30}],
        }
    ]
    return write_hook_settings(state_dir, claude_settings_name(session_id), {"hooks": hooks})


def claude_settings_name(session_id: str) -> str:
    """The name of session ``session_id``'s Claude Code settings file (in ``hooks/``)."""
    return f"{session_id}.json"


#: flags that choose the conversation: ours to set
_ID_FLAGS = frozenset(
    {"--session-id", "--resume", "-r", "--continue", "-c", "--fork-session", "--from-pr"}
)
_SLUG_MAX = 200
_COMMAND = re.compile(r"<command-name>(.*?)</command-name>", re.S)

#: Anthropic's list prices, US dollars per million tokens (input, output, cache writes of
#: 5 minutes, cache reads) as of :data:`~jupyter_agents.spend.prices.PRICES_AS_OF`
PRICES: dict[str, dict[str, float]] = {
    "claude-opus-5*": price_row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-8*": price_row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-7*": price_row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-6*": price_row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-5*": price_row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-1*": price_row(15.00, 75.00, 18.75, 1.50),
    "claude-opus-4-2*": price_row(15.00, 75.00, 18.75, 1.50),  # claude-opus-4-20250514
    "claude-sonnet-5*": price_row(2.00, 10.00, 2.50, 0.20),
    "claude-sonnet-4*": price_row(3.00, 15.00, 3.75, 0.30),
    "claude-haiku-4-5*": price_row(1.00, 5.00, 1.25, 0.10),
    "claude-3-5-haiku*": price_row(0.80, 4.00, 1.00, 0.08),
}


def config_dir(env: Mapping[str, str]) -> Path:
    """``$CLAUDE_CONFIG_DIR``, else ``~/.claude`` of the session's home."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    return Path(configured).expanduser() if configured else home_of(env) / ".claude"


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le")
    return [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed, over UTF-16 code units).

    >>> _java_hash("hello")
    99162322
    """
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def project_slug(path: str) -> str:
    """The folder name Claude stores a cwd's transcripts under.

    Every UTF-16 code unit outside ``[a-zA-Z0-9]`` becomes ``-``; a slug over 200
    characters is cut to 200 plus ``-`` and the base-36 ``abs`` of the path's Java
    string hash.

    >>> project_slug("/home/u/my project")
    '-home-u-my-project'
    >>> project_slug("/é")
    '--'
    """
    slug = "".join(
        chr(u) if chr(u).isascii() and chr(u).isalnum() else "-" for u in _utf16_units(path)
    )
    if len(slug) <= _SLUG_MAX:
        return slug
    return f"{slug[:_SLUG_MAX]}-{_base36(abs(_java_hash(path)))}"


def conversation_file(env: Mapping[str, str], cwd: str | None, conversation_id: str) -> Path | None:
    """The transcript file of conversation ``conversation_id``, if it has one (a message
    was sent).

    Looks where Claude writes it for ``cwd`` first, then under any project folder (the
    file name is the id, so this is exact, not a guess).
    """
    projects = config_dir(env) / "projects"
    if cwd:
        path = projects / project_slug(str(Path(cwd).resolve())) / f"{conversation_id}.jsonl"
        if path.is_file():
            return path
    return next(iter(sorted(projects.glob(f"*/{conversation_id}.jsonl"))), None)


def live_conversation(env: Mapping[str, str], pid: int) -> str | None:
    """The conversation id Claude process ``pid`` holds now, from its per-pid file."""
    return pid_file_conversation(config_dir(env) / "sessions", pid)


# -- usage ------------------------------------------------------------------------------


def parse_usage(line: bytes) -> Record | None:
    """The usage of one line of a Claude Code conversation file; None for lines that hold
    none (only lines naming ``"usage"`` are decoded at all); :class:`BadRecord` for one
    that should and does not.

    >>> line = b'{"type": "assistant", "timestamp": "2026-12-01T10:00:00Z", "message": '
    >>> line += b'{"id": "msg_1", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, '
    >>> line += b'"output_tokens": 20, "cache_read_input_tokens": 900}}}'
    >>> parse_usage(line).tokens
    Tokens(input=3, output=20, cache_creation=0, cache_read=900)
    >>> parse_usage(b'{"type": "user", "message": {"content": "hi"}}') is None
    True
    """
    if b'"usage"' not in line:
        return None
    entry = json_object(line)
    message = entry.get("message")
    if entry.get("type") != "assistant" or not isinstance(message, dict):
        return None
    usage = message.get("usage")
    if not isinstance(usage, dict):
        raise BadRecord("message.usage is not an object")
    tokens = Tokens(
        count(usage.get("input_tokens")),
        count(usage.get("output_tokens")),
        count(usage.get("cache_creation_input_tokens")),
        count(usage.get("cache_read_input_tokens")),
    )
    if tokens.total == 0:
        return None  # synthetic messages (and every message offline) cost nothing
    model = message.get("model")
    key = message.get("id")
    return Record.of(key, model, epoch(entry.get("timestamp")), tokens)


class ClaudeUsage(UsageReader):
    """Claude Code writes each assistant message into its conversation file with
    ``message.model`` and ``message.usage`` (``input_tokens``, ``output_tokens``,
    ``cache_creation_input_tokens``, ``cache_read_input_tokens``: the token kinds, as the
    Anthropic API reports them). One message whose reply has several content blocks is
    written as several records carrying the same ``message.id`` (and its usage, which
    can grow while it streams): each record is keyed by that id (:func:`parse_usage`).
    Nothing carries from line to line."""

    def parse(self, line: bytes) -> Record | None:
        return parse_usage(line)


# -- the conversation as Markdown -------------------------------------------------------


def markdown(record: Mapping[str, Any]) -> Iterator[str]:
    """The Markdown of one record of a conversation file (nothing for records that are
    not turns): ``user``/``assistant`` records with ``message.content`` as text or
    blocks (``text``, ``tool_use``, ``tool_result``), summaries, compactions."""
    kind = record.get("type")
    when = timestamp(record.get("timestamp"))
    if kind == "summary" and isinstance(record.get("summary"), str):
        yield f"*Summary: {one_line(record['summary'])}*\n\n"
        return
    if kind == "system" and record.get("subtype") == "compact_boundary":
        yield f"*The conversation was compacted{when and ' at ' + when}.*\n\n"
        return
    if kind not in ("user", "assistant") or record.get("isMeta"):
        return
    message = record.get("message")
    if not isinstance(message, dict):
        return
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return
    texts: list[str] = []
    tools: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(_text(block["text"]))
        elif block.get("type") == "tool_use":
            tools.append(tool_call(str(block.get("name", "tool")), block.get("input")))
        elif block.get("type") == "tool_result":
            tools.append(tool_result(block.get("content"), bool(block.get("is_error"))))
        elif block.get("type") == "image":
            texts.append("*(an image)*")
    yield from turn("User" if kind == "user" else "Assistant", when, texts, tools, kind == "user")


def _text(text: str) -> str:
    command = _COMMAND.search(text)
    if command:
        return f"*Command {code(command[1].strip())}*"
    return text


def _task_change(at: object, outcome: object) -> dict[str, Any] | None:
    """The plan change a task tool's result records (``toolUseResult``): a task made
    (``TaskCreate``: ``{task: {id, subject}}``) or its status changed (``TaskUpdate``:
    ``{taskId, statusChange: {to}}``); None for other results."""
    if not isinstance(outcome, dict):
        return None
    task = outcome.get("task")
    if isinstance(task, dict) and task.get("id") is not None and task.get("subject"):
        return plan_change(at, task["id"], task["subject"], "pending")
    change = outcome.get("statusChange")
    if outcome.get("taskId") is not None and isinstance(change, dict) and change.get("to"):
        return plan_change(at, outcome["taskId"], status=change["to"])
    return None


def turns(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The turn events of one record (:mod:`jupyter_agents.agents.turns`): a ``user``
    record's text (``user_message``) or tool results (``tool_call_update``); an
    ``assistant`` record's ``text``, ``thinking`` and ``tool_use`` blocks (a
    ``TodoWrite`` call is a ``plan`` too); a compaction. Records of a sub-agent (``Task``)
    carry ``subagent``: true.

    >>> rec = {"type": "assistant", "timestamp": "2026-12-07T05:00:00Z", "message": {
    ...     "content": [{"type": "text", "text": "Listing"}, {"type": "tool_use",
    ...     "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}}
    >>> [(e["type"], e.get("text") or e.get("title")) for e in turns(rec)]
    [('agent_message', 'Listing'), ('tool_call', 'Bash: ls')]
    """
    kind = record.get("type")
    at = record.get("timestamp")
    extra = {"subagent": True} if record.get("isSidechain") else {}
    if kind == "system" and record.get("subtype") == "compact_boundary":
        yield turn_event("compaction", at)
        return
    message = record.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict):
        yield other(at, kind if kind != "system" else f"system/{record.get('subtype')}")
        return
    if record.get("isMeta"):
        return  # the CLI's own notes to the model (a command's output), not a turn
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return
    for block in blocks:
        if not isinstance(block, dict):
            continue
        part = block.get("type")
        if part == "text" and isinstance(block.get("text"), str):
            yield {**said(kind == "user", at, _text(block["text"])), **extra}
        elif part == "thinking" and isinstance(block.get("thinking"), str):
            yield {**turn_event("thought", at, text=block["thinking"]), **extra}
        elif part == "tool_use":
            name, arguments = str(block.get("name", "tool")), block.get("input")
            yield {**call(at, block.get("id"), name, arguments), **extra}
            todos = arguments.get("todos") if isinstance(arguments, dict) else None
            if name == "TodoWrite" and isinstance(todos, list):
                entries = [
                    (t.get("content"), t.get("status")) for t in todos if isinstance(t, dict)
                ]
                yield {**plan(at, entries), **extra}
        elif part == "tool_result":
            failed = bool(block.get("is_error"))
            yield {**result(at, block.get("tool_use_id"), block.get("content"), failed), **extra}
            change = _task_change(at, record.get("toolUseResult"))
            if change is not None:
                yield {**change, **extra}
        elif part == "image":
            yield {**said(kind == "user", at, "(an image)"), **extra}


class ClaudeKind(AssignedIdKind):
    """``claude`` with an id assigned at launch and followed through ``/clear``."""

    name = "claude"
    id_flags = _ID_FLAGS
    label = "Claude Code"
    badge = ("C", "#d97757")
    install = "npm install -g @anthropic-ai/claude-code"
    #: its ACP agent: the adapter on the Claude Agent SDK, which runs the Claude Code the
    #: SDK bundles (``CLAUDE_CODE_EXECUTABLE`` chooses another); its ACP session id is
    #: the Claude session id
    acp_command = ("claude-agent-acp",)
    acp_install = "npm install -g @agentclientprotocol/claude-agent-acp"
    follows_conversation = True
    reports = "hooks"
    keeps_conversations = True
    message_types = frozenset({"user", "assistant"})
    reports_usage = True
    prices = PRICES
    #: Escape interrupts a turn (as a person presses it)
    interrupt_key = "\x1b"
    own_env = (
        "CLAUDECODE",
        "CLAUDE_CODE_ENTRYPOINT",
        "CLAUDE_CODE_SESSION_ID",
        "CLAUDE_CODE_CHILD_SESSION",
        "CLAUDE_CODE_SESSION_ATTENDED",
        "CLAUDE_PID",
        "CLAUDE_PROJECT_DIR",
        "CLAUDE_ENV_FILE",
        "CLAUDE_CODE_CHILD_NOTES_DIR",
        "CLAUDE_CODE_MESSAGING_SOCKET",
        "CLAUDE_CODE_MESSAGING_SOCKET_TOKEN",
        "AI_AGENT",
        "CLAUDE_CODE_LAUNCHED_BY_SESSION_IDS",
        "CLAUDE_CODE_BRIDGE_SESSION_ID",
        "CLAUDE_CODE_HOST_WORKTREE",
    )

    def usage_reader(self, saved: str | None) -> UsageReader:
        return ClaudeUsage()

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        return markdown(record)

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return turns(record)

    def links(self, record: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """``uuid`` and ``parentUuid``: Claude Code queues its writes, and a prompt's
        records can land after the answer's (the answer names the prompt's last record
        as its parent)."""
        own, parent = record.get("uuid"), record.get("parentUuid")
        return (
            own if isinstance(own, str) else None,
            parent if isinstance(parent, str) else None,
        )

    def with_reporting(self, argv: list[str], state_dir: Path, session_id: str) -> list[str]:
        return [*argv, "--settings", str(claude_settings(state_dir, session_id))]

    def session_files(self, state_dir: Path, session_id: str) -> list[Path]:
        """Its settings file (``--settings``: our hooks)."""
        return [hook_settings_path(state_dir, claude_settings_name(session_id))]

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """``projects/<slug of the folder>/<id>.jsonl``, newest first."""
        if not session.cwd:
            return []
        folder = config_dir(session.env or {}) / "projects"
        folder = folder / project_slug(str(Path(session.cwd).resolve()))
        found = ((path.stem, path) for path in folder.glob("*.jsonl") if is_uuid(path.stem))
        return newest_conversations(found, limit)

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        if not is_uuid(conversation_id):
            return None
        return conversation_file(session.env or {}, session.cwd, conversation_id)

    def live_conversation(self, env: Mapping[str, str], pid: int) -> str | None:
        return live_conversation(env, pid)
