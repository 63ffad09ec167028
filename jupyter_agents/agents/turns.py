"""Turn events: what an agent's conversation records say, in one shape for every kind.

Each kind reads its CLI's records (:meth:`AgentKind.turns
<jupyter_agents.agents.base.AgentKind.turns>`) into events of the shape in
``jupyter_agents/event_schemas/turn/v1.yaml``, modelled on the Agent Client Protocol's
``session/update`` notifications, plus what ACP has no update for:

- ``user_message``, ``agent_message``, ``thought``: ``text``;
- ``tool_call``: ``tool_call_id``, ``tool`` (the CLI's name for it), ``tool_kind`` (ACP's
  ``read``, ``edit``, ``delete``, ``move``, ``search``, ``execute``, ``think``,
  ``fetch``, ``other``), ``title`` (one line: what it does), ``status``, ``input``,
  ``locations`` (``[{path, line?}]``);
- ``tool_call_update``: ``tool_call_id``, ``status`` (``completed`` or ``failed``),
  ``output`` (text);
- ``plan``: ``entries`` (``[{content, status}]``, ``status`` one of ``pending``,
  ``in_progress``, ``completed``), the whole plan; or, with ``partial``, entries to merge
  by their ``id`` into the plan so far (Claude Code's tasks, made and updated one at a
  time);
- ``compaction`` (``text``: the summary, when the CLI wrote one), ``turn_end``;
- ``other``: a record of a type the kind does not map, with ``raw_type`` (never
  dropped, so a reader can tell something happened).

Every event has ``type`` and ``at`` (ISO 8601 UTC, or None when the record has no
time). Text is cut at :data:`MAX_TEXT` characters and input at :data:`MAX_INPUT` (then
``cut`` is true): a 10 MB line costs a reader no more than a short one. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from jupyter_agents.agents.markdown import one_line, what_it_does
from jupyter_agents.core import clock

TurnType = Literal[
    "user_message",
    "agent_message",
    "thought",
    "tool_call",
    "tool_call_update",
    "plan",
    "compaction",
    "turn_end",
    "other",
]
ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"]
#: the most characters of text (a message, a tool's output) an event holds
MAX_TEXT = 64 * 1024
#: the most characters of a tool call's input (as JSON) an event holds
MAX_INPUT = 16 * 1024

#: ACP tool kinds of the tools the kinds' CLIs name (lower case), by what they do
_TOOL_KINDS: dict[str, ToolKind] = {
    **dict.fromkeys(
        ("bash", "shell", "run_shell_command", "exec_command", "local_shell", "bashoutput"),
        "execute",
    ),
    **dict.fromkeys(
        ("read", "read_file", "view", "read_many_files", "notebookread", "ls", "list_directory"),
        "read",
    ),
    **dict.fromkeys(
        (
            "edit",
            "multiedit",
            "write",
            "write_file",
            "replace",
            "apply_patch",
            "notebookedit",
            "str_replace_editor",
            "create",
            "patch",
        ),
        "edit",
    ),
    **dict.fromkeys(("grep", "glob", "search", "search_file_content", "find"), "search"),
    **dict.fromkeys(("webfetch", "web_fetch", "fetch", "websearch", "web_search"), "fetch"),
    **dict.fromkeys(("think", "todowrite", "update_plan", "todo_write", "write_todos"), "think"),
}
#: ACP plan entry statuses, from what the CLIs write
_PLAN_STATUS = {
    "pending": "pending",
    "in_progress": "in_progress",
    "in-progress": "in_progress",
    "completed": "completed",
    "done": "completed",
}


def tool_kind(name: str) -> ToolKind:
    """The ACP tool kind of a tool the CLI calls ``name``.

    >>> tool_kind("Bash"), tool_kind("run_shell_command"), tool_kind("mcp__x__y")
    ('execute', 'execute', 'other')
    """
    return _TOOL_KINDS.get(name.lower(), "other")


def cut(text: str, limit: int = MAX_TEXT) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, and whether it was.

    >>> cut("abcdef", 3)
    ('abc', True)
    """
    return (text, False) if len(text) <= limit else (text[:limit], True)


