"""GitHub Copilot CLI (docs/agents-copilot.md).

The conversation id is chosen at launch (``--session-id <uuid4>``), so it is exact from
the first second. Copilot keeps each conversation in
``$COPILOT_HOME/session-state/<id>/`` (``~/.copilot`` by default): ``workspace.yaml`` and
an ``inuse.<pid>.lock`` from launch, ``events.jsonl`` (the conversation, one JSON event
a line) from the first prompt.

On resume: ``--resume=<id>`` when the conversation's ``events.jsonl`` exists (or the
archive saw it: Copilot then says why it cannot resume, instead of a new conversation
starting under the old id); ``--session-id <id>`` when none does (nothing was said
yet); a new conversation when the id is unknown (never ``--continue``).

Attention comes from Copilot's own hooks, given to that one process only: a plugin
folder of ours (``--plugin-dir``, which Copilot loads for that process without trust and
without installing it) holds the hooks; the spool each session's hooks write to is named
in the process's environment (:data:`SPOOL_ENV`), so all sessions share one plugin
folder. The user's ``settings.json`` hooks fire too and are never edited. Copilot's hook
payloads name no event, so each hook records its own (``--as``). A permission request
waits for an answer from JupyterLab or the REST API (:attr:`CopilotKind.ask_wait`; Copilot
shows no dialog meanwhile, and its own after), which the hook prints as Copilot reads it
(``{"behavior": "allow"}``, or ``"deny"`` with a ``message`` the model reads).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from jupyter_agents.agents.base import (
    AssignedIdKind,
    FolderConversation,
    Launch,
    home_of,
    is_uuid,
)
from jupyter_agents.agents.hooks import ask_command, hook_command, spool_dir
from jupyter_agents.agents.markdown import code, timestamp, tool_call, tool_result, turn
from jupyter_agents.agents.spool import spool_path
from jupyter_agents.agents.turns import call, other, result, turn_event
from jupyter_agents.agents.usage import (
    BadRecord,
    Record,
    Tokens,
    UsageReader,
    count,
    epoch,
    json_object,
)
from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.paths import ensure_private_dir
from jupyter_agents.core.records import Session

#: flags that choose the conversation: ours to set
_ID_FLAGS = frozenset({"--session-id", "--resume", "-r", "--continue", "--connect"})
#: flags that move Copilot's whole config and state elsewhere (its sessions with it)
_HOME_FLAGS = frozenset({"--config-dir"})
#: the environment variable naming the spool a session's hooks write to
SPOOL_ENV = "JUPYTER_AGENTS_COPILOT_SPOOL"
#: the plugin's name (Copilot wants kebab-case)
PLUGIN_NAME = "jupyter-agents-attention"
#: Copilot hook events we subscribe to, and the event each is recorded as
#: (:func:`~jupyter_agents.agents.attention.state_after` knows those)
COPILOT_EVENTS: dict[str, str] = {
    "sessionStart": "SessionStart",
    "userPromptSubmitted": "UserPromptSubmit",
    "preToolUse": "PreToolUse",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUse",
    "permissionRequest": "PermissionRequest",
    "notification": "Notification",
    "agentStop": "Stop",
    "sessionEnd": "SessionEnd",
}
#: how long Copilot may run one of our hooks (they return at once)
HOOK_TIMEOUT = 30


def copilot_home(env: Mapping[str, str]) -> Path:
    """``$COPILOT_HOME``, else ``~/.copilot`` of the session's home."""
    configured = env.get("COPILOT_HOME")
    return Path(configured).expanduser() if configured else home_of(env) / ".copilot"


def session_dir(env: Mapping[str, str], conversation_id: str) -> Path:
    """Where Copilot keeps conversation ``conversation_id`` (a UUID)."""
    return copilot_home(env) / "session-state" / conversation_id


