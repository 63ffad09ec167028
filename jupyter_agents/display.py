"""Sessions as tables: plain text for the CLI and terminal IPython, HTML for notebooks.

:class:`SessionTable` renders as HTML in a notebook (``_repr_html_``) and as aligned
text everywhere else, so ``%agent ls`` and ``jupyter agents list`` show the same thing.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .store import Session

COLUMNS = (
    "id",
    "name",
    "title",
    "kind",
    "status",
    "attention",
    "pid",
    "conversation",
    "cwd",
    "last activity",
)


def short_id(value: str | None) -> str:
    """The first 8 characters of a conversation id (enough to tell them apart)."""
    return "" if not value else value[:8]


def row(session: Session) -> tuple[str, ...]:
    """One session as the cells of :data:`COLUMNS`."""
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
        session.cwd or "",
        session.last_activity[:19].replace("T", " "),
    )


def text_table(sessions: Sequence[Session]) -> str:
    """An aligned plain-text table (header first); a note when there are none.

    >>> print(text_table([]))
    no sessions
    """
    if not sessions:
        return "no sessions"
    rows = [tuple(c.upper() for c in COLUMNS), *(row(s) for s in sessions)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(line.rstrip() for line in lines)


def html_table(sessions: Sequence[Session]) -> str:
    """The same table as HTML (every cell escaped)."""
    if not sessions:
        return "<p>no sessions</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row(s)) + "</tr>" for s in sessions
    )
    return (
        f'<table class="jupyter-agents"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


class SessionTable:
    """A list of sessions that displays as a table (HTML in notebooks, text elsewhere)."""

    def __init__(self, sessions: Sequence[Session]) -> None:
        self.sessions = list(sessions)

    def __str__(self) -> str:
        return text_table(self.sessions)

    def __repr__(self) -> str:
        return text_table(self.sessions)

    def _repr_html_(self) -> str:
        return html_table(self.sessions)
