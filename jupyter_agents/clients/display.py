"""Sessions as tables: plain text for the CLI and terminal IPython, HTML for notebooks.

:class:`SessionTable` renders as HTML in a notebook (``_repr_html_``) and as aligned
text everywhere else, so ``%agent ls`` and ``jupyter agents list`` show the same thing.
The ``cost`` column is an agent session's estimated cost (``+``: some of its tokens are
of models without a price), or its tokens when none of them has one.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.core import clock
from jupyter_agents.core.records import Session
from jupyter_agents.spend.prices import format_cost, format_tokens

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
#: the order in which columns are kept when the table must fit a width: the first ones
#: stay longest (what a person acts on), the last ones go first
PRIORITY = (
    "name",
    "kind",
    "status",
    "attention",
    "id",
    "last activity",
    "cost",
    "title",
    "cwd",
    "conversation",
    "pid",
)
#: columns that are shortened (to at least this many characters) before they are dropped
SHRINKS = {"title": 10, "cwd": 12, "attention": 10}
#: ids are shown by their shortest unique prefix of at least this many characters
SHORT_ID = 8
#: how long an ended session stays in the default listing after its last activity
RECENT = timedelta(days=1)
#: statuses a person may act on whatever their age
OPEN: frozenset[str] = frozenset({"running", "orphaned", "interrupted"})
#: the statuses whose attention state is current
LIVE: frozenset[str] = frozenset({"running", "orphaned"})


def worth_listing(session: Session, now: datetime, recent: timedelta = RECENT) -> bool:
    """Whether the default listing shows ``session``: it runs, is orphaned or
    interrupted (each can be acted on), needs someone, or ended within ``recent``.

    >>> from datetime import timezone
    >>> now = datetime(2026, 12, 3, tzinfo=timezone.utc)
    >>> old = Session("a", "1", "exited", "tmux", last_activity="2026-11-01T00:00:00Z")
    >>> worth_listing(old, now), worth_listing(Session("b", "2", "interrupted", "tmux"), now)
    (False, True)
    """
    if session.status in OPEN or (session.status in LIVE and session.attention in NEEDS_YOU):
        return True
    last = clock.parse(session.last_activity)
    return now - last <= recent


def current_attention(session: Session) -> str:
    """A session's attention while it runs (``""`` once it ended or was interrupted:
    its last state then is history, not a call for a person).

    >>> gone = Session("a", "1", "interrupted", "tmux", attention="waiting")
    >>> current_attention(gone), current_attention(Session("b", "2", "running", "tmux",
    ...                                                      attention="waiting"))
    ('', 'waiting')
    """
    return (session.attention or "") if session.status in LIVE else ""


def short_id(value: str | None) -> str:
    """The first 8 characters of a conversation id (enough to tell them apart)."""
    return "" if not value else value[:8]


def unique_prefixes(ids: Sequence[str], least: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix of at least ``least`` characters that no other of
    ``ids`` starts with (as git shortens hashes).

    >>> unique_prefixes(["1a23c5fad9f5", "1a23c5fb0000", "99"], 4)
    {'1a23c5fad9f5': '1a23c5fa', '1a23c5fb0000': '1a23c5fb', '99': '99'}
    """
    shown = {}
    for sid in ids:
        width = least
        while width < len(sid) and any(o != sid and o.startswith(sid[:width]) for o in ids):
            width += 1
        shown[sid] = sid[:width]
    return shown


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
    attention = current_attention(session)
    if attention and session.attention_reason:
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


def why(session: Session) -> str | None:
    """Why an ended session is not running (its ``reason``; for an exit without one,
    its code), or None for a running one or one with nothing to say."""
    if session.status in ("running", "orphaned"):
        return None
    if session.reason:
        return session.reason
    if session.status == "exited" and session.exit_code not in (None, 0):
        return f"exited with code {session.exit_code}"
    return None


def fit(cells: Sequence[Sequence[str]], width: int) -> list[tuple[int, int]]:
    """Which columns of ``cells`` (header first) to show, and how wide, so that a row
    (columns joined by two spaces) is at most ``width`` characters: the columns of
    lowest :data:`PRIORITY` are shortened (:data:`SHRINKS`) and then dropped until it
    fits. ``(index, width)`` in :data:`COLUMNS` order.

    >>> head = [c.upper() for c in COLUMNS]
    >>> [COLUMNS[i] for i, _ in fit([head], 30)]
    ['name', 'kind', 'status', 'attention']
    """
    widths = {i: max(len(r[i]) for r in cells) for i in range(len(COLUMNS))}

    def total() -> int:
        return sum(widths.values()) + 2 * (len(widths) - 1)

    for name in reversed(PRIORITY):
        if total() <= width or len(widths) == 1:
            break
        i = COLUMNS.index(name)
        least = SHRINKS.get(name)
        if least is not None and widths[i] > least:
            widths[i] = max(least, widths[i] - (total() - width))
        if total() > width:
            del widths[i]
    if total() > width:  # one column left, wider than the terminal
        (only,) = widths
        widths[only] = width
    return sorted(widths.items())