def events_file(env: Mapping[str, str], conversation_id: str) -> Path | None:
    """The ``events.jsonl`` of conversation ``conversation_id``, if it exists (a prompt
    was sent)."""
    if not is_uuid(conversation_id):
        return None
    path = session_dir(env, conversation_id) / "events.jsonl"
    return path if path.is_file() else None


#: ``inuse.<pid>.lock``: the mark a Copilot process leaves in the conversation it holds
_LOCK = re.compile(r"inuse\.([0-9]{1,10})\.lock", re.ASCII)
#: how much earlier than its lock a holder may seem to start (a start time is read from
#: the boot time, which Linux gives in whole seconds)
_LOCK_SLACK = 2.0


def clear_stale_locks(folder: Path) -> list[Path]:
    """Remove the ``inuse.<pid>.lock`` files of conversation folder ``folder`` whose
    holder is gone: no process has that pid, or the one that has it started after the
    lock was written (the pid was reused, as soon after a reboot). A lock whose process
    may still hold the conversation (Copilot running it elsewhere) is kept. The removed
    paths; never raises for a file that cannot be read or removed.

    Copilot asks "Resume anyway" for a lock of a live pid, and a prompt sent past that
    question went to the model without the earlier messages."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        matched = _LOCK.fullmatch(entry.name)
        if matched is None:
            continue
        try:
            written = entry.stat(follow_symlinks=False).st_mtime
            started = psutil.Process(int(matched.group(1))).create_time()
        except psutil.NoSuchProcess:
            started = None
        except (OSError, psutil.Error, ValueError):
            continue  # cannot tell: Copilot asks
        if started is not None and started <= written + _LOCK_SLACK:
            continue
        try:
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def first_event(path: Path) -> dict[str, Any] | None:
    """The first event of an ``events.jsonl`` (``session.start``), if readable."""
    try:
        with path.open("rb") as f:
            first = json.loads(f.readline(1 << 20))
    except (OSError, ValueError):
        return None
    return first if isinstance(first, dict) and first.get("type") == "session.start" else None


# -- attention: our hooks, as a plugin folder ------------------------------------------


def plugin_dir(state_dir: Path, ask_wait: float = 0.0) -> Path:
    """Write the plugin folder that gives a Copilot process our hooks (the same for every
    session of ``state_dir``; each session's own spool comes from :data:`SPOOL_ENV`) and
    return its path, for ``--plugin-dir``.

    The folder holds ``plugin.json`` and ``hooks/hooks.json`` (Copilot's hook file
    format: ``{"version": 1, "hooks": {event: [{"type": "command", "bash", "timeoutSec"}]}}``).
    Each hook runs :mod:`jupyter_agents.hook` with ``--as`` its event (Copilot's payloads
    name none); ``permissionRequest`` runs the asking hook, which waits up to
    ``ask_wait`` seconds for an answer from elsewhere (0: it only reports), while Copilot
    shows no dialog; then Copilot shows its own.
    """
    spool_dir(state_dir)
    folder = ensure_private_dir(state_dir / "hooks") / "copilot-plugin"
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, recorded in COPILOT_EVENTS.items():
        timeout = HOOK_TIMEOUT
        if event == "permissionRequest" and ask_wait > 0:
            # Copilot CLI reads a bare decision
            argv = ask_command(
                state_dir, "_", ask_wait, "dialog", event=recorded, answer="copilot"
            )[:-1]
            timeout = int(ask_wait) + HOOK_TIMEOUT
        else:
            argv = hook_command(state_dir, "_", event=recorded)[:-1]
        command = f'{shlex.join(argv)} "${SPOOL_ENV}"'
        hooks[event] = [{"type": "command", "bash": command, "timeoutSec": timeout}]
    manifest = {
        "name": PLUGIN_NAME,
        "version": "1.0.0",
        "description": "Tells JupyterLab when this session needs its user.",
    }
    _write(folder / "plugin.json", manifest)
    _write(ensure_private_dir(folder / "hooks") / "hooks.json", {"version": 1, "hooks": hooks})
    return folder


def _write(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` at once (a rename), so a CLI starting in
    another session never reads half a file."""
    ensure_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


# -- usage ------------------------------------------------------------------------------


def parse_usage(line: bytes) -> Record | None:
    """The usage of one line of a Copilot ``events.jsonl`` (a ``session.usage_record``
    event, one per model call); None for lines that hold none; :class:`BadRecord` for
    one that should and does not.

    Copilot's ``inputTokens`` includes the cached input (``cacheReadTokens``) and the
    input written to a cache (``cacheWriteTokens``): input is what is left.

    >>> line = (b'{"type": "session.usage_record", "timestamp": "2026-12-05T15:15:23Z", '
    ...         b'"data": {"usage": {"model": "gpt-4o", "inputTokens": 130, '
    ...         b'"outputTokens": 20, "cacheReadTokens": 30, "cacheWriteTokens": 0, '
    ...         b'"cost": 0.0, "accounting": {"usageId": "chatcmpl-1"}}}}')
    >>> r = parse_usage(line)
    >>> r.key, r.model, r.tokens
    ('chatcmpl-1', 'gpt-4o', Tokens(input=100, output=20, cache_creation=0, cache_read=30))
    >>> parse_usage(b'{"type": "assistant.message", "data": {}}') is None
    True
    """
    if b'"session.usage_record"' not in line:
        return None
    entry = json_object(line)
    if entry.get("type") != "session.usage_record":
        return None
    data = entry.get("data")
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        raise BadRecord("session.usage_record without data.usage")
    given = count(usage.get("inputTokens"))
    read = count(usage.get("cacheReadTokens"))
    written = count(usage.get("cacheWriteTokens"))
    tokens = Tokens(max(0, given - read - written), count(usage.get("outputTokens")), written, read)
    if tokens.total == 0:
        return None
    accounting = usage.get("accounting")
    key = accounting.get("usageId") if isinstance(accounting, dict) else None
    key = key if isinstance(key, str) and key else usage.get("apiCallId")
    model = usage.get("model")
    return Record.of(key, model, epoch(entry.get("timestamp")), tokens)


class CopilotUsage(UsageReader):
    """Copilot writes one ``session.usage_record`` event per model call into the
    conversation's ``events.jsonl`` (``data.usage``: ``model``, ``inputTokens``,
    ``outputTokens``, ``cacheReadTokens``, ``cacheWriteTokens``, ``cost``, and
    ``accounting.usageId``, the call's id): :func:`parse_usage`. Its ``cost`` is in
    Copilot's own units (premium requests; 0 with a provider of one's own), not dollars,
    so it is not counted. Nothing carries from line to line."""

    def parse(self, line: bytes) -> Record | None:
        return parse_usage(line)


# -- the conversation as Markdown -------------------------------------------------------


def markdown(record: Mapping[str, Any]) -> Iterator[str]:
    """The Markdown of one ``events.jsonl`` event (nothing for events that are not turns):
    ``session.start``, ``user.message``, ``assistant.message`` (text and
    ``toolRequests``), ``tool.execution_complete``, ``session.compaction_complete``."""
    data = record.get("data")
    if not isinstance(data, dict):
        return
    kind = record.get("type")
    when = timestamp(record.get("timestamp"))
    if kind == "session.start":
        context = data.get("context")
        cwd = context.get("cwd") if isinstance(context, dict) else None
        where = f" in {code(str(cwd))}" if cwd else ""
        yield f"*Copilot session {code(str(data.get('sessionId', '?')))} started{where}.*\n\n"
    elif kind == "session.compaction_complete":
        yield f"*The conversation was compacted{when and ' at ' + when}.*\n\n"
    elif kind == "user.message" and isinstance(data.get("content"), str):
        yield from turn("User", when, [data["content"]], [], True)
    elif kind == "assistant.message":
        text = data.get("content")
        texts = [text] if isinstance(text, str) and text.strip() else []
        tools = [
            tool_call(str(request.get("name") or "tool"), request.get("arguments"))
            for request in data.get("toolRequests") or []
            if isinstance(request, dict)
        ]
        if texts or tools:
            yield from turn("Assistant", when, texts, tools, False)
    elif kind == "tool.execution_complete":
        yield from turn("Tool", when, [], [tool_result(*tool_outcome(data))], False)


#: the line Copilot's shell tool adds after a command's output for the model (its own
#: display takes it off again): ``<shellId: 0 completed with exit code 0>``
_SHELL_END = re.compile(
    r"\n?<(?:detached command with )?shellId: [^\r\n]+ completed with exit code -?\d+>[ \t]*\Z"
)


def tool_outcome(data: Mapping[str, Any]) -> tuple[Any, bool]:
    """What a ``tool.execution_complete`` event's ``data`` says the tool returned, and
    whether it failed: ``result.content`` (``error`` when there is none), ``success``
    false; for a shell command (``shellExecution``), its output without the line naming
    its shell and exit code, and failed for a nonzero ``exitCode``.

    >>> tool_outcome({"success": True, "shellExecution": {"exitCode": 1},
    ...     "result": {"content": "no\\n<shellId: 0 completed with exit code 1>"}})
    ('no', True)
    """
    outcome = data.get("result")
    content = outcome.get("content", outcome) if isinstance(outcome, dict) else outcome
    if content is None and isinstance(data.get("error"), (str, dict)):
        content = data["error"]
    failed = data.get("success") is False
    shell = data.get("shellExecution")
    if isinstance(shell, dict):
        if isinstance(content, str):
            content = _SHELL_END.sub("", content)
        code = shell.get("exitCode")
        failed |= isinstance(code, int) and not isinstance(code, bool) and code != 0
    return content, failed


def turns(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The turn events of one ``events.jsonl`` event (:mod:`jupyter_agents.agents.turns`):
    ``user.message``, ``assistant.message`` (text, ``reasoningText``, ``toolRequests``),
    ``tool.execution_complete`` (:func:`tool_outcome`), ``session.compaction_complete``.
    Copilot's ``assistant.turn_end`` ends one model call (a prompt that runs a tool has
    two), not the prompt's turn, and its file records no end of that: no ``turn_end``.

    >>> rec = {"type": "tool.execution_complete", "data": {"toolCallId": "c1",
    ...     "success": False, "result": {"content": "denied"}}}
    >>> [(e["type"], e["status"], e["output"]) for e in turns(rec)]
    [('tool_call_update', 'failed', 'denied')]
    """
    data = record.get("data")
    kind = record.get("type")
    at = record.get("timestamp")
    if not isinstance(data, dict):
        yield other(at, kind)
    elif kind == "session.compaction_complete":
        summary = data.get("summary")
        yield turn_event("compaction", at, text=summary if isinstance(summary, str) else None)
    elif kind == "user.message" and isinstance(data.get("content"), str):
        yield turn_event("user_message", at, text=data["content"])
    elif kind == "assistant.message":
        if isinstance(data.get("reasoningText"), str) and data["reasoningText"].strip():
            yield turn_event("thought", at, text=data["reasoningText"])
        text = data.get("content")
        if isinstance(text, str) and text.strip():
            yield turn_event("agent_message", at, text=text)
        for request in data.get("toolRequests") or []:
            if isinstance(request, dict):
                name = str(request.get("name") or "tool")
                yield call(at, request.get("toolCallId"), name, request.get("arguments"))
    elif kind == "tool.execution_complete":
        content, failed = tool_outcome(data)
        yield result(at, data.get("toolCallId"), content, failed)
    else:
        yield other(at, kind)


class CopilotKind(AssignedIdKind):
    """``copilot`` with an id chosen at launch and its hooks from a plugin folder."""

    name = "copilot"
    id_flags = _ID_FLAGS
    label = "GitHub Copilot CLI"
    badge = ("G", "#8957e5")
    install = "npm install -g @github/copilot"
    #: its ACP mode (DESIGN section 18)
    acp_args = ("--acp", "--stdio")
    reports = "hooks"
    keeps_conversations = True
    message_types = frozenset({"user.message", "assistant.message"})
    reports_usage = True
    #: Copilot's ``cost`` is premium requests, and what a subscription pays is not a
    #: list price per token: no prices (its tokens are counted, its cost is unknown)
    prices: Mapping[str, Mapping[str, float]] = {}
    #: Ctrl+C cancels a turn ("Operation cancelled by user"); Esc twice only does so
    #: when the input is empty and no earlier prompt can be recalled
    interrupt_key = "\x03"
    #: how long a permission request waits for an answer from elsewhere before Copilot
    #: shows its own dialog (it shows none while the hook runs): ``AgentsApp.permission_wait``
    ask_wait: float = 120.0
    #: set by Copilot's loader for its own process tree (a nested ``copilot`` would take
    #: the loader's choices for its own), and our spool variable
    own_env = (
        "COPILOT_CLI",
        "COPILOT_LOADER_PID",
        "COPILOT_CLI_RESOLVED_DIST_DIR",
        "COPILOT_CLI_BINARY_VERSION",
        SPOOL_ENV,
    )

    def usage_reader(self, saved: str | None) -> UsageReader:
        return CopilotUsage()

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        return markdown(record)

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return turns(record)

    def with_reporting(self, argv: list[str], state_dir: Path, session_id: str) -> list[str]:
        width = len(self.command)
        folder = plugin_dir(state_dir, self.ask_wait)
        return [*argv[:width], "--plugin-dir", str(folder), *argv[width:]]

    def reporting_env(self, state_dir: Path, session_id: str) -> dict[str, str]:
        spool_dir(state_dir)
        return {SPOOL_ENV: str(spool_path(state_dir, session_id))}

    def check_args(self, args: object) -> list[str]:
        checked = super().check_args(args)
        for arg in checked:
            flag = arg.split("=", 1)[0]
            if flag in _HOME_FLAGS:
                raise InvalidRequest(
                    f"{flag} would keep this session's conversation where jupyter_agents "
                    "cannot find it; set COPILOT_HOME in the session's environment instead"
                )
        return checked

    def resume_args(self, conversation_id: str) -> list[str]:
        return [f"--resume={conversation_id}"]

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        """As :meth:`AssignedIdKind.resume`; a conversation it resumes first loses the
        locks of processes that are gone (:func:`clear_stale_locks`), so a restore after
        a reboot resumes without Copilot's "in use by another CLI" question."""
        launch = super().resume(session, env, had_file)
        if launch.conversation_id is not None and not launch.fresh:
            clear_stale_locks(session_dir(env, launch.conversation_id))
        return launch

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """Conversations whose ``session.start`` names the session's folder, newest first
        (by the last write of their ``events.jsonl``; the newest 500 are read)."""
        if not session.cwd:
            return []
        folder = copilot_home(session.env or {}) / "session-state"
        dated = []
        for path in folder.glob("*/events.jsonl"):
            if not is_uuid(path.parent.name):
                continue
            try:
                dated.append((path.stat().st_mtime, path))
            except OSError:
                continue
        found = []
        for mtime, path in sorted(dated, reverse=True)[:500]:
            first = first_event(path)
            data = first.get("data") if first else None
            context = data.get("context") if isinstance(data, dict) else None
            if isinstance(context, dict) and context.get("cwd") == session.cwd:
                found.append(FolderConversation(path.parent.name, clock.from_epoch(mtime)))
                if len(found) == limit:
                    break
        return found

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        """``session-state/<id>/events.jsonl``: all ``--resume=<id>`` needs (put back
        alone, Copilot resumes from it and writes the rest anew)."""
        return events_file(session.env or {}, conversation_id)
