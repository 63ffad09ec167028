"""An agent session's conversations as a document: Markdown to read (user and assistant
turns, tool calls and their results summarised, timestamps) or the raw JSON-lines
records, from the CLI's own files or their archived copies (:mod:`jupyter_agents.agents.archive`).

Claude Code records (``type`` ``user``/``assistant`` with ``message.content`` as text or
blocks: ``text``, ``tool_use``, ``tool_result``) and Codex rollout lines
(``{timestamp, type, payload}``; ``response_item`` payloads ``message``,
``function_call``, ``function_call_output``, ``custom_tool_call``...) are read; other
records are left out of the Markdown. A line that is not JSON (a file cut mid-write, a
damaged one) is noted in the Markdown and the rest still shown; the ``jsonl`` export is
the files' bytes as they are. Bounded: records are read one line at a time, at most
:data:`MAX_RECORD` bytes each; summaries are cut to :data:`SUMMARY` characters. Blocking.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator
from contextlib import suppress
from datetime import datetime, timezone
from typing import Any

from jupyter_agents.agents.archive import ConversationFile
from jupyter_agents.core.errors import InvalidRequest, NotFound
from jupyter_agents.core.store import Session
from jupyter_agents.sessions.service import SessionService

#: format -> (Content-Type, file extension)
FORMATS = {
    "md": ("text/markdown; charset=utf-8", "md"),
    "jsonl": ("application/x-ndjson", "jsonl"),
}
#: the longest record (line) parsed; longer ones are noted, not parsed
MAX_RECORD = 16 << 20
#: the most characters a tool call's input or result shows
SUMMARY = 300
#: bytes read at a time for the raw export
CHUNK = 1 << 20
#: Codex user messages it writes itself (context, instructions): not the user's words
_CODEX_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions")
_COMMAND = re.compile(r"<command-name>(.*?)</command-name>", re.S)


def export_name(session: Session, fmt: str) -> str:
    """The download name: ``<kind>-<name>-<id>-conversation.<ext>``."""
    return f"{session.kind}-{session.name}-{session.id}-conversation.{FORMATS[fmt][1]}"


def open_export(
    service: SessionService, session_id: str, fmt: str
) -> tuple[Session, Iterator[bytes]]:
    """The session and its conversations as ``fmt`` (``md`` or ``jsonl``), streamed.

    :class:`InvalidRequest` for a session whose kind keeps no conversation files (a
    shell), :class:`NotFound` for an unknown session or one with no conversation file
    (nothing was sent yet, or the files are gone and none was archived).
    """
    session = service.get(session_id)
    kind = service.kinds.get(session.kind)
    if kind is None or not kind.keeps_conversations:
        raise InvalidRequest(
            f"session {session_id} is a {session.kind} session; only agents that keep "
            "conversation files (claude, codex) have a conversation"
        )
    files = service.conversation_files(session)
    if not files:
        raise NotFound(
            f"session {session_id} has no conversation file: nothing was sent yet, or its "
            "files are gone and none was archived"
        )
    if fmt == "jsonl":
        return session, raw(files)
    return session, (text.encode() for text in markdown(session, files))


def raw(files: Iterable[ConversationFile]) -> Iterator[bytes]:
    """The files' bytes as they are, one after the other (a newline between two when
    the first does not end in one)."""
    last = b"\n"
    for file in files:
        try:
            f = file.path.open("rb")
        except OSError:
            continue
        with f:
            first = True
            while chunk := f.read(CHUNK):
                if first and last != b"\n":
                    yield b"\n"
                first, last = False, chunk[-1:]
                yield chunk


def records(file: ConversationFile) -> Iterator[tuple[int, Any | None, int]]:
    """``(offset, record or None if not JSON, length)`` for each line of a file."""
    try:
        f = file.path.open("rb")
    except OSError:
        return
    with f:
        offset = 0
        while line := f.readline(MAX_RECORD + 1):
            length = len(line)
            if length > MAX_RECORD and not line.endswith(b"\n"):
                while (more := f.readline(CHUNK)) and not more.endswith(b"\n"):
                    length += len(more)
                length += len(more)
                yield offset, None, length
            elif line.strip():
                try:
                    yield offset, json.loads(line), length
                except ValueError:
                    yield offset, None, length
            offset += length


def markdown(session: Session, files: list[ConversationFile]) -> Iterator[str]:
    """The Markdown document of ``session``'s conversations, a block at a time."""
    title = session.title or session.name
    yield f"# {session.kind} session {title} ({session.id})\n\n"
    if session.cwd:
        yield f"- Folder: {code(session.cwd)}\n"
    yield f"- Conversations: {len(files)}\n\n"
    for file in files:
        where = "archived copy" if file.archived else "the CLI's file"
        yield f"## Conversation {code(file.conversation or '?')}\n\n"
        yield f"*From {where}: {code(str(file.path))}*\n\n"
        for offset, record, length in records(file):
            if record is None:
                yield (
                    f"> *The record at byte {offset} ({length} bytes) is not JSON: it is "
                    "left out here (the jsonl export has it as it is).*\n\n"
                )
                continue
            yield from render(record)


