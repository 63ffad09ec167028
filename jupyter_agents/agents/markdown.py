"""Markdown of conversation records: the pieces each kind's renderer
(:meth:`AgentKind.markdown <jupyter_agents.agents.base.AgentKind.markdown>`) builds a
document of (:mod:`jupyter_agents.sessions.export`): a turn, a tool call and its result
summarised on one line, a code span, a timestamp. Pure."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from datetime import timezone
from typing import Any

from jupyter_agents.core import clock

#: the most characters a tool call's input or result shows
SUMMARY = 300


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
_TELLING = ("command", "cmd", "file_path", "path", "pattern", "url", "query", "prompt", "subject")


def what_it_does(arguments: Any) -> str:
    """What a tool call's input says it does: its command, path, pattern, URL, query or
    prompt (the first of these it has), else its input as JSON ("" for none).

    >>> what_it_does({"command": "ls -la"}), what_it_does({"command": ["bash", "-lc", "ls"]})
    ('ls -la', 'ls')
    """
    if isinstance(arguments, str):
        return arguments
    if not isinstance(arguments, dict):
        return ""
    for key in _TELLING:
        value = arguments.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = _shell(value)
        if isinstance(value, str) and value:
            return value
    return json.dumps(arguments, ensure_ascii=False) if arguments else ""


def tool_call(name: str, arguments: Any) -> str:
    """``**Tool call** `name`: <what it does>`` in one line."""
    what = what_it_does(arguments)
    note = ""
    if isinstance(arguments, dict) and isinstance(arguments.get("description"), str):
        note = f" ({one_line(arguments['description'])})"
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
    when = clock.parse_or_none(value)
    return "" if when is None else when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
