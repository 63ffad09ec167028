# PYTHON_ARGCOMPLETE_OK
"""``jupyter agents``: sessions from a shell, with or without a running Jupyter server.

The CLI is a peer of the server over the same library (store + backend), so what it
starts is visible in JupyterLab and what the server started can be listed, killed or
restored here. Exit codes: 0 done, 1 failed, 2 bad usage, 3 unknown id, 4 the session's
state does not allow it (e.g. restoring a running session); `wait`: 0 the session waits
for input, 5 it asks permission, 6 it failed, 7 timed out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from traitlets import TraitError

from jupyter_agents import __version__
from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.agents.kinds import BUILTIN
from jupyter_agents.backends.base import DETACH_KEY_NAME
from jupyter_agents.clients.display import (
    RECENT,
    clip,
    cost_cell,
    text_table,
    turn_line,
    unique_prefixes,
    worth_listing,
)
from jupyter_agents.config import open_sessions
from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError, Conflict, InvalidRequest, NotFound
from jupyter_agents.core.procs import SESSION_MARKER
from jupyter_agents.core.records import MODES, Session
from jupyter_agents.sessions import export as conversation_export
from jupyter_agents.sessions import prune, send, turns
from jupyter_agents.sessions.query import MAX_LIMIT, Query, parse_since
from jupyter_agents.sessions.search import Hit, search_sessions
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sessions.turnreader import TurnReader
from jupyter_agents.spend.limits import LIMIT_KEYS, describe
from jupyter_agents.spend.prices import PRICES_AS_OF, Summary, format_cost, format_tokens
from jupyter_agents.terminal.render import FORMATS, export, export_name

EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT = 1, 2, 3, 4
#: ``wait``'s exit codes: what the session needs (0: input), or that the wait timed out
EXIT_WAIT = {"waiting": 0, "permission": 5, "error": 6}
EXIT_TIMEOUT = 7
#: how the attach hint names the detach key (tmux's ``C-]``, as a terminal user says it)
DETACH_HINT = "Ctrl-" + DETACH_KEY_NAME.removeprefix("C-")
RECENT_WORDS = f"{RECENT.total_seconds() / 3600:.0f} h"


def progress(done: int, total: int, session_id: str, error: str | None, out: TextIO) -> None:
    """A step of a restore's text progress bar: on a terminal one line redrawn in place,
    each failure on a line of its own above it, which nothing overwrites; in a pipe, a
    line per step and one per failure."""
    width = 20
    filled = width * done // max(total, 1)
    bar = "#" * filled + "-" * (width - filled)
    clear = "\r\x1b[K" if out.isatty() else ""  # the bar line, redrawn below
    if error is not None:
        reason = error.removeprefix(f"session {session_id}: ").removeprefix("cannot restore: ")
        out.write(f"{clear}{session_id} could not be restored: {reason}\n")
    end = "\r" if clear and done < total else "\n"
    state = "started" if error is None else "failed"
    out.write(f"{clear}[{bar}] {done}/{total} {session_id} {state}{end}")
    out.flush()


# -- commands ---------------------------------------------------------------------------


def cmd_list(service: SessionService, args: argparse.Namespace) -> int:
    service.refresh.catch_up()
    sessions = service.list(args.status or None)
    if args.json:
        print(json.dumps(service.models.many(sessions), indent=2))
        return 0
    now = datetime.now(timezone.utc)
    shown = sessions if args.all or args.status else [s for s in sessions if worth_listing(s, now)]
    width = None if args.wide else terminal_width()
    print(text_table(shown, service.models.usage(shown), width))
    if len(shown) < len(sessions):
        print(
            f"({_count(len(sessions) - len(shown), 'session')} that ended over "
            f"{RECENT_WORDS} ago not shown: --all lists them)"
        )
    return 0


def terminal_width() -> int | None:
    """The width to fit: ``$COLUMNS`` if set, else that of the terminal on stdout; None
    when output goes elsewhere (a pipe or a file keeps every column in full)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError):
        return None


def cmd_show(service: SessionService, args: argparse.Namespace) -> int:
    service.refresh.follow_conversations()
    service.refresh.read_usage()
    model = service.models.many([service.lookup(args.id)])[0]
    if args.json:
        print(json.dumps(model, indent=2))
        return 0
    print(describe_session(model, terminal_width()))
    return 0


def describe_session(model: dict[str, Any], width: int | None) -> str:
    """``show``'s human view of a session's REST model: one ``field: value`` line per
    field that has a value (lists and objects in short), values cut to ``width``."""
    lines = []
    for key, value in model.items():
        if value in (None, "", [], {}, False):
            continue
        if key == "usage" and isinstance(value, dict):
            text = cost_cell(value) + f" ({format_tokens(value['tokens']['total'])} tokens)"
        elif key == "argv" and isinstance(value, list):
            text = shlex.join(str(v) for v in value)
        elif key == "worktree" and isinstance(value, dict):
            text = f"{value['path']} on branch {value['branch']} from {value['base']}"
            text += f"; {value['ended']}" if value.get("ended") else ""
        elif isinstance(value, (dict, list)):
            text = json.dumps(value)
        else:
            text = str(value)
        line = f"{key.replace('_', ' ')}: {text}"
        lines.append(line if width is None else clip(line, width))
    return "\n".join(lines)