def clip(text: str, width: int, left: bool = False) -> str:
    """``text`` in at most ``width`` characters, ``…`` marking what was cut (at the
    start when ``left``: the end of a path says more).

    >>> clip("/home/me/projects/app", 10, left=True), clip("abc", 5)
    ('…jects/app', 'abc')
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    return "…" + text[-(width - 1) :] if left else text[: width - 1] + "…"


def text_table(
    sessions: Sequence[Session], usage: UsageModels | None = None, width: int | None = None
) -> str:
    """An aligned plain-text table (header first), then one line per session that
    ended for a reason (:func:`why`); a note when there are none. ``usage``: the
    sessions' REST ``usage`` objects (the ``cost`` column). ``width``: no line is
    longer (:func:`fit`; ids shortened to unique prefixes); None: every column, in full.

    >>> print(text_table([]))
    no sessions
    """
    if not sessions:
        return "no sessions"
    usage = usage or {}
    rows = [row(s, usage.get(s.id)) for s in sessions]
    if width is not None:
        short = unique_prefixes([s.id for s in sessions])
        rows = [(short[r[0]], *r[1:]) for r in rows]
    cells = [tuple(c.upper() for c in COLUMNS), *rows]
    shown = (
        fit(cells, width)
        if width is not None
        else [(i, max(len(r[i]) for r in cells)) for i in range(len(COLUMNS))]
    )
    lines = [
        "  ".join(clip(r[i], w, left=COLUMNS[i] == "cwd").ljust(w) for i, w in shown).rstrip()
        for r in cells
    ]
    reasons = [(r[0], s.status, why(s)) for r, s in zip(rows, sessions, strict=True)]
    for sid, status, reason in reasons:
        if reason is not None:
            line = f"{sid} {status}: {reason}"
            lines.append(line if width is None else clip(line, width))
    return "\n".join(lines)


def html_table(sessions: Sequence[Session], usage: UsageModels | None = None) -> str:
    """The same table as HTML (every cell escaped), with a ``why`` column: why a
    session that ended is not running (:func:`why`)."""
    if not sessions:
        return "<p>no sessions</p>"
    usage = usage or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in (*COLUMNS, "why"))
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in (*row(s, usage.get(s.id)), why(s) or ""))
        + "</tr>"
        for s in sessions
    )
    return (
        f'<table class="jupyter-agents"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def shown_width() -> int:
    """The width a text table is shown at outside a terminal command: ``$COLUMNS``,
    else IPython's terminal's, else 80 (a kernel has no terminal: its text goes to a
    notebook's output, about that wide)."""
    import shutil

    return shutil.get_terminal_size((80, 24)).columns


class SessionTable:
    """A list of sessions that displays as a table (HTML in notebooks, text elsewhere);
    ``usage``: their REST ``usage`` objects, for the ``cost`` column."""

    def __init__(self, sessions: Sequence[Session], usage: UsageModels | None = None) -> None:
        self.sessions = list(sessions)
        self.usage = dict(usage or {})

    def __str__(self) -> str:
        return text_table(self.sessions, self.usage, shown_width())

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        return html_table(self.sessions, self.usage)


#: what a turn line starts with, by event type (after its local time)
_TURN_MARKS = {
    "user_message": "you  ",
    "agent_message": "agent",
    "thought": "think",
    "tool_call": "tool ",
    "tool_call_update": "  -> ",
    "plan": "plan ",
    "compaction": "----",
    "turn_end": "----",
    "other": "     ",
}


def turn_line(event: Mapping[str, Any], width: int = 80) -> str | None:
    """One turn event (:mod:`jupyter_agents.agents.turns`) as ``jupyter agents turns``
    prints it: its local time, what it is and its text on one line of at most ``width``
    characters; None for ``other`` events (records of no turn).

    >>> turn_line({"type": "tool_call", "at": None, "title": "Bash: ls -la"}, 30)
    '         tool  Bash: ls -la'
    >>> turn_line({"type": "tool_call_update", "at": None, "status": "failed", "output": "no"})
    '           ->  failed: no'
    """
    kind = event.get("type")
    if kind == "other" or kind not in _TURN_MARKS:
        return None
    when = clock.parse_or_none(event.get("at"))
    stamp = when.astimezone().strftime("%H:%M:%S") if when else " " * 8
    if kind == "tool_call":
        text = str(event.get("title", ""))
    elif kind == "tool_call_update":
        output = " ⏎ ".join(str(event.get("output", "")).split("\n")[:3]).strip()
        text = f"{'failed: ' if event.get('status') == 'failed' else ''}{output or '(no output)'}"
    elif kind == "plan":
        marks = {"completed": "[x]", "in_progress": "[-]", "pending": "[ ]"}
        text = "  ".join(
            f"{marks.get(e['status'], '[ ]')} {e['content']}" for e in event["entries"]
        )
    elif kind == "compaction":
        text = "the conversation was compacted"
    elif kind == "turn_end":
        text = "end of turn"
    else:
        text = " ⏎ ".join(line for line in str(event.get("text", "")).split("\n") if line.strip())
    line = f"{stamp} {_TURN_MARKS[kind]} {text}"
    return line if len(line) <= width else line[: width - 1] + "…"