def render(record: Any) -> Iterator[str]:
    """The Markdown of one record (nothing for records that are not turns)."""
    if not isinstance(record, dict):
        return
    if "payload" in record and isinstance(record.get("payload"), dict):
        yield from _codex(record, record["payload"])
    else:
        yield from _claude(record)


# -- Claude Code ----------------------------------------------------------------------


def _claude(record: dict[str, Any]) -> Iterator[str]:
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
            texts.append(_claude_text(block["text"]))
        elif block.get("type") == "tool_use":
            tools.append(tool_call(str(block.get("name", "tool")), block.get("input")))
        elif block.get("type") == "tool_result":
            tools.append(tool_result(block.get("content"), bool(block.get("is_error"))))
        elif block.get("type") == "image":
            texts.append("*(an image)*")
    yield from turn("User" if kind == "user" else "Assistant", when, texts, tools, kind == "user")


def _claude_text(text: str) -> str:
    command = _COMMAND.search(text)
    if command:
        return f"*Command {code(command[1].strip())}*"
    return text


# -- Codex ------------------------------------------------------------------------------


def _codex(record: dict[str, Any], payload: dict[str, Any]) -> Iterator[str]:
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
        texts = [t for t in texts if not t.lstrip().startswith(_CODEX_CONTEXT)]
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
        output: Any = payload.get("output")
        if isinstance(output, str):
            try:
                parsed = json.loads(output)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and "output" in parsed:
                output = parsed["output"]
        elif isinstance(output, dict):
            output = output.get("content", output)
        yield from turn("Tool", when, [], [tool_result(output, False)], False)


# -- pieces -----------------------------------------------------------------------------


def turn(who: str, when: str, texts: list[str], tools: list[str], quote: bool) -> Iterator[str]:
    """One turn: ``**who** · when``, its text (the user's as a quote), its tool lines."""
    if not texts and not tools:
        return
    yield f"**{who}**{' · ' + when if when else ''}\n\n"
    for text in texts:
        text = text.strip("\n")
        if quote:
            yield "".join(f"> {line}\n" if line else ">\n" for line in text.split("\n")) + "\n"
        else:
            yield text + "\n\n"
    if tools:
        yield "".join(f"- {t}\n" for t in tools) + "\n"


#: the input fields that say what a tool call does, most telling first
_TELLING = ("command", "cmd", "file_path", "path", "pattern", "url", "query", "prompt")


def tool_call(name: str, arguments: Any) -> str:
    """``**Tool call** `name`: <what it does>`` in one line."""
    what = ""
    note = ""
    if isinstance(arguments, dict):
        for key in _TELLING:
            value = arguments.get(key)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = _shell(value)
            if isinstance(value, str) and value:
                what = value
                break
        if not what and arguments:
            what = json.dumps(arguments, ensure_ascii=False)
        if isinstance(arguments.get("description"), str):
            note = f" ({one_line(arguments['description'])})"
    elif isinstance(arguments, str):
        what = arguments
    detail = f": {code(one_line(what))}" if what else ""
    return f"**Tool call** {code(name)}{detail}{note}"


def _shell(argv: list[str]) -> str:
    if len(argv) >= 3 and argv[0] in ("bash", "sh", "zsh") and argv[1] in ("-lc", "-c"):
        return argv[2]
    return shlex.join(argv)


def tool_result(content: Any, error: bool) -> str:
    """``**Tool result**: <its first lines>`` in one line."""
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    label = "**Tool error**" if error else "**Tool result**"
    return f"{label}: {code(one_line(text))}" if text.strip() else f"{label}: *(empty)*"


def one_line(text: str, width: int = SUMMARY) -> str:
    """``text`` on one line, at most ``width`` characters.

    >>> one_line("a\\n  b", 80), one_line("x" * 10, 5)
    ('a ⏎ b', 'xxxx…')
    """
    text = " ⏎ ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    return text if len(text) <= width else text[: width - 1] + "…"


def code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds.

    >>> code("ls"), code("a`b")
    ('`ls`', '`` a`b ``')
    """
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def timestamp(value: object) -> str:
    """An ISO 8601 time as ``YYYY-MM-DD HH:MM:SS UTC`` ("" if there is none).

    >>> timestamp("2026-12-02T06:37:03.595Z")
    '2026-12-02 06:37:03 UTC'
    """
    if not isinstance(value, str):
        return ""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