def cmd_cost(service: SessionService, args: argparse.Namespace) -> int:
    """What agent sessions spent (estimated): per session, per UTC day, in total."""
    service.refresh.read_usage()
    report = cost_report(service, [service.lookup(ref).id for ref in args.ids] or None)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(cost_text(report, terminal_width()))
    return 0


def cost_text(report: dict[str, Any], width: int | None = None) -> str:
    """:func:`cost_report` for people: a table per session, one per UTC day, the total
    and where the prices come from. ``width``: the screen's (ids shortened to unique
    prefixes, sentences wrapped); None: every line whole."""
    short = unique_prefixes([s["id"] for s in report["sessions"]])
    sessions = [
        (
            s["id"] if width is None else short[s["id"]],
            s["name"],
            s["kind"],
            s["status"],
            _spent(s),
            _spent(s["unattended"]),
        )
        for s in report["sessions"]
    ]
    days = [(d["day"], _spent(d), _spent(d["unattended"])) for d in report["days"]]
    total = report["total"]
    unknown = total["unknown_models"]
    return "\n".join(
        [
            _table(
                ("session", "name", "kind", "status", "spent", "while nobody watched"), sessions
            ),
            "",
            _table(("day (UTC)", "spent", "while nobody watched"), days),
            "",
            *_wrapped(
                f"total: {_spent(total)}; while nobody watched: {_spent(total['unattended'])}",
                width,
            ),
            *_wrapped(
                f"estimated from AgentsApp.prices (defaults: list prices as of {PRICES_AS_OF}; "
                "check your provider)"
                + (f"; no price for {', '.join(unknown)}" if unknown else ""),
                width,
            ),
        ]
    )


def _wrapped(sentence: str, width: int | None) -> list[str]:
    """``sentence`` in lines of at most ``width`` characters (None: one line)."""
    import textwrap

    return [sentence] if width is None else textwrap.wrap(sentence, width) or [""]


def cost_report(service: SessionService, ids: list[str] | None = None) -> dict[str, Any]:
    """The JSON of ``jupyter agents cost``: ``sessions`` (their usage's tokens, cost and
    unattended part), ``days`` (UTC) and ``total``, each priced from the price table."""
    prices = service.usage.prices
    found = service.list(kinds=service.usage_kinds)
    chosen = [s for s in found if ids is None or s.id in ids]
    models = service.models.usage(chosen)
    listed = []
    for session in chosen:
        spent = models[session.id]
        assert spent is not None
        listed.append(
            {
                "id": session.id,
                "name": session.name,
                "kind": session.kind,
                "status": session.status,
                "tokens": spent["tokens"],
                "cost": spent["cost"],
                "unknown_models": spent["unknown_models"],
                "unattended": spent["unattended"],
            }
        )
    days: dict[str, tuple[Summary, Summary]] = {}
    total, unattended = Summary(), Summary()
    for row in service.usage.days([s.id for s in chosen]):
        day = days.setdefault(row.day, (Summary(), Summary()))
        day[0].add(row.model, row.tokens)
        total.add(row.model, row.tokens)
        if row.unattended:
            day[1].add(row.model, row.tokens)
            unattended.add(row.model, row.tokens)
    return {
        "sessions": listed,
        "days": [
            {"day": day, **spent.to_model(prices), "unattended": alone.to_model(prices)}
            for day, (spent, alone) in days.items()
        ],
        "total": {**total.to_model(prices), "unattended": unattended.to_model(prices)},
        "prices_as_of": PRICES_AS_OF,
    }


