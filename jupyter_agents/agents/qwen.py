"""Qwen Code (``@qwen-code/qwen-code``, docs/agents-qwen.md; tested with 0.24.4).

The conversation id is assigned at launch (``--session-id <uuid4>``), so it is exact
from the first second. While the session runs, Qwen keeps ``<qwen dir>/sessions/<pid>.json``
= ``{"pid", "sessionId", "cwd", ...}`` up to date (``/clear`` starts a new id and
rewrites it; its SessionStart hook names the new id too): that per-pid file is how the id
is followed. The pid is that of the ``node cli.js`` process Qwen relaunches itself as (a
child of the ``qwen`` process), one of the session's processes.

The transcript is ``<runtime dir>/projects/<cwd, every character outside [a-zA-Z0-9] as
->/chats/<id>.jsonl``, written from the first prompt. ``--resume <id>`` needs it ("No
saved session found") and ``--session-id <id>`` refuses an id that has one ("already
exists"), so resume picks between them as Claude's kind does; never ``-c``.

The hooks are Claude's layout in a settings file. Qwen merges hooks by scope: those of
its *system defaults* and *system* settings files (concatenated), the user's own and the
(trusted) workspace's all run. Our hooks go to one process only as its system-defaults
file: ``QWEN_CODE_SYSTEM_DEFAULTS_PATH`` names a private file that holds the
administrator's system-defaults file (the one the variable hides), with our hooks added
to its own; the system settings file and the user's settings stay as they are.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
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
    merged_hooks,
    write_hook_settings,
)
from jupyter_agents.agents.markdown import timestamp, tool_call, tool_result, turn
from jupyter_agents.agents.turns import call, other, plan, result, said, turn_event
from jupyter_agents.agents.usage import (
    BadRecord,
    Record,
    Tokens,
    UsageReader,
    count,
    epoch,
    json_object,
)
from jupyter_agents.core.records import Session

#: flags that choose the conversation: ours to set
_ID_FLAGS = frozenset({"--session-id", "--resume", "-r", "--continue", "-c"})
#: the oldest Node.js Qwen Code 0.24 runs on
NODE_MAJOR = 22
#: where Qwen reads the administrator's settings (``/etc/qwen-code/settings.json`` on
#: Linux) and, beside it, the system defaults, unless these variables name other files
SYSTEM_SETTINGS_ENV = "QWEN_CODE_SYSTEM_SETTINGS_PATH"
SYSTEM_DEFAULTS_ENV = "QWEN_CODE_SYSTEM_DEFAULTS_PATH"
#: hook events we subscribe to, each with the name our hook records it as (None: its own)
QWEN_EVENTS: dict[str, str | None] = {
    "SessionStart": None,
    "UserPromptSubmit": None,
    "PreToolUse": None,
    "PostToolUse": None,
    "PostToolUseFailure": "PostToolUse",
    "Notification": None,
    "Stop": None,
    "StopFailure": None,
    "SessionEnd": None,
}
#: a hook timeout of 1000 or more Qwen reads as milliseconds
_LEGACY_MS = 1000


def qwen_dir(env: Mapping[str, str]) -> Path:
    """Qwen's own folder: ``$QWEN_HOME``, else ``~/.qwen`` of the session's home."""
    configured = env.get("QWEN_HOME")
    return Path(configured).expanduser() if configured else home_of(env) / ".qwen"


def runtime_dir(env: Mapping[str, str]) -> Path:
    """Where Qwen writes its transcripts: ``$QWEN_RUNTIME_DIR``, else :func:`qwen_dir`
    (a ``runtimeOutputDir`` in its settings is not followed)."""
    configured = env.get("QWEN_RUNTIME_DIR")
    return Path(configured).expanduser() if configured else qwen_dir(env)


def project_slug(path: str) -> str:
    """The folder name Qwen keeps a cwd's transcripts under: every UTF-16 code unit
    outside ``[a-zA-Z0-9]`` becomes ``-`` (its ``sanitizeCwd``; no length limit).

    >>> project_slug("/tmp/my project"), project_slug("/é")
    ('-tmp-my-project', '--')
    """
    data = path.encode("utf-16-le")
    units = [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]
    return "".join(chr(u) if chr(u).isascii() and chr(u).isalnum() else "-" for u in units)


def _cwd_slugs(cwd: str) -> list[str]:
    slugs = [project_slug(str(Path(cwd).resolve())), project_slug(cwd)]
    return list(dict.fromkeys(slugs))


def conversation_file(env: Mapping[str, str], cwd: str | None, conversation_id: str) -> Path | None:
    """The transcript of conversation ``conversation_id``, if it has one (a prompt was
    sent): under ``cwd``'s project folder first, then under any (the file name is the
    id, so this is exact)."""
    projects = runtime_dir(env) / "projects"
    for slug in _cwd_slugs(cwd) if cwd else []:
        path = projects / slug / "chats" / f"{conversation_id}.jsonl"
        if path.is_file():
            return path
    return next(iter(sorted(projects.glob(f"*/chats/{conversation_id}.jsonl"))), None)


def live_conversation(env: Mapping[str, str], pid: int) -> str | None:
    """The conversation id Qwen process ``pid`` holds now, from its per-pid file."""
    return pid_file_conversation(qwen_dir(env) / "sessions", pid)


# -- hooks for one process ---------------------------------------------------------------


def system_defaults_path(environ: Mapping[str, str]) -> Path:
    """The system-defaults file Qwen reads when we do not name one (in ``environ``, the
    server's environment): ``$QWEN_CODE_SYSTEM_DEFAULTS_PATH``, else
    ``system-defaults.json`` beside the system settings file.

    >>> str(system_defaults_path({}))
    '/etc/qwen-code/system-defaults.json'
    >>> str(system_defaults_path({"QWEN_CODE_SYSTEM_SETTINGS_PATH": "/opt/q/s.json"}))
    '/opt/q/system-defaults.json'
    """
    named = environ.get(SYSTEM_DEFAULTS_ENV)
    if named:
        return Path(named)
    settings = environ.get(SYSTEM_SETTINGS_ENV) or "/etc/qwen-code/settings.json"
    return Path(settings).parent / "system-defaults.json"


def read_settings(path: Path) -> dict[str, Any]:
    """A settings file's JSON object; {} when it is missing, unreadable or not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def hook_timeout(seconds: float) -> int:
    """A command hook's ``timeout`` value for ``seconds``: Qwen reads 1000 and more as
    milliseconds.

    >>> hook_timeout(150), hook_timeout(3600)
    (150, 3600000)
    """
    whole = max(1, int(seconds))
    return whole if whole < _LEGACY_MS else whole * 1000


def qwen_hooks(state_dir: Path, session_id: str, ask_wait: float) -> dict[str, list[Any]]:
    """Our hooks for one session (:data:`QWEN_EVENTS`); ``PermissionRequest`` runs the
    asking hook, which waits ``ask_wait`` seconds for an answer from elsewhere, then
    Qwen shows its own dialog (it shows none while the hook runs; 0: no such hook, the
    request is still recorded)."""
    hooks: dict[str, list[Any]] = {}
    for event, as_event in QWEN_EVENTS.items():
        command = shlex.join(hook_command(state_dir, session_id, event=as_event))
        hooks[event] = [{"hooks": [{"type": "command", "command": command, "timeout": 30}]}]
    if ask_wait > 0:
        argv = ask_command(state_dir, session_id, ask_wait, "dialog")
        handler = {
            "type": "command",
            "command": shlex.join(argv),
            "timeout": hook_timeout(ask_wait + 30),
        }
    else:
        command = shlex.join(hook_command(state_dir, session_id))
        handler = {"type": "command", "command": command, "timeout": 30}
    hooks["PermissionRequest"] = [{"hooks": [handler]}]
    return hooks


def settings_name(session_id: str) -> str:
    """The name of session ``session_id``'s system-defaults file (in ``hooks/``)."""
    return f"{session_id}.qwen.json"


def qwen_settings(
    state_dir: Path, session_id: str, ask_wait: float, environ: Mapping[str, str]
) -> Path:
    """Write the session's private system-defaults file (:func:`~.hooks.merged_hooks` of the
    administrator's and :func:`qwen_hooks`) and return its path (0600)."""
    admin = read_settings(system_defaults_path(environ))
    content = merged_hooks(admin, qwen_hooks(state_dir, session_id, ask_wait))
    return write_hook_settings(state_dir, settings_name(session_id), content)


# -- usage -------------------------------------------------------------------------------


def parse_usage(line: bytes) -> Record | None:
    """The usage of one line of a Qwen transcript: an ``assistant`` record's
    ``usageMetadata`` (``promptTokenCount`` includes ``cachedContentTokenCount``;
    ``candidatesTokenCount`` excludes ``thoughtsTokenCount``, which counts as output).
    Keyed by the record's ``uuid``. None for lines without usage; :class:`BadRecord`
    for one that should have it and does not parse.

    >>> line = b'{"uuid": "u1", "type": "assistant", "model": "qwen3-coder-plus", '
    >>> line += b'"timestamp": "2026-12-05T10:00:00Z", "usageMetadata": {'
    >>> line += b'"promptTokenCount": 150, "candidatesTokenCount": 10, "thoughtsTokenCount": 2, '
    >>> line += b'"cachedContentTokenCount": 50}}'
    >>> record = parse_usage(line)
    >>> record.key, record.model, record.tokens
    ('u1', 'qwen3-coder-plus', Tokens(input=100, output=12, cache_creation=0, cache_read=50))
    >>> parse_usage(b'{"type": "user", "message": {}}') is None
    True
    """
    if b'"usageMetadata"' not in line:
        return None
    entry = json_object(line)
    if entry.get("type") != "assistant":
        return None
    usage = entry.get("usageMetadata")
    if not isinstance(usage, dict):
        raise BadRecord("usageMetadata is not an object")
    prompt = count(usage.get("promptTokenCount"))
    cached = count(usage.get("cachedContentTokenCount"))
    if cached > prompt:
        raise BadRecord("more cached tokens than prompt tokens")
    output = count(usage.get("candidatesTokenCount")) + count(usage.get("thoughtsTokenCount"))
    tokens = Tokens(prompt - cached, output, 0, cached)
    if tokens.total == 0:
        return None
    model = entry.get("model")
    key = entry.get("uuid")
    return Record.of(key, model, epoch(entry.get("timestamp")), tokens)


class QwenUsage(UsageReader):
    """Qwen Code writes each model reply as one ``assistant`` record of its transcript
    with ``model`` and ``usageMetadata`` (:func:`parse_usage`). Its side requests (the
    follow-up suggestion, memory extraction) are not recorded there, so not counted."""

    def parse(self, line: bytes) -> Record | None:
        return parse_usage(line)


# -- the conversation as Markdown --------------------------------------------------------


def tool_response(record: Mapping[str, Any], response: Mapping[str, Any]) -> tuple[Any, bool]:
    """What one ``functionResponse`` part of ``record`` says the call returned, and
    whether it failed: its ``output`` (its ``error`` when it has only that), or, for a
    shell, the command's own output as Qwen showed it (``toolCallResult.resultDisplay``
    of type ``shell_result``, which the record holds beside what the model was sent:
    that output framed by the command, folder, exit code...); an ``outcome`` other than
    ``completed`` is a failure.

    >>> tool_response({"toolCallResult": {"callId": "c1", "resultDisplay": {
    ...     "type": "shell_result", "output": "a.txt", "outcome": "failed"}}},
    ...     {"id": "c1", "response": {"output": "Command: ls\\nOutput: a.txt"}})
    ('a.txt', True)
    """
    answer = response.get("response")
    failed = isinstance(answer, dict) and "output" not in answer and "error" in answer
    if isinstance(answer, dict):
        answer = answer.get("error") if failed else answer.get("output", answer)
    shown = record.get("toolCallResult")
    display = shown.get("resultDisplay") if isinstance(shown, dict) else None
    if (
        isinstance(shown, dict)
        and isinstance(display, dict)
        and display.get("type") == "shell_result"
        and response.get("id") == shown.get("callId")
        and isinstance(display.get("output"), str)
    ):
        return display["output"], display.get("outcome") != "completed"
    return answer, failed


def markdown(record: Mapping[str, Any]) -> Iterator[str]:
    """The Markdown of one transcript record: ``user`` (the person's prompt),
    ``assistant`` (text parts, ``functionCall`` parts; thoughts left out) and
    ``tool_result`` (``functionResponse`` parts) records with ``message.parts``.

    >>> rec = {"type": "assistant", "message": {"parts": [{"text": "Hi"},
    ...        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]}}
    >>> "".join(markdown(rec))
    '**Assistant**\\n\\nHi\\n\\n- **Tool call** `run_shell_command`: `ls`\\n\\n'
    """
    kind = record.get("type")
    if kind not in ("user", "assistant", "tool_result"):
        return
    message = record.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return
    texts: list[str] = []
    tools: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        call = part.get("functionCall")
        if isinstance(call, dict):
            tools.append(tool_call(str(call.get("name", "tool")), call.get("args")))
        response = part.get("functionResponse")
        if isinstance(response, dict):
            tools.append(tool_result(*tool_response(record, response)))
    who = "Assistant" if kind == "assistant" else "User"
    if kind == "tool_result":
        who, texts = "Tool", []
    yield from turn(who, timestamp(record.get("timestamp")), texts, tools, kind == "user")


def turns(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The turn events of one transcript record (:mod:`jupyter_agents.agents.turns`):
    ``user`` and ``assistant`` text parts (a ``thought`` part is a ``thought``),
    ``functionCall`` parts (``tool_call``) and ``functionResponse`` parts
    (``tool_call_update``, ``failed`` for an ``error`` response). A ``tool_result``
    record also holds what Qwen showed of the call (``toolCallResult.resultDisplay``):
    a shell's own output (:func:`tool_response`) and ``todo_write``'s list
    (``todo_list``: a ``plan``, the whole list after the change).

    >>> rec = {"type": "tool_result", "message": {"parts": [{"functionResponse": {
    ...     "id": "c1", "name": "run_shell_command", "response": {"output": "a.txt"}}}]}}
    >>> [(e["type"], e["tool_call_id"], e["output"]) for e in turns(rec)]
    [('tool_call_update', 'c1', 'a.txt')]
    """
    kind = record.get("type")
    at = record.get("timestamp")
    message = record.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    if kind not in ("user", "assistant", "tool_result") or not isinstance(parts, list):
        yield other(at, kind if kind != "system" else f"system/{record.get('subtype')}")
        return
    for part in parts:
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str) and kind != "tool_result":
            if part.get("thought"):
                yield turn_event("thought", at, text=text)
            else:
                yield said(kind == "user", at, text)
        function = part.get("functionCall")
        if isinstance(function, dict):
            name = str(function.get("name", "tool"))
            yield call(at, function.get("id") or name, name, function.get("args"))
        response = part.get("functionResponse")
        if isinstance(response, dict):
            answer, failed = tool_response(record, response)
            yield result(at, response.get("id") or response.get("name"), answer, failed)
    shown = record.get("toolCallResult")
    display = shown.get("resultDisplay") if isinstance(shown, dict) else None
    if isinstance(display, dict) and display.get("type") == "todo_list":
        todos = display.get("todos")
        todos = todos if isinstance(todos, list) else []
        yield plan(at, [(t.get("content"), t.get("status")) for t in todos if isinstance(t, dict)])


# -- Node.js ---------------------------------------------------------------------------

_NODE_MAJOR = re.compile(rb"#define\s+NODE_MAJOR_VERSION\s+(\d+)")


def node_major(path: str | None) -> int | None:
    """The major version of the ``node`` found on ``path`` (as ``#!/usr/bin/env node``
    finds it), read from the ``include/node/node_version.h`` of its installation
    (no process is run); None when there is no node or no such header."""
    node = shutil.which("node", path=path)
    if node is None:
        return None
    header = Path(os.path.realpath(node)).parent.parent / "include" / "node" / "node_version.h"
    try:
        match = _NODE_MAJOR.search(header.read_bytes()[:8192])
    except OSError:
        return None
    return int(match[1]) if match else None


def _runs_on_env_node(program: str) -> bool:
    """Whether ``program``'s first line is ``#!/usr/bin/env node``."""
    try:
        with open(program, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and first[2:].split() == [b"/usr/bin/env", b"node"]


class QwenKind(AssignedIdKind):
    """``qwen`` with an id assigned at launch and followed through ``/clear``."""

    name = "qwen"
    id_flags = _ID_FLAGS
    label = "Qwen Code"
    badge = ("Q", "#615ced")
    install = "npm install -g @qwen-code/qwen-code (needs Node.js 22 or newer)"
    #: its ACP mode (DESIGN section 18)
    acp_args = ("--acp",)
    follows_conversation = True
    reports = "hooks"
    keeps_conversations = True
    message_types = frozenset({"user", "assistant"})
    reports_usage = True
    #: no list prices: Qwen runs whatever model its endpoint serves (``OPENAI_MODEL``)
    prices: Mapping[str, Mapping[str, float]] = {}
    #: Escape cancels a turn (as a person presses it)
    interrupt_key = "\x1b"
    #: how long a permission request waits for an answer from elsewhere before Qwen
    #: shows its own dialog (it shows none while the hook runs)
    ask_wait: float = 120.0
    own_env = (
        "QWEN_CODE",
        "QWEN_CODE_SESSION_ID",
        "QWEN_CODE_PROJECT_DIR",
        "QWEN_CODE_CLI",
        "QWEN_CODE_NO_RELAUNCH",
        "QWEN_PROJECT_DIR",
    )

    def unavailable(self, path: str | None, mode: str = "terminal") -> str | None:
        """Also when the ``node`` on ``path`` is known to be older than Node.js 22 (read
        from its installation's header, when the program runs on ``env node``)."""
        why = super().unavailable(path, mode)
        if why is not None or (mode == "acp" and self.acp_command is not None):
            return why
        program = self.command[0]
        found = program if os.sep in program else shutil.which(program, path=path)
        if found is None or not _runs_on_env_node(found):
            return None
        major = node_major(path)
        if major is not None and major < NODE_MAJOR:
            return (
                f"{program} needs Node.js {NODE_MAJOR} or newer, and the node on PATH "
                f"is version {major}; put a newer node first on PATH"
            )
        return None

    def usage_reader(self, saved: str | None) -> UsageReader:
        return QwenUsage()

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        return markdown(record)

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return turns(record)

    def session_files(self, state_dir: Path, session_id: str) -> list[Path]:
        """Its system-defaults file (our hooks)."""
        return [hook_settings_path(state_dir, settings_name(session_id))]

    def reporting_env(self, state_dir: Path, session_id: str) -> dict[str, str]:
        """``QWEN_CODE_SYSTEM_DEFAULTS_PATH`` naming the session's private system
        defaults (:func:`qwen_settings`): the administrator's, plus our hooks."""
        path = qwen_settings(state_dir, session_id, self.ask_wait, os.environ)
        return {SYSTEM_DEFAULTS_ENV: str(path)}

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """``projects/<slug of the folder>/chats/<id>.jsonl``, newest first."""
        if not session.cwd:
            return []
        projects = runtime_dir(session.env or {}) / "projects"
        found = (
            (path.stem, path)
            for slug in _cwd_slugs(session.cwd)
            for path in (projects / slug / "chats").glob("*.jsonl")
            if is_uuid(path.stem)
        )
        return newest_conversations(found, limit)

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        if not is_uuid(conversation_id):
            return None
        return conversation_file(session.env or {}, session.cwd, conversation_id)

    def live_conversation(self, env: Mapping[str, str], pid: int) -> str | None:
        return live_conversation(env, pid)