def turn_event(kind: TurnType, at: object = None, **fields: Any) -> dict[str, Any]:
    """One event: ``type``, ``at`` (``at`` as the store writes times, None if it is none)
    and ``fields`` without the None ones, with ``text``/``output`` and ``input`` cut
    (``cut``: true when one was).

    >>> turn_event("agent_message", "2026-12-07T05:00:00Z", text="hi")
    {'type': 'agent_message', 'at': '2026-12-07T05:00:00Z', 'text': 'hi'}
    """
    when = clock.parse_or_none(at)
    out: dict[str, Any] = {"type": kind, "at": None if when is None else clock.iso(when)}
    was_cut = False
    for key, value in fields.items():
        if value is None:
            continue
        if key in ("text", "output") and isinstance(value, str):
            value, short = cut(value)
            was_cut |= short
        elif key == "input":
            value, short = _bounded_input(value)
            was_cut |= short
        out[key] = value
    if was_cut:
        out["cut"] = True
    return out


def _bounded_input(value: Any) -> tuple[Any, bool]:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return cut(str(value), MAX_INPUT)
    if len(text) <= MAX_INPUT:
        return value, False
    return text[:MAX_INPUT], True


def said(user: bool, at: object, text: str) -> dict[str, Any]:
    """A ``user_message`` (``user``) or ``agent_message`` event."""
    return turn_event("user_message" if user else "agent_message", at, text=text)


def call(
    at: object, call_id: object, name: str, arguments: Any, status: str = "pending"
) -> dict[str, Any]:
    """A ``tool_call`` event: its title says what it does in one line (the command, the
    path...), its ``locations`` the paths it names."""
    return turn_event(
        "tool_call",
        at,
        tool_call_id=None if call_id is None else str(call_id),
        tool=name,
        tool_kind=tool_kind(name),
        title=title(name, arguments),
        status=status,
        input=arguments,
        locations=locations(arguments),
    )


def result(at: object, call_id: object, output: Any, failed: bool = False) -> dict[str, Any]:
    """A ``tool_call_update`` event: the call ended (``failed`` or not) with ``output``."""
    return turn_event(
        "tool_call_update",
        at,
        tool_call_id=None if call_id is None else str(call_id),
        status="failed" if failed else "completed",
        output=text_of(output),
    )


def plan(at: object, entries: Iterable[tuple[object, object]]) -> dict[str, Any]:
    """A ``plan`` event, the whole plan, from ``(content, status)`` pairs (unknown
    statuses are ``pending``)."""
    return turn_event(
        "plan",
        at,
        entries=[
            {"content": one_line(str(content), 500), "status": _PLAN_STATUS.get(str(s), "pending")}
            for content, s in entries
        ],
    )


def plan_change(
    at: object, entry_id: object, content: object = None, status: object = None
) -> dict[str, Any]:
    """A ``plan`` event that changes one entry (``partial``: merge its entries by
    ``id`` into the plan so far): a task made (``content``, ``pending``) or whose status
    changed (``status`` alone). ACP's plans are whole; Claude Code's tasks come one at a
    time.

    >>> plan_change(None, "1", status="in_progress")
    {'type': 'plan', 'at': None, 'entries': [{'id': '1', 'status': 'in_progress'}], 'partial': True}
    """
    entry: dict[str, Any] = {"id": str(entry_id)}
    if content is not None:
        entry["content"] = one_line(str(content), 500)
    entry["status"] = _PLAN_STATUS.get(str(status), "pending")
    return {**turn_event("plan", at, entries=[entry]), "partial": True}


def other(at: object, raw_type: object) -> dict[str, Any]:
    """An ``other`` event: a record the kind does not map, by its type."""
    return turn_event("other", at, raw_type=str(raw_type)[:100])


def text_of(content: Any) -> str:
    """A tool result's content as text: a string as it is, a list of parts (``text``
    parts joined), anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        if all(isinstance(p, str) for p in parts) and parts:
            return "\n".join(p for p in parts if isinstance(p, str))
    if content is None:
        return ""
    try:
        return json.dumps(content, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(content)


def locations(arguments: Any) -> list[dict[str, Any]] | None:
    """The files a tool call's input names (``file_path``, ``path``, ``notebook_path``,
    ``absolute_path``), as ACP locations; None when it names none."""
    if not isinstance(arguments, dict):
        return None
    found = []
    for key in ("file_path", "path", "notebook_path", "absolute_path"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            where: dict[str, Any] = {"path": value}
            line = arguments.get("offset", arguments.get("line"))
            if isinstance(line, int) and line > 0:
                where["line"] = line
            found.append(where)
    return found or None


def title(name: str, arguments: Any) -> str:
    """A tool call in one line of at most 200 characters: ``Bash: ls -la``.

    >>> title("Bash", {"command": "ls\\n-la"}), title("Think", {})
    ('Bash: ls ⏎ -la', 'Think')
    """
    what = what_it_does(arguments)
    return one_line(f"{name}: {what}" if what else name, 200)
