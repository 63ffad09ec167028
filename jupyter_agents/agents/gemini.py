"""Gemini CLI (``@google/gemini-cli``, docs/agents-gemini.md; tested with 0.61.0).

The conversation id is assigned at launch (``--session-id <uuid4>``), so it is exact
from the first second; the folder-trust dialog Gemini shows in a folder not yet trusted
restarts the CLI with the same argv, so the id survives it. Gemini writes the
conversation from launch on, to ``<gemini dir>/tmp/<project>/chats/session-<time>-<first
8 characters of the id>.jsonl``, whose first line is ``{"sessionId", "projectHash",
"startTime", "kind": "main"}``; ``<project>`` is the folder's short name in
``<gemini dir>/projects.json``. ``--resume <id>`` starts another such file (a stub of two
lines, which the hooks' ``transcript_path`` then names) and appends the conversation's
new messages to the first one: the conversation's file is the largest file whose first
line names the id. ``--session-id`` refuses an id that has a file ("already exists"), so
resume picks ``--resume`` when it has one and ``--session-id`` when not; never
``--resume latest``.

Attention comes from Gemini's hooks (Claude's layout, other event names: each recorded
as ours with the hook's ``--as``): ``SessionStart``, ``BeforeAgent`` (a prompt),
``BeforeTool``/``AfterTool``, ``Notification`` of type ``ToolPermission`` (its dialog
is shown), ``AfterAgent`` (the turn's end) and ``SessionEnd``. Gemini's hooks cannot
answer a permission request: ``Notification`` is observational, and ``BeforeTool`` runs
before Gemini's policy decides whether to ask, and can deny or force a dialog but never
skip one. So a request is answered in the terminal only. There is no "waiting for
input" reminder either. Hooks run only in a trusted folder.

Our hooks reach one process only through its *system defaults* file: Gemini merges the
``hooks`` of every settings scope by concatenation (system defaults, the user's, the
trusted workspace's, the system's), so they run beside the user's own. The variable
``GEMINI_CLI_SYSTEM_DEFAULTS_PATH`` names a private file holding the administrator's
system-defaults file (the one it hides) with our hooks added. Gemini reads a system file
only when root owns it and every folder above it and none of them is writable by group
or others; where that cannot hold (a server that is not root, a state dir under
``/tmp``), no hooks are given and the session's attention stays unknown
(:func:`accepted_as_system_file`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from jupyter_agents.agents.base import (
    AssignedIdKind,
    FolderConversation,
    home_of,
    is_uuid,
    newest_conversations,
)
from jupyter_agents.agents.hooks import (
    hook_command,
    hook_settings_path,
    merged_hooks,
    spool_dir,
    write_hook_settings,
)
from jupyter_agents.agents.markdown import timestamp, tool_call, tool_result, turn
from jupyter_agents.agents.turns import call, other, plan, result, turn_event
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
_ID_FLAGS = frozenset({"--session-id", "--resume", "-r", "--session-file", "--delete-session"})
#: where Gemini reads the administrator's settings (``/etc/gemini-cli/settings.json`` on
#: Linux) and, beside it, the system defaults, unless these variables name other files
SYSTEM_SETTINGS_ENV = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
SYSTEM_DEFAULTS_ENV = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"
SYSTEM_SETTINGS = "/etc/gemini-cli/settings.json"
#: Gemini's hook events we subscribe to, and what each is recorded as (None: as named)
GEMINI_EVENTS: dict[str, str | None] = {
    "SessionStart": None,
    "BeforeAgent": "UserPromptSubmit",
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "Notification": None,  # notification_type "ToolPermission": attention.state_after
    "AfterAgent": "Stop",
    "SessionEnd": None,
}
#: how long Gemini lets one of our hooks run, in milliseconds (its default is 60000)
HOOK_TIMEOUT_MS = 30_000
#: the most of a file's first line read to find its header
_HEADER_MAX = 1 << 16


def gemini_dir(env: Mapping[str, str]) -> Path:
    """``$GEMINI_CLI_HOME/.gemini`` (Gemini's own home override), else ``~/.gemini``
    of the session's home."""
    configured = env.get("GEMINI_CLI_HOME")
    return (Path(configured).expanduser() if configured else home_of(env)) / ".gemini"


def project_name(env: Mapping[str, str], cwd: str) -> str | None:
    """The short name Gemini keeps folder ``cwd``'s files under (``tmp/<name>``), from
    its ``projects.json`` registry (``{"projects": {"<folder>": "<name>"}}``); None
    when the folder has none yet, or the registry is unreadable."""
    try:
        data = json.loads((gemini_dir(env) / "projects.json").read_text())
    except (OSError, ValueError):
        return None
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return None
    for folder in (cwd, os.path.realpath(cwd)):
        name = projects.get(folder)
        if isinstance(name, str) and name and "/" not in name and name not in (".", ".."):
            return name
    return None


def header(path: Path) -> dict[str, Any] | None:
    """The first line of a conversation file, if it is Gemini's header (an object with
    a ``sessionId``)."""
    try:
        with path.open("rb") as f:
            first = json.loads(f.readline(_HEADER_MAX))
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or not isinstance(first.get("sessionId"), str):
        return None
    return first


def _main_id(path: Path) -> str | None:
    """The conversation id a file's header names, for a main conversation (not a
    subagent's)."""
    head = header(path)
    if head is None or head.get("kind", "main") != "main" or not is_uuid(head["sessionId"]):
        return None
    return str(head["sessionId"])


def conversation_file(env: Mapping[str, str], cwd: str | None, conversation_id: str) -> Path | None:
    """The file of conversation ``conversation_id``: among the files named for its first
    eight characters whose header names it, the largest (a resume leaves a smaller stub
    beside it). Looks in ``cwd``'s project folder first, then in every project's."""
    base = gemini_dir(env) / "tmp"
    pattern = f"session-*-{conversation_id[:8]}.jsonl"
    name = project_name(env, cwd) if cwd else None
    for folders in ([base / name / "chats"] if name else [], sorted(base.glob("*/chats"))):
        found: list[tuple[int, int, Path]] = []
        for folder in folders:
            for path in sorted(folder.glob(pattern)):
                if _main_id(path) == conversation_id:
                    try:
                        found.append((path.stat().st_size, -len(found), path))
                    except OSError:
                        continue
        if found:
            return max(found)[2]
    return None


# -- our hooks, for one process -----------------------------------------------------------


def system_defaults_path(env: Mapping[str, str]) -> Path:
    """The system-defaults file Gemini reads for a process with ``env`` (the one our
    variable would hide)."""
    if env.get(SYSTEM_DEFAULTS_ENV):
        return Path(env[SYSTEM_DEFAULTS_ENV])
    settings = env.get(SYSTEM_SETTINGS_ENV) or SYSTEM_SETTINGS
    return Path(settings).parent / "system-defaults.json"


def _safe(path: str, directory: bool) -> bool:
    try:
        st = os.stat(path)
        link = os.lstat(path)
    except FileNotFoundError:
        return True  # Gemini skips what is not there
    except OSError:
        return False
    if stat.S_ISLNK(link.st_mode) and link.st_uid != 0:
        return False
    if directory != stat.S_ISDIR(st.st_mode) or (not directory and not stat.S_ISREG(st.st_mode)):
        return False
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def accepted_as_system_file(path: Path) -> bool:
    """Whether Gemini 0.61 reads ``path`` as a system settings file (``settings.ts``
    ``loadSystemFile``, ``isFileAndDirectorySecureSync``): the file and every folder
    above it, as named and as resolved, owned by root and not writable by group or
    others (else it skips the file with a security warning).

    >>> accepted_as_system_file(Path("/tmp/x/settings.json"))  # /tmp: anyone writes
    False
    """
    named = os.path.abspath(path)
    real = os.path.realpath(path)
    for full in {named, real}:
        folder = os.path.dirname(full)
        while True:
            if not _safe(folder, True):
                return False
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        if not _safe(full, False):
            return False
    return True


def _admin_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """The administrator's system-defaults settings, as Gemini would read them (nothing
    when absent, unreadable, not an object, or a file Gemini would skip)."""
    path = system_defaults_path(env)
    if not path.is_file() or not accepted_as_system_file(path):
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def gemini_hooks(state_dir: Path, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """Our hooks in Gemini's settings layout (``hooks.<Event>``): each event of
    :data:`GEMINI_EVENTS` runs :func:`~jupyter_agents.agents.hooks.hook_command`,
    recording it under our name for it (the spool it appends to is made here)."""
    spool_dir(state_dir)
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, ours in GEMINI_EVENTS.items():
        command = shlex.join(hook_command(state_dir, session_id, event=ours))
        handler = {
            "type": "command",
            "command": command,
            "name": f"jupyter-agents {event}",
            "timeout": HOOK_TIMEOUT_MS,
        }
        hooks[event] = [{"hooks": [handler]}]
    return hooks


def settings_name(session_id: str) -> str:
    """The name of session ``session_id``'s system-defaults file (in ``hooks/``)."""
    return f"{session_id}.gemini.json"


def gemini_settings(state_dir: Path, session_id: str, env: Mapping[str, str]) -> Path:
    """Write the session's private system-defaults file and return its path: the
    administrator's system defaults (of a process with ``env``) with our hooks
    (:func:`gemini_hooks`) appended to theirs, event by event."""
    settings = merged_hooks(_admin_defaults(env), gemini_hooks(state_dir, session_id))
    return write_hook_settings(state_dir, settings_name(session_id), settings)


# -- usage ------------------------------------------------------------------------------


def parse_usage(line: bytes) -> Record | None:
    """The usage of one line of a Gemini conversation file; None for lines that hold
    none; :class:`BadRecord` for a model message whose ``tokens`` do not parse.

    Gemini writes a message again (same ``id``) when its tool calls are added: each
    record is keyed by that id. ``tokens.input`` counts the cached tokens too; thoughts
    are billed as output, ``tool`` (tool-use prompt tokens) as input.

    >>> line = (b'{"id": "m1", "timestamp": "2026-12-05T15:16:57Z", "type": "gemini", '
    ...         b'"tokens": {"input": 1300, "output": 20, "cached": 300, "thoughts": 5, '
    ...         b'"tool": 2, "total": 1327}, "model": "gemini-2.5-pro"}')
    >>> r = parse_usage(line)
    >>> r.key, r.model, r.tokens
    ('m1', 'gemini-2.5-pro', Tokens(input=1002, output=25, cache_creation=0, cache_read=300))
    >>> parse_usage(b'{"type": "user", "content": [{"text": "hi"}]}') is None
    True
    """
    if b'"tokens"' not in line:
        return None
    entry = json_object(line)
    if entry.get("type") != "gemini":
        return None
    tokens = entry.get("tokens")
    if not isinstance(tokens, dict):
        raise BadRecord("tokens is not an object")
    given = count(tokens.get("input"))
    cached = min(count(tokens.get("cached")), given)
    counted = Tokens(
        given - cached + count(tokens.get("tool")),
        count(tokens.get("output")) + count(tokens.get("thoughts")),
        0,
        cached,
    )
    if counted.total == 0:
        return None
    model, key = entry.get("model"), entry.get("id")
    return Record.of(key, model, epoch(entry.get("timestamp")), counted)


class GeminiUsage(UsageReader):
    """Gemini CLI writes each model message (``"type": "gemini"``) with ``model`` and
    ``tokens`` (``input`` with the cached ones in it, ``output``, ``cached``,
    ``thoughts``, ``tool``, ``total``: the API's ``usageMetadata``). Nothing carries from
    line to line (:func:`parse_usage`)."""

    def parse(self, line: bytes) -> Record | None:
        return parse_usage(line)


# -- the conversation as Markdown -------------------------------------------------------


#: what Gemini's shell tool (``run_shell_command``) sends the model: ``Output: `` and
#: the command's output (``(empty)`` for none), then ``Error``, ``Exit Code`` (not 0),
#: ``Signal``, ``Background PIDs`` and ``Process Group PGID`` lines when there are any
#: (``packages/core/src/tools/shell.ts``), in Gemini 0.61 inside ``<untrusted_context>``
_SHELL_TEXT = re.compile(
    r"\A(?:<untrusted_context>\n)?Output: (?P<output>.*?)(?:\nError: (?P<error>.*?))?"
    r"(?:\nExit Code: (?P<code>-?\d+))?(?:\nSignal: (?P<signal>[^\n]*))?"
    r"(?:\nBackground PIDs: [^\n]*)?(?:\nProcess Group PGID: \d+)?(?:\n</untrusted_context>)?\Z",
    re.DOTALL,
)


def response_output(response: Mapping[str, Any]) -> tuple[Any, bool]:
    """What a ``functionResponse`` says the tool returned, and whether it failed: its
    ``output`` (its ``error`` when it has only that); for the shell, the command's own
    output (:data:`_SHELL_TEXT`), failed with an error, exit code or signal.

    >>> response_output({"name": "run_shell_command", "response": {"output":
    ...     "<untrusted_context>\\nOutput: a\\nb\\nExit Code: 2\\nProcess Group PGID: 7\\n"
    ...     "</untrusted_context>"}})
    ('a\\nb', True)
    """
    output = response.get("response")
    failed = False
    if isinstance(output, dict):
        failed = "error" in output and "output" not in output
        output = output.get("output", output.get("error", output))
    shell = _SHELL_TEXT.match(output) if isinstance(output, str) else None
    if response.get("name") == "run_shell_command" and shell is not None:
        text = "" if shell["output"] == "(empty)" else shell["output"]
        return text, failed or any(shell[k] is not None for k in ("error", "code", "signal"))
    return output, failed


def _parts(content: object) -> tuple[list[str], list[str]]:
    """The texts and tool results of a message's ``content`` (a string or parts)."""
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    results: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        response = part.get("functionResponse")
        if isinstance(response, dict):
            results.append(tool_result(*response_output(response)))
    return texts, results


def markdown(record: Mapping[str, Any]) -> Iterator[str]:
    """The Markdown of one line of a conversation file (nothing for the header, ``$set``
    updates and other lines that are not turns): ``user`` messages (text parts; tool
    results), ``gemini`` messages (text; tool calls), ``info``/``error`` notes. Gemini
    writes a model message again once its tool calls are added: that second record
    gives the tool calls only (its text was given with the first)."""
    kind = record.get("type")
    when = timestamp(record.get("timestamp"))
    content = record.get("content")
    if kind == "user":
        texts, results = _parts(content)
        texts = [t for t in texts if not t.lstrip().startswith("<session_context>")]
        yield from turn("User", when, texts, [], True)
        if results:
            yield from turn("Tool", when, [], results, False)
    elif kind == "gemini":
        calls = record.get("toolCalls")
        if isinstance(calls, list) and calls:
            tools = [
                tool_call(str(call.get("name", "tool")), call.get("args"))
                for call in calls
                if isinstance(call, dict)
            ]
            yield from turn("Assistant", when, [], tools, False)
        else:
            texts, _ = _parts(content)
            yield from turn("Assistant", when, [t for t in texts if t.strip()], [], False)
    elif kind in ("info", "error", "warning") and isinstance(content, str):
        yield f"*{content.strip()}*\n\n"


#: the statuses Gemini writes for a tool call, as ACP's
_CALL_STATUS = {"success": "completed", "error": "failed", "cancelled": "failed"}


def turns(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The turn events of one line of a conversation file
    (:mod:`jupyter_agents.agents.turns`): ``user`` text (its session context left out),
    ``gemini`` text and thoughts, or, in the record Gemini writes again once a message's
    tool calls ended, those calls, each with its result (:func:`response_output`; a
    ``write_todos`` that ran is a ``plan`` too, the whole list); ``info``/``error``/
    ``warning`` notes are ``other`` events. The ``user`` record that sends the results
    to the model repeats them: no event.

    >>> rec = {"type": "gemini", "toolCalls": [{"id": "c1", "name": "run_shell_command",
    ...     "args": {"command": "ls"}, "status": "success", "result": [{"functionResponse":
    ...     {"id": "c1", "response": {"output": "a.txt"}}}]}]}
    >>> [(e["type"], e["status"]) for e in turns(rec)]
    [('tool_call', 'completed'), ('tool_call_update', 'completed')]
    """
    kind = record.get("type")
    at = record.get("timestamp")
    content = record.get("content")
    if kind == "user":
        texts, _ = _parts(content)
        for text in texts:
            if not text.lstrip().startswith("<session_context>"):
                yield turn_event("user_message", at, text=text)
    elif kind == "gemini":
        calls = record.get("toolCalls")
        if isinstance(calls, list) and calls:
            for one in calls:
                if not isinstance(one, dict):
                    continue
                name, arguments = str(one.get("name", "tool")), one.get("args")
                status = _CALL_STATUS.get(str(one.get("status")), "pending")
                yield call(at, one.get("id") or name, name, arguments, status)
                ended = one.get("timestamp") or at
                for part in one.get("result") or []:
                    response = part.get("functionResponse") if isinstance(part, dict) else None
                    if isinstance(response, dict):
                        output, failed = response_output(response)
                        call_id = response.get("id") or response.get("name")
                        yield result(ended, call_id, output, failed or status == "failed")
                todos = arguments.get("todos") if isinstance(arguments, dict) else None
                if name == "write_todos" and status == "completed" and isinstance(todos, list):
                    steps = [
                        (t.get("description"), t.get("status"))
                        for t in todos
                        if isinstance(t, dict)
                    ]
                    yield plan(ended, steps)
            return
        texts, _ = _parts(content)
        for text in texts:
            if text.strip():
                yield turn_event("agent_message", at, text=text)
        for thought in record.get("thoughts") or []:
            if isinstance(thought, dict) and isinstance(thought.get("description"), str):
                yield turn_event("thought", at, text=thought["description"])
    else:
        yield other(at, kind if isinstance(kind, str) else "$set" if "$set" in record else "?")


class GeminiKind(AssignedIdKind):
    """``gemini`` with an id assigned at launch; attention from its hooks."""

    name = "gemini"
    id_flags = _ID_FLAGS
    label = "Gemini CLI"
    badge = ("G", "#4285f4")
    install = "npm install -g @google/gemini-cli"
    #: its ACP mode (DESIGN section 18)
    acp_args = ("--acp",)
    reports = "hooks"
    keeps_conversations = True
    message_types = frozenset({"user", "gemini"})
    reports_usage = True
    #: no list prices: Google's are not in this repository (tokens are counted, not priced)
    prices: Mapping[str, Mapping[str, float]] = {}
    #: Escape cancels a turn (its footer says "esc to cancel")
    interrupt_key = "\x1b"
    #: what Gemini sets for its children: ``GEMINI_CLI=1`` in its shell tool, and
    #: ``GEMINI_CLI_NO_RELAUNCH`` in the process it relaunches itself as
    own_env = ("GEMINI_CLI", "GEMINI_CLI_NO_RELAUNCH")

    def usage_reader(self, saved: str | None) -> UsageReader:
        return GeminiUsage()

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        return markdown(record)

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return turns(record)

    def session_files(self, state_dir: Path, session_id: str) -> list[Path]:
        """Its system-defaults file (our hooks)."""
        return [hook_settings_path(state_dir, settings_name(session_id))]

    def reporting_env(self, state_dir: Path, session_id: str) -> dict[str, str]:
        """``GEMINI_CLI_SYSTEM_DEFAULTS_PATH`` naming the session's private
        system-defaults file (:func:`gemini_settings`), when Gemini would read it
        (:func:`accepted_as_system_file`); else nothing: a file Gemini skips would hide
        the administrator's system defaults and give no hooks either."""
        path = gemini_settings(state_dir, session_id, os.environ)
        if not accepted_as_system_file(path):
            return {}
        return {SYSTEM_DEFAULTS_ENV: str(path)}

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """The main conversations of the folder's project, newest first (by their
        files' last write; a conversation and its resume stubs are one)."""
        if not session.cwd:
            return []
        env = session.env or {}
        name = project_name(env, session.cwd)
        if name is None:
            return []
        chats = (gemini_dir(env) / "tmp" / name / "chats").glob("session-*.jsonl")
        found = ((cid, path) for path in chats if (cid := _main_id(path)) is not None)
        return newest_conversations(found, limit)

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        if not is_uuid(conversation_id):
            return None
        return conversation_file(session.env or {}, session.cwd, conversation_id)