def _spent(item: dict[str, Any]) -> str:
    """Tokens and cost for a table: ``28.4k tokens, $0.02``."""
    tokens = f"{format_tokens(item['tokens']['total'])} tokens"
    if item.get("cost") is None:
        return tokens if item["tokens"]["total"] else "-"
    return f"{tokens}, {format_cost(item['cost'], bool(item.get('unknown_models')))}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return f"{head[0].upper()}: none"
    cells = [tuple(h.upper() for h in head), *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def cmd_limit(service: SessionService, args: argparse.Namespace) -> int:
    """Show or set a session's own unattended limit."""
    session = service.lookup(args.id)
    given = {k: getattr(args, k) for k in LIMIT_KEYS if getattr(args, k) is not None}
    if sum((bool(given), args.none, args.default)) > 1:
        return _usage_error("limit: give --tokens/--cost/--seconds, --none or --default")
    if given or args.none or args.default:
        try:
            service.models.set_unattended_limit(session.id, None if args.default else given)
        except InvalidRequest as e:
            return _usage_error(str(e))
    limit, source = service.usage.limit_of(session.id)
    where = {"session": "its own", "config": "AgentsApp.unattended_limit"}.get(source or "")
    print(f"{session.id}: unattended limit {describe(limit)}" + (f" ({where})" if where else ""))
    return 0


def cmd_new(service: SessionService, args: argparse.Namespace) -> int:
    if args.attach and args.mode == "acp":
        return _usage_error(
            "new: an ACP session has no terminal to attach to (jupyter agents follow ID "
            "prints its turns)"
        )
    session, _ = service.create(
        name=args.name,
        cwd=args.cwd or os.getcwd(),
        kind=args.kind,
        args=args.args,
        strict=True,
        worktree=args.branch or args.worktree or None,
        mode=args.mode,
    )
    if args.attach:
        return attach(service, session)
    print(json.dumps(session.to_model(), indent=2) if args.json else session.id)
    return 0


def cmd_diff(service: SessionService, args: argparse.Namespace) -> int:
    review = service.review.changes(service.lookup(args.id).id)
    if args.json:
        print(json.dumps(review.to_model(), indent=2))
        return 0
    tree = review.worktree
    print(f"{tree.branch}: {_count(review.ahead, 'commit')} ahead of {tree.base}, ", end="")
    print(f"{review.behind} behind; worktree {tree.path}")
    for changed in review.files:
        renamed = f"{changed.old_path} -> " if changed.old_path else ""
        state = "" if changed.committed else "  (not committed)"
        print(f"  {changed.status} {renamed}{changed.path}{state}")
    if not review.files:
        print("  no changes")
    return 0


def cmd_finish(service: SessionService, args: argparse.Namespace) -> int:
    session = service.review.finish(
        service.lookup(args.id).id, "merge" if args.merge else "discard", args.yes
    )
    print(f"{session.id}: worktree {(session.worktree or {}).get('ended')}")
    return 0


def cmd_log(service: SessionService, args: argparse.Namespace) -> int:
    session = service.lookup(args.id)
    transcript = service.transcript(session.id)
    start = 0 if args.tail is None else max(0, transcript.size() - args.tail)

    def running() -> bool:
        return bool(args.follow) and service.get(session.id).status == "running"

    out = sys.stdout.buffer
    for chunk in transcript.follow(start, running):
        out.write(chunk)
        out.flush()
    return 0


def cmd_turns(service: SessionService, args: argparse.Namespace) -> int:
    """An agent session's turns, one line each (``--json``: the events); with
    ``--follow``, what it does next too, as it is written, until it stops running."""
    session = service.lookup(args.id)
    width = shutil.get_terminal_size((80, 24)).columns
    after = turns.parse_position(args.after) if args.after else turns.START
    TurnReader(service, session.id, turn_printer(width, args.json), after, args.follow).run()
    return 0


def turn_printer(width: int, as_json: bool = False) -> Callable[[turns.TurnPage], None]:
    """What prints a page of turns as ``jupyter agents turns`` does: a line each
    (:func:`~jupyter_agents.clients.display.turn_line`), or the events as JSON lines."""

    def show(page: turns.TurnPage) -> None:
        for event in page.events:
            line = json.dumps(event) if as_json else turn_line(event, width)
            if line is not None:
                print(line, flush=True)

    return show


def cmd_grep(service: SessionService, args: argparse.Namespace) -> int:
    """Like grep: 0 when something matched, 1 when nothing did, 2 for a bad pattern or
    filter."""
    try:
        query = Query.checked(
            args.pattern,
            list(service.kinds),
            regex=args.regex,
            case=args.case,
            session=args.session,
            kind=args.kind,
            status=args.status,
            since=parse_since(args.since) if args.since else None,
            limit=min(MAX_LIMIT, args.max_count or MAX_LIMIT),
        )
    except InvalidRequest as e:
        return _usage_error(str(e))
    found = 0
    while True:
        page = search_sessions(service, query)
        for hit in page.hits[: (args.max_count - found) if args.max_count else None]:
            found += 1
            if args.json:
                print(json.dumps(hit.to_model()))
                continue
            print(hit_line(hit))
        if page.next is None or (args.max_count and found >= args.max_count):
            return 0 if found else EXIT_FAILED
        query = dataclasses.replace(query, cursor=page.next)


def hit_line(hit: Hit) -> str:
    """One search hit as ``grep`` prints it: session, name, local time, where, line."""
    when = hit.time.astimezone().strftime("%Y-%m-%d %H:%M:%S") if hit.time else "-"
    where = "conversation" if hit.source == "conversation" else f"@{hit.offset}"
    return f"{hit.session.id} {hit.session.name} {when} {where}: {hit.line}"


def cmd_export(service: SessionService, args: argparse.Namespace) -> int:
    session = service.lookup(args.id)
    chunks = export(session, service.transcript(session.id), args.format)
    args.output = args.output or export_name(session, args.format)
    if args.output == "-":
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        return 0
    with open(args.output, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_conversation(service: SessionService, args: argparse.Namespace) -> int:
    session = service.lookup(args.id)
    try:
        _, chunks = conversation_export.open_export(service, session.id, args.format)
    except InvalidRequest as e:  # not an agent's session
        return _usage_error(str(e))
    out = sys.stdout.buffer
    if args.output not in (None, "-"):
        with open(args.output, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        print(f"wrote {args.output}", file=sys.stderr)
        return 0
    for chunk in chunks:
        out.write(chunk)
    out.flush()
    return 0


def cmd_prune(service: SessionService, args: argparse.Namespace) -> int:
    try:
        before = prune.cutoff(args.older_than)
    except InvalidRequest as e:
        return _usage_error(str(e))
    now = datetime.now(timezone.utc)
    service.reconcile()  # what ended since
    chosen = prune.describe(service, prune.plan(service.list(), before))
    for item in chosen:
        s = item.session
        idle = prune.age(now - clock.parse(s.last_activity))
        print(
            f"{s.id}  {s.kind:<7} {s.status:<11} idle {idle:>5}  "
            f"transcript {item.transcript_bytes} B, conversations {item.archive_bytes} B"
            f"  {s.cwd or ''}"
        )
    freed = sum(i.transcript_bytes + i.archive_bytes for i in chosen)
    if not args.yes:
        print(
            f"{len(chosen)} ended sessions older than {args.older_than} ({freed} bytes); "
            "nothing removed (dry run: add --yes to remove them)"
        )
        return 0
    removed = prune.remove(service, [i.session for i in chosen])
    print(f"removed {len(removed)} sessions ({freed} bytes)")
    return 0


def cmd_kill(service: SessionService, args: argparse.Namespace) -> int:
    session = service.terminate(service.lookup(args.id).id)
    print(f"killed {session.id} (terminal {session.name!r}, pid {session.pid})")
    return 0


def cmd_rename(service: SessionService, args: argparse.Namespace) -> int:
    session = service.rename(service.lookup(args.id).id, args.title)
    title = session.title or session.program_title
    print(f"{session.id} is now titled {title!r}" if title else f"{session.id} has no title")
    return 0


def cmd_adopt(service: SessionService, args: argparse.Namespace) -> int:
    session = service.adopt(service.lookup(args.id).id)
    print(f"adopted {session.id} as terminal {session.name!r}")
    return 0


def cmd_restore(service: SessionService, args: argparse.Namespace) -> int:
    if args.all == bool(args.id):
        raise SystemExit(_usage_error("restore: give a session id or --all, not both"))
    if args.conversation and args.all:
        return _usage_error("restore: --conversation is for one session, not --all")
    if not args.all:
        session = service.restorer.restore_checked(service.lookup(args.id).id, args.conversation)
        result_restored, failed = [session], 0
    else:
        service.reconcile()  # after a reboot nothing else may have noticed yet
        ids = [s.id for s in service.interrupted()]
        if not ids:
            print("no interrupted sessions")
            return 0
        result = service.restorer.restore_many(
            ids, lambda done, total, sid, error: progress(done, total, sid, error, sys.stderr)
        )
        result_restored, failed = result.restored, len(result.failed)
    for session in result_restored:
        if session.status == "running":
            note = f": {session.reason}" if session.reason else ""  # e.g. started fresh
            print(f"restored {session.id} ({session.kind}) as terminal {session.name!r}{note}")
        else:
            failed += 1
            print(f"{session.id}: {session.reason}", file=sys.stderr)
    return EXIT_FAILED if failed else 0


def cmd_reconcile(service: SessionService, args: argparse.Namespace) -> int:
    """Print what this reconcile changed: a session found running as recorded (or an
    orphan already recorded as one) is no change."""
    actions = service.reconcile()
    changed = [a for a in actions if (a.kind, a.was) not in UNCHANGED]
    for action in changed:
        print(action.describe())
    if not changed:
        running = sum(a.kind == "reattach" for a in actions)
        print(f"nothing changed ({_count(running, 'session')} running as recorded)")
    return 0


#: reconcile decisions that leave a record as it was: ``(action kind, status before)``
UNCHANGED = frozenset({("reattach", "running"), ("orphan", "orphaned")})


#: seconds the line before an attach is given to reach the screen when the attach
#: client flushes its terminal's output (:attr:`Backend.attach_flushes_output`)
ATTACH_SETTLE = 0.1


def cmd_attach(service: SessionService, args: argparse.Namespace) -> int:
    return attach(service, service.lookup(args.id))


def attach(service: SessionService, session: Session) -> int:
    """Replace this process by the backend's attach client on this terminal, after one
    line (stderr) saying how to leave: :data:`DETACH_KEY_NAME` detaches, exit 0, the
    session running. An ended session: :class:`Conflict` saying what can be done."""
    if session.status not in ("running", "orphaned"):
        raise Conflict(
            f"session {session.id} is {session.status}; nothing to attach to (restore it: "
            f"jupyter agents restore {session.id}; its output: jupyter agents log {session.id})"
        )
    refused = attach_refused(session, str(service.state_dir), os.environ.get(SESSION_MARKER))
    if refused is not None:
        raise Conflict(refused)
    backend = service.backends.get(session.backend)
    argv = backend.debug_attach_command(session.id)
    print(
        f"attaching to {session.id} (terminal {session.name!r}); detach with "
        f"{DETACH_HINT}: the session keeps running",
        file=sys.stderr,
        flush=True,
    )
    if backend.attach_flushes_output:
        # a pty hands what was written to the terminal's side from a kernel work
        # queue; a flush before that runs discards it. With nothing to wait on, wait
        # long enough: the line was lost 1 time in 100 at 10 ms on a loaded machine
        time.sleep(ATTACH_SETTLE)
    service.close()
    # inside the user's own tmux too: our socket is another server, not a nested session
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 - argv from the backend, never a shell
    except OSError as e:
        print(f"jupyter agents: cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
        return EXIT_FAILED


def attach_refused(session: Session, state_dir: str, marker: str | None) -> str | None:
    """Why ``attach`` must not show ``session`` on a terminal whose processes carry
    ``marker`` (their :data:`~jupyter_agents.core.procs.SESSION_MARKER`), or None: the
    terminal is that session itself (its output would come back in as its input, without
    end), or another session of ours (one session inside another).

    >>> s = Session(id="a1", name="1", status="running", backend="tmux")
    >>> attach_refused(s, "/st", None) is None
    True
    >>> attach_refused(s, "/st", "a1@/st").split(":")[0]
    'this terminal is session a1 itself'
    >>> attach_refused(s, "/st", "b2@/other").split(":")[0]
    'this terminal is session b2 of jupyter_agents'
    """
    if not marker:
        return None
    inside, _, where = marker.partition("@")
    leave = "attach from a terminal of your own, or open its tab in JupyterLab"
    if inside == session.id and where == state_dir:
        return (
            f"this terminal is session {session.id} itself: attached to itself, its output "
            f"would come back in as its input without end; {leave}"
        )
    return (
        f"this terminal is session {inside} of jupyter_agents: {session.id} would run "
        f"inside it, one session in another; {leave}"
    )


def cmd_send(service: SessionService, args: argparse.Namespace) -> int:
    """Type TEXT into a session (a bracketed paste where its program asked for one)."""
    session = service.lookup(args.id)
    try:
        pasted = send.send(service, session, args.text, enter=not args.no_enter)
    except InvalidRequest as e:
        return _usage_error(str(e))
    how = "pasted" if pasted else "typed"
    print(f"{how} {len(args.text)} characters into {session.id} (terminal {session.name!r})")
    return 0


def cmd_kill_server(service: SessionService, args: argparse.Namespace) -> int:
    """Every session ends: ask first on a terminal, else only with ``--yes``."""
    if not args.yes:
        live = len(service.list(["running", "orphaned"]))
        if not sys.stdin.isatty():
            return _usage_error(
                f"kill-server ends every session ({live} running); add --yes to do it"
            )
        print(
            f"stop every backend of {service.state_dir}? {live} running sessions end "
            "(their transcripts stay) [y/N] ",
            end="",
            flush=True,
        )
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing stopped")
            return EXIT_FAILED
    ended = service.kill_server()
    print(f"stopped the backends of {service.state_dir}; {len(ended)} sessions marked killed")
    return 0


def cmd_wait(service: SessionService, args: argparse.Namespace) -> int:
    if args.any == bool(args.id):
        raise SystemExit(_usage_error("wait: give a session id or --any, not both"))
    watched = None if args.any else service.lookup(args.id).id
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    while True:
        service.reconcile()  # a session that ended
        service.refresh.apply_attention()
        running = [
            s
            for s in service.terminals()
            if (watched is None or s.id == watched) and s.attention in NEEDS_YOU
        ]
        if running:
            session = running[0]
            reason = f" ({session.attention_reason})" if session.attention_reason else ""
            print(f"{session.id} {session.name} {session.attention}{reason}")
            return EXIT_WAIT[str(session.attention)]
        if watched is not None and service.get(watched).status != "running":
            raise Conflict(f"session {watched} is {service.get(watched).status}")
        if deadline is not None and time.monotonic() >= deadline:
            what = (
                "no agent session needed you"
                if watched is None
                else f"session {watched} did not need you"
            )
            print(
                f"jupyter agents: wait: timed out after {args.timeout:g} s; {what}",
                file=sys.stderr,
            )
            return EXIT_TIMEOUT
        time.sleep(0.2)


def _request_id(service: SessionService, ref: str) -> str:
    """The pending request ``ref`` names: its id or a unique prefix (4 or more
    characters) of one; :class:`NotFound` otherwise."""
    ids = [r["id"] for r in service.permissions.pending()]
    if ref in ids:
        return ref
    found = [i for i in ids if len(ref) >= 4 and i.startswith(ref)]
    if len(found) == 1:
        return str(found[0])
    if len(found) > 1:
        raise InvalidRequest(f"{ref!r} names {len(found)} pending requests; give more of its id")
    raise NotFound(
        f"no pending permission request {ref!r}: it was answered, closed, or never "
        "existed (jupyter agents requests lists them)"
    )


def cmd_requests(service: SessionService, args: argparse.Namespace) -> int:
    service.refresh.apply_attention()
    ids = None if args.id is None else [service.lookup(args.id).id]
    requests = service.permissions.pending(ids)
    if args.json:
        print(json.dumps(requests, indent=1))
        return 0
    if not requests:
        print("no pending permission requests")
        return 0
    for r in requests:
        what = r["command"] or r["input"].get("file_path") or r["input"].get("url") or ""
        print(f"{r['id']}  {r['kind']} {r['name']}  {r['tool']}: {clip(what, 200)}")
        if r["description"]:
            print(f"    {clip(r['description'], 200)}")
        for suggestion in r["suggestions"]:
            print(f"    --always {suggestion['index']}: {suggestion['label']}")
    return 0


def _answer(service: SessionService, args: argparse.Namespace, body: dict[str, Any]) -> int:
    service.refresh.apply_attention()  # what ended meanwhile, and how
    ref = args.request
    request_id = ref if service.permissions.how_ended(ref) else _request_id(service, ref)
    done = service.permissions.answer(request_id, body, by=os.environ.get("USER"))
    request = done["request"]
    verb = "allowed" if done["decision"] == "allow" else "denied"
    print(f"{verb} {request['tool']} for {request['kind']} {request['name']} ({request_id})")
    return 0


def cmd_allow(service: SessionService, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"decision": "allow"}
    if args.always is not None:
        body["suggestion"] = args.always
    return _answer(service, args, body)


def cmd_deny(service: SessionService, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"decision": "deny"}
    if args.message:
        body["message"] = args.message
    return _answer(service, args, body)


def cmd_gc(service: SessionService, args: argparse.Namespace) -> int:
    stale = service.stale_processes()
    if args.json:
        print(json.dumps([dataclasses.asdict(m) for m in stale], indent=2))
    else:
        for m in stale:
            print(f"{m.identity.pid:>8}  session {m.session_id}  {shlex.join(m.cmdline)[:120]}")
        print(
            f"{len(stale)} stale processes"
            + ("" if args.kill or not stale else " (run with --kill to end them)")
        )
    if args.kill:
        ended = service.gc(stale)
        print(
            f"ended {len(ended)} of them (the others had already exited or their pid was reused)"
            if len(ended) != len(stale)
            else f"ended {len(ended)}"
        )
    return 0


COMMANDS = {
    "list": cmd_list,
    "requests": cmd_requests,
    "allow": cmd_allow,
    "deny": cmd_deny,
    "show": cmd_show,
    "new": cmd_new,
    "diff": cmd_diff,
    "finish": cmd_finish,
    "log": cmd_log,
    "turns": cmd_turns,
    "follow": cmd_turns,
    "grep": cmd_grep,
    "export": cmd_export,
    "conversation": cmd_conversation,
    "prune": cmd_prune,
    "kill": cmd_kill,
    "rename": cmd_rename,
    "adopt": cmd_adopt,
    "restore": cmd_restore,
    "reconcile": cmd_reconcile,
    "attach": cmd_attach,
    "send": cmd_send,
    "kill-server": cmd_kill_server,
    "gc": cmd_gc,
    "wait": cmd_wait,
    "cost": cmd_cost,
    "limit": cmd_limit,
}


def _count(n: int, noun: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _usage_error(message: str) -> int:
    print(f"jupyter agents: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        default=argparse.SUPPRESS,
        help="state dir (default: $JUPYTER_AGENTS_STATE_DIR, else the server's)",
    )
    parser = argparse.ArgumentParser(
        prog="jupyter agents",
        description="Persistent terminals and agent sessions of jupyter_agents.",
        parents=[common],
        epilog="Exit codes: 0 done, 1 failed, 2 bad usage, 3 unknown id, 4 wrong state; "
        "wait: 0 waiting for input, 5 permission, 6 error, 7 timeout.",
    )
    parser.add_argument("--version", action="version", version=f"jupyter agents {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common])

    p = add(
        "list",
        "list the sessions to act on: running, interrupted, needing you, or ended in "
        f"the last {RECENT_WORDS} (--all: every record); fits the terminal",
    )
    p.add_argument("--all", action="store_true", help="every record, however old")
    p.add_argument("--wide", action="store_true", help="every column, in full")
    p.add_argument("--json", action="store_true", help="JSON, the REST model (every record)")
    p.add_argument(
        "--status",
        action="append",
        choices=["running", "exited", "interrupted", "orphaned", "killed"],
        metavar="STATUS",
        help="only sessions with this status (repeatable): running, exited, "
        "interrupted, orphaned or killed",
    )
    p = add("show", "one session's fields, for people (--json: the REST model)")
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="JSON, the REST model")
    p = add(
        "cost",
        "what agent sessions spent (estimated from AgentsApp.prices): per session, per "
        "UTC day and in total, and how much of it while nobody watched",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="only these sessions (default: all)")
    p.add_argument("--json", action="store_true", help="JSON: sessions, days, total")
    p = add(
        "limit",
        "show or set a session's own unattended limit (what it may spend while nobody "
        "watches, since the last input; AgentsApp.unattended_limit otherwise)",
    )
    p.add_argument("id")
    p.add_argument("--tokens", type=int, help="tokens of every kind")
    p.add_argument("--cost", type=float, metavar="USD", help="estimated US dollars")
    p.add_argument("--seconds", type=float, help="working time")
    p.add_argument("--none", action="store_true", help="no limit for this session")
    p.add_argument("--default", action="store_true", help="AgentsApp.unattended_limit again")
    agents = [kind.name for kind in BUILTIN]
    p = add("new", f"start a session: jupyter agents new {agents[0]} --cwd DIR -- ARGS")
    p.add_argument("kind", help=f"{', '.join(['shell', *agents])} or a configured kind")
    p.add_argument("--cwd", help="working directory (default: the current one)")
    p.add_argument("--name", help="terminal name (default: the next free number)")
    p.add_argument("--json", action="store_true", help="print the model, not just the id")
    p.add_argument("--attach", action="store_true", help="then attach this terminal to it")
    p.add_argument(
        "--mode",
        choices=list(MODES),
        default="terminal",
        help="terminal (default): the agent's own CLI in a terminal; acp: its Agent Client "
        "Protocol agent, prompted from its turns view (kinds that have one)",
    )
    p.add_argument(
        "--worktree",
        action="store_true",
        help="in a new git worktree of the folder's repository, on branch agents/ID",
    )
    p.add_argument("--branch", help="in a new git worktree, on this new branch")
    p.add_argument("args", nargs="*", help="arguments for the agent CLI (after --)")
    p = add(
        "diff",
        "what a worktree session changed: its branch's commits ahead and behind its "
        "base, and every changed file",
    )
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="JSON, the REST model")
    p = add(
        "finish",
        "finish a worktree session: merge its branch into the base, or discard it; the "
        "worktree and branch are removed",
    )
    p.add_argument("id")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--merge", action="store_true", help="merge into the base branch")
    how.add_argument("--discard", action="store_true", help="drop the branch, unmerged")
    p.add_argument(
        "--yes",
        action="store_true",
        help="end the session if it still runs, and drop uncommitted changes",
    )
    p = add("log", "print a session's raw transcript")
    p.add_argument("id")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing while it runs")
    p.add_argument("--tail", type=int, metavar="BYTES", help="only the last BYTES bytes")
    p = add(
        "turns",
        "print an agent session's turns, one line each: messages, tool calls and what "
        "they returned, plans",
    )
    p.add_argument("id")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing what it writes (woken by its writes) until it stops running",
    )
    p.add_argument("--json", action="store_true", help="the events as JSON lines")
    p.add_argument("--after", metavar="ID", help="only what follows this event id")
    p = add(
        "follow",
        "print an agent session's turns as it takes them, one line each, until it stops "
        "running (turns --follow)",
    )
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="the events as JSON lines")
    p.add_argument("--after", metavar="ID", help="only what follows this event id")
    p.set_defaults(follow=True)
    p = add(
        "grep",
        "search every session's transcript (as text) and agent conversation; exit 0 if "
        "something matched, 1 if not",
    )
    p.add_argument("pattern", help="plain text (case-insensitive) unless --regex/--case")
    p.add_argument(
        "-E",
        "--regex",
        action="store_true",
        help="PATTERN is a regex (RE2 syntax: no backreferences or lookaround)",
    )
    p.add_argument("-s", "--case", action="store_true", help="case-sensitive")
    p.add_argument("--session", help="only this session (id or running terminal name)")
    p.add_argument("--kind", help="only sessions of this kind")
    p.add_argument("--status", help="only sessions with this status")
    p.add_argument("--since", help="only output since: ISO 8601 time or 30m, 2h, 7d")
    p.add_argument("-m", "--max-count", type=int, metavar="N", help="stop after N matches")
    p.add_argument("--json", action="store_true", help="one JSON hit (REST model) per line")
    p = add("export", "write a session's transcript as text, HTML or asciicast v2")
    p.add_argument("id")
    p.add_argument("--format", choices=list(FORMATS), default="txt")
    p.add_argument(
        "-o", "--output", default=None, help="file (default: kind-name-id.FORMAT; - for stdout)"
    )
    p = add(
        "conversation",
        "print an agent session's conversations: Markdown (turns, tool calls, times), "
        "the raw records (from the CLI's files, or the archive when the CLI lost them) or "
        "a read-only notebook (--format ipynb -o FILE.ipynb)",
    )
    p.add_argument("id")
    p.add_argument(
        "--format",
        choices=list(conversation_export.FORMATS),
        default="md",
        help="md (default), jsonl (the records as written) or ipynb (a notebook)",
    )
    p.add_argument("-o", "--output", default=None, help="file (default: stdout)")
    p = add(
        "prune",
        "remove ended sessions older than an age with their transcripts and archived "
        "conversations (a dry run unless --yes)",
    )
    p.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="a duration (90d, 12h, 30m) or an ISO 8601 time: sessions last active before it",
    )
    p.add_argument("--yes", action="store_true", help="remove them (default: only list them)")
    add("kill", "end a session's process tree").add_argument("id")
    p = add("rename", "give a session a title (an empty one: the program's title again)")
    p.add_argument("id")
    p.add_argument("title", help="plain text, at most 256 characters")
    add("adopt", "make an orphaned session a normal terminal").add_argument("id")
    p = add("restore", "relaunch an ended session (agents resume their conversation)")
    p.add_argument("id", nargs="?")
    p.add_argument("--all", action="store_true", help="every interrupted session")
    p.add_argument(
        "--conversation",
        metavar="CID",
        help="resume this one of its folder's conversations (for an agent whose own "
        "conversation was never known: it starts fresh otherwise)",
    )
    add("reconcile", "match the store with the backend now and print what changed")
    add(
        "attach", f"attach this terminal to a running session ({DETACH_HINT} detaches)"
    ).add_argument("id")
    p = add(
        "send",
        "type TEXT into a session and press Enter, without attaching (as one bracketed "
        "paste where its program asked for one, as agents' prompts do)",
    )
    p.add_argument("id")
    p.add_argument("text", help="what to type; newlines and tabs, no other control keys")
    p.add_argument("--no-enter", action="store_true", help="type it, do not press Enter")
    p = add(
        "kill-server",
        "emergency stop of the backends: every session ends (asks on a terminal)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
    p = add(
        "wait",
        "block until a session needs you (exit 0 waiting for input, 5 permission, "
        "6 error, 7 timeout)",
    )
    p.add_argument("id", nargs="?", help="session id or terminal name")
    p.add_argument("--any", action="store_true", help="any running agent session")
    p.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds")
    p = add(
        "requests",
        "list agents' pending permission requests (what each asks to run), to answer "
        "with allow or deny",
    )
    p.add_argument("id", nargs="?", help="only this session's (id or terminal name)")
    p.add_argument("--json", action="store_true", help="JSON, the REST model")
    p = add("allow", "allow a pending permission request: the agent goes on, no key pressed")
    p.add_argument("request", help="its id (or a unique prefix; jupyter agents requests)")
    p.add_argument(
        "--always",
        type=int,
        metavar="N",
        help="also take the agent's own suggestion N (e.g. allow this for the session)",
    )
    p = add("deny", "deny a pending permission request: the tool does not run")
    p.add_argument("request", help="its id (or a unique prefix; jupyter agents requests)")
    p.add_argument("-m", "--message", help="what the agent is told instead (one line)")
    p = add("gc", "list processes left by ended sessions (e.g. agent daemons); --kill ends them")
    p.add_argument("--kill", action="store_true", help="end them (identity re-checked)")
    p.add_argument("--json", action="store_true", help="JSON output")
    return parser


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's tab completion and exit, when a shell asks (argcomplete's
    ``_ARGCOMPLETE``, also through ``jupyter``'s own completion) and argcomplete is
    installed (the ``completion`` extra); return at once otherwise. Session ids and
    terminal names complete from the store."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    for action in _id_actions(parser):
        action.completer = _session_refs  # type: ignore[attr-defined]
    argcomplete.autocomplete(parser)


def _id_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every ``id`` argument of every command."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for p in sub.choices.values() for a in p._actions if a.dest in ("id", "ids")]


def _session_refs(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Completions of a session reference: ids, and the names of running terminals."""
    try:
        service = open_sessions(getattr(parsed_args, "state_dir", None), create=False)
    except (AgentsError, ValueError, TraitError, OSError):
        return []
    try:
        records = service.list()
    finally:
        service.close()
    refs = [s.id for s in records] + [s.name for s in records if s.status == "running"]
    return [r for r in refs if r.startswith(prefix)]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jupyter-agents`` (``jupyter agents``)."""
    parser = build_parser()
    complete(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after "--" is for the agent CLI (argparse mishandles it in subcommands)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - 1] if "--" in argv else argv)
    if extra:
        if args.command != "new":
            return _usage_error("arguments after -- are only for 'new'")
        args.args = [*args.args, *extra]
    try:
        service = open_sessions(getattr(args, "state_dir", None), create=args.command == "new")
        try:
            return COMMANDS[args.command](service, args)
        finally:
            service.close()
    except NotFound as e:
        print(f"jupyter agents: {e}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except Conflict as e:
        print(f"jupyter agents: {e}", file=sys.stderr)
        return EXIT_CONFLICT
    except (AgentsError, ValueError, TraitError) as e:
        print(f"jupyter agents: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): quietly, like cat
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
