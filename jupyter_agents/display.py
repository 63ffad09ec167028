"""Sessions as tables: plain text for the CLI and terminal IPython, HTML for notebooks.

:class:`SessionTable` renders as HTML in a notebook (``_repr_html_``) and as aligned
text everywhere else, so ``%agent ls`` and ``jupyter agents list`` show the same thing.
The ``cost`` column is an agent session's estimated cost (``+``: some of its tokens are
of models without a price), or its tokens when none of them has one.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from .store import Session
from .usage import format_cost, format_tokens

#: a session's REST ``usage`` object (None: a kind that reports none), by session id
UsageModels = Mapping[str, "dict[str, Any] | None"]

COLUMNS = (
    "id",
    "name",
    "title",
    "kind",
    "status",
    "attention",
    "pid",
    "conversation",
    "cost",
    "cwd",
    "last activity",
)


def short_id(value: str | None) -> str:
    """The first 8 characters of a conversation id (enough to tell them apart)."""
    return "" if not value else value[:8]


def cost_cell(usage: Mapping[str, Any] | None) -> str:
    """The ``cost`` cell of a session's REST ``usage`` object.

    >>> cost_cell({"cost": 0.5, "unknown_models": [], "tokens": {"total": 9}})
    '$0.50'
    >>> cost_cell({"cost": None, "unknown_models": ["m"], "tokens": {"total": 12345}})
    '12.3k tok'
    >>> cost_cell(None)
    ''
    """
    if usage is None:
        return ""
    if usage["cost"] is None:
        return f"{format_tokens(usage['tokens']['total'])} tok"
    return format_cost(usage["cost"], bool(usage["unknown_models"]))


def row(session: Session, usage: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """One session as the cells of :data:`COLUMNS` (``usage``: its REST ``usage``)."""
    status: str = session.status
    if session.status == "exited" and session.exit_code is not None:
        status = f"exited ({session.exit_code})"
    conversation = short_id(session.conversation_id) + ("?" if session.ambiguous else "")
    attention: str = session.attention or ""
    if session.attention_reason:
        attention += f" ({session.attention_reason})"
    title = session.title or session.program_title or ""
    return (
        session.id,
        session.name,
        title if len(title) <= 40 else title[:39] + "…",
        session.kind,
        status,
        attention,
        "" if session.pid is None else str(session.pid),
        conversation,
        cost_cell(usage),
        session.cwd or "",
        session.last_activity[:19].replace("T", " "),
    )


def text_table(sessions: Sequence[Session], usage: UsageModels | None = None) -> str:
    """An aligned plain-text table (header first); a note when there are none.
    ``usage``: the sessions' REST ``usage`` objects (the ``cost`` column).

    >>> print(text_table([]))
    no sessions
    """
    if not sessions:
        return "no sessions"
    usage = usage or {}
    rows = [tuple(c.upper() for c in COLUMNS), *(row(s, usage.get(s.id)) for s in sessions)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(line.rstrip() for line in lines)


def html_table(sessions: Sequence[Session], usage: UsageModels | None = None) -> str:
    """The same table as HTML (every cell escaped)."""
    if not sessions:
        return "<p>no sessions</p>"
    usage = usage or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row(s, usage.get(s.id))) + "</tr>"
        for s in sessions
    )
    return (
        f'<table class="jupyter-agents"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


class SessionTable:
    """A list of sessions that displays as a table (HTML in notebooks, text elsewhere);
    ``usage``: their REST ``usage`` objects, for the ``cost`` column."""

    def __init__(self, sessions: Sequence[Session], usage: UsageModels | None = None) -> None:
        self.sessions = list(sessions)
        self.usage = dict(usage or {})

    def __str__(self) -> str:
        return text_table(self.sessions, self.usage)

    def __repr__(self) -> str:
        return text_table(self.sessions, self.usage)

    def _repr_html_(self) -> str:
        return html_table(self.sessions, self.usage)
