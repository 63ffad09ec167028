"""``%agent``: sessions from a notebook or IPython (``%load_ext jupyter_agents``).

Sessions started here belong to the backend, not to the kernel: they keep running when
the kernel restarts, and JupyterLab lists them as terminals.
"""

from __future__ import annotations

import argparse
import codecs
import html
import json
import os
import shlex
import shutil
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_agents.agents.kinds import BUILTIN
from jupyter_agents.clients.cli import (
    cmd_allow,
    cmd_deny,
    cmd_diff,
    cmd_finish,
    cmd_requests,
    cost_report,
    cost_text,
    describe_session,
    hit_line,
    turn_printer,
)
from jupyter_agents.clients.display import SessionTable, shown_width, worth_listing
from jupyter_agents.config import open_sessions
from jupyter_agents.core.errors import AgentsError, Conflict
from jupyter_agents.core.records import MODES, Session
from jupyter_agents.sessions.export import open_export, write_notebook
from jupyter_agents.sessions.query import MAX_LIMIT, Query
from jupyter_agents.sessions.restore import RestoreResult
from jupyter_agents.sessions.search import search_sessions
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sessions.turnreader import TurnReader
from jupyter_agents.terminal.render import plain_text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"%agent: {message} (see %agent?)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%agent", add_help=False)
    parser.add_argument("--state-dir")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("new", add_help=False)
    p.add_argument("kind")
    p.add_argument("--cwd")
    p.add_argument("--name")
    p.add_argument("--worktree", action="store_true")
    p.add_argument("--branch")
    p.add_argument("--mode", choices=list(MODES), default=MODES[0])
    p = sub.add_parser("diff", add_help=False)
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("finish", add_help=False)
    p.add_argument("id")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--merge", action="store_true")
    how.add_argument("--discard", action="store_true")
    p.add_argument("--yes", action="store_true")
    for verb in ("ls", "list"):
        sub.add_parser(verb, add_help=False).add_argument("--all", action="store_true")
    p = sub.add_parser("show", add_help=False)
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("grep", add_help=False)
    p.add_argument("pattern")
    p.add_argument("-E", "--regex", action="store_true")
    p.add_argument("-s", "--case", action="store_true")
    p.add_argument("--session")
    p.add_argument("-m", "--max-count", type=int, default=50)
    p = sub.add_parser("cost", add_help=False)
    p.add_argument("ids", nargs="*")
    sub.add_parser("attach", add_help=False).add_argument("id")
    for verb in ("resume", "restore"):
        p = sub.add_parser(verb, add_help=False)
        p.add_argument("id", nargs="?")
        p.add_argument("--all", action="store_true")
        p.add_argument("--conversation")
    sub.add_parser("kill", add_help=False).add_argument("id")
    p = sub.add_parser("rename", add_help=False)
    p.add_argument("id")
    p.add_argument("title", nargs="*")
    p = sub.add_parser("log", add_help=False)
    p.add_argument("id")
    p.add_argument("-n", type=int, default=40)
    p = sub.add_parser("conversation", add_help=False)
    p.add_argument("id")
    p.add_argument("--notebook", action="store_true")
    p.add_argument("-o", "--output")
    sub.add_parser("watch", add_help=False).add_argument("id")
    sub.add_parser("dashboard", add_help=False)
    p = sub.add_parser("requests", add_help=False)
    p.add_argument("id", nargs="?")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("allow", add_help=False)
    p.add_argument("request")
    p.add_argument("--always", type=int)
    p = sub.add_parser("deny", add_help=False)
    p.add_argument("request")
    p.add_argument("-m", "--message")
    return parser


def report_failures(sessions: list[Session], failed: list[tuple[str, str]]) -> None:
    """Print (stderr, shown apart in a notebook) one line per restore that failed:
    ``failed`` could not be launched, ``sessions`` that are not running afterwards
    ended at once; each with its reason. A running one with a reason (it started
    fresh: its conversation was never known) gets its line on stdout."""
    for sid, error in failed:
        print(f"{sid}: {error.removeprefix(f'session {sid}: ')}", file=sys.stderr)
    for session in sessions:
        if session.status != "running":
            print(f"{session.id}: {session.reason or session.status}", file=sys.stderr)
        elif session.reason:  # running, with something to say (it started fresh)
            print(f"{session.id}: {session.reason}")


#: the MIME type of a terminal to open, which the JupyterLab extension renders as a
#: button that opens the terminal's tab (``labextension/src/terminallink.ts``)
TERMINAL_MIME = "application/vnd.jupyter-agents.terminal+json"


class TerminalLink:
    """``%agent attach``'s answer: in JupyterLab (with this package's extension) a button
    that opens the terminal's tab (:data:`TERMINAL_MIME`); elsewhere a link to the
    terminal's page on this server (``<base>/terminals/<name>``, the page Jupyter
    Notebook 7 serves); in text how to reach it from a shell."""

    def __init__(self, session: Session, base_url: str) -> None:
        self.session = session
        self.base_url = base_url

    def __repr__(self) -> str:
        s = self.session
        return (
            f"terminal {s.name!r} ({s.kind}, {s.id}): open it from JupyterLab's terminals, "
            f"or from a shell: jupyter agents attach {s.id}"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        s = self.session
        return {
            TERMINAL_MIME: {"name": s.name, "id": s.id, "kind": s.kind},
            "text/html": self._repr_html_(),
            "text/plain": repr(self),
        }

    def _repr_html_(self) -> str:
        s = self.session
        href = html.escape(f"{self.base_url.rstrip('/')}/terminals/{s.name}")
        return (
            f'<a href="{href}" target="_blank" class="jupyter-agents-attach">open terminal '
            f"{html.escape(s.name)} ({html.escape(s.kind)}, {html.escape(s.id)})</a>"
        )


def terminal_link(session: Session) -> TerminalLink:
    """:class:`TerminalLink` to a running ``session``; :class:`Conflict` otherwise.
    The server's base URL is JupyterHub's prefix for this server when there is one."""
    if session.status != "running":
        raise Conflict(
            f"session {session.id} is {session.status}; nothing to attach to "
            f"(%agent resume {session.id} relaunches it)"
        )
    return TerminalLink(session, os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/"))


#: the most Markdown ``%agent conversation`` prints (characters); the rest is left out
MAX_SHOWN = 1 << 20


class ConversationNotebook:
    """``%agent conversation --notebook``'s answer: where the notebook was written. In a
    notebook, a link that opens it when Jupyter can reach it from the notebook's folder
    (``folder``: the kernel's; the file is under it, in no hidden folder), else its
    path with how to get such a link; in text, the path."""

    def __init__(self, session: Session, path: Path, folder: Path) -> None:
        self.session = session
        self.path = path
        self.folder = folder

    def relative(self) -> str | None:
        """The path from the notebook's folder, if Jupyter can open it from there."""
        try:
            rel = Path(os.path.relpath(self.path, self.folder))
        except ValueError:  # (another drive)
            return None
        if rel.parts[0] == ".." or any(part.startswith(".") for part in rel.parts):
            return None
        return rel.as_posix()

    def __repr__(self) -> str:
        s = self.session
        return f"wrote {self.path}: the conversation of session {s.id} as a read-only notebook"

    def _repr_html_(self) -> str:
        s = self.session
        what = html.escape(f"the conversation of session {s.name} ({s.kind}, {s.id})")
        rel = self.relative()
        if rel is not None:
            href = html.escape(quote(rel))
            return (
                f'<a href="{href}" target="_blank" class="jupyter-agents-notebook">'
                f"{html.escape(rel)}</a>: {what}, a read-only notebook"
            )
        return (
            f"<code>{html.escape(str(self.path))}</code>: {what}, a read-only notebook (not "
            f"in this notebook's folder; <code>%agent conversation {html.escape(s.id)} "
            "--notebook -o NAME.ipynb</code> writes it here, with a link)"
        )


def watch_in_terminal(reader: TurnReader) -> Session:
    """Run ``reader`` (printing, as ``jupyter agents turns -f``) in a thread and wait for
    it, so Ctrl-C stops it (it then ends its read and returns): a terminal IPython, which
    has no widgets. The session as last read."""
    done: list[Session] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(reader.run())
        except BaseException as e:  # handed to the caller's thread
            failed.append(e)

    thread = threading.Thread(target=run, name="agents-watch", daemon=True)
    thread.start()
    try:
        thread.join()
    except KeyboardInterrupt:
        reader.stop()
        thread.join()
    if failed:
        raise failed[0]
    return done[0] if done else reader.session


@magics_class
class AgentMagics(Magics):
    """The ``%agent`` line magic."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)  # type: ignore[no-untyped-call]
        self._services: dict[str | None, SessionService] = {}

    def service(self, state_dir: str | None) -> SessionService:
        """The session service of ``state_dir`` (the default one if None), opened once."""
        if state_dir not in self._services:
            self._services[state_dir] = open_sessions(state_dir)
        return self._services[state_dir]

    @line_magic  # type: ignore[untyped-decorator]
    def agent(self, line: str) -> Any:
        """Start, list, resume, kill and follow terminal and agent sessions.

        %agent new KIND [--cwd DIR] [--name NAME] [--worktree | --branch B]
                   [--mode terminal|acp] [-- ARGS...]
            start a session: {kinds} or a configured kind; --worktree: in a new git
            worktree of the folder's repository (on branch agents/ID, or B); --mode
            acp: the kind's Agent Client Protocol agent, prompted from its turns view
            in JupyterLab (kinds that have one; terminal is the default)
        %agent diff ID [--json]
            what a worktree session changed: commits ahead/behind, changed files
        %agent finish ID --merge | --discard [--yes]
            merge its branch into the base or drop it; worktree and branch go
            (--yes: end it if it runs, drop uncommitted changes)
        %agent ls [--all]   (or: list)
            the sessions to act on (--all: every record), an HTML table in notebooks,
            with why each ended session ended
        %agent show ID [--json]
            one session: its fields (--json: the REST model)
        %agent grep PATTERN [-E] [-s] [--session ID] [-m N]
            search every transcript and agent conversation
        %agent cost [ID...]
            what agent sessions spent (estimated), per session and in total
        %agent attach ID
            a link that opens the session's terminal in JupyterLab
        %agent resume ID [--conversation CID] | --all   (or: restore)
            restore one ended session, or every interrupted one; each failure is
            printed with its reason; an agent whose conversation was never known
            starts fresh, or continues CID, one of its folder's
        %agent kill ID
            end a session's process tree
        %agent rename ID TITLE...
            give a session a title (none: the title its program set shows again)
        %agent log ID [-n LINES]
            the last LINES lines of a session's transcript (default 40)
        %agent conversation ID [--notebook [-o PATH]]
            an agent session's conversation as Markdown (as the CLI's conversation);
            --notebook: written as a read-only notebook, in the state dir's notebooks/
            folder (or PATH), with a link or its path to open it
        %agent watch ID
            an agent session's turns, one line each, as it takes them: in a notebook a
            widget that grows while the kernel stays free (stop button), in a terminal
            printed as jupyter agents turns ID -f does (Ctrl-C stops); both end with
            the session
        %agent requests [ID] [--json]
            agents' pending permission requests: what each asks to run
        %agent allow REQUEST [--always N] | %agent deny REQUEST [-m MESSAGE]
            answer one: the agent goes on with no key pressed in its terminal
        %agent dashboard
            a live table of sessions with buttons (ipywidgets)

        The verbs are the CLI's (jupyter agents list/show/grep/cost/restore/...).
        ID is a session id, a unique start of one, or a terminal name (the running
        terminal, else the newest session of that name). Every command takes
        --state-dir DIR (default: $JUPYTER_AGENTS_STATE_DIR, else the
        Jupyter server's). Sessions belong to the backend, not the kernel: they survive
        kernel restarts and show up in JupyterLab as terminals.
        """
        words = shlex.split(line)
        extra = words[words.index("--") + 1 :] if "--" in words else []
        if extra:
            words = words[: len(words) - len(extra) - 1]
        if not words:
            raise UsageError("%agent: which command? (see %agent?)")
        args = _parser().parse_args(words)
        try:
            return self._run(self.service(args.state_dir), args, extra)
        except AgentsError as e:
            raise UsageError(f"%agent {args.command}: {e}") from None

    def _resume(self, service: SessionService, args: argparse.Namespace) -> Any:
        """``%agent resume``: restore, then print each failure with its reason."""
        if args.all == bool(args.id):
            raise UsageError(f"%agent {args.command}: give a session id or --all")
        if args.all and args.conversation:
            raise UsageError(f"%agent {args.command}: --conversation is for one session")
        if not args.all:
            session_id = service.lookup(args.id).id
            result = RestoreResult(
                [service.restorer.restore_checked(session_id, args.conversation)], []
            )
        else:
            service.reconcile()  # after a reboot nothing else may have noticed yet
            interrupted = [s.id for s in service.interrupted()]
            if not interrupted:
                print("no interrupted sessions")
                return None
            result = service.restorer.restore_many(interrupted)
        report_failures(result.restored, result.failed)
        if not result.restored:  # each said why above: no empty table after them
            return None
        return SessionTable(result.restored)

    def _grep(self, service: SessionService, args: argparse.Namespace) -> None:
        """``%agent grep``: one line per hit (as the CLI prints them), at most ``-m``."""
        query = Query.checked(
            args.pattern,
            list(service.kinds),
            regex=args.regex,
            case=args.case,
            session=args.session,
            limit=max(1, min(MAX_LIMIT, args.max_count)),
        )
        hits = search_sessions(service, query).hits
        print("\n".join(hit_line(hit) for hit in hits) if hits else "no match")

    def _conversation(self, service: SessionService, args: argparse.Namespace) -> Any:
        """``%agent conversation``: the Markdown printed (at most :data:`MAX_SHOWN`
        characters), or with ``--notebook`` the notebook written and where."""
        session = service.lookup(args.id)
        if args.notebook:
            path = Path(args.output).expanduser().absolute() if args.output else None
            written = write_notebook(service, session.id, path)
            return ConversationNotebook(session, written, Path.cwd())
        if args.output:
            raise UsageError(
                "%agent conversation: -o is for --notebook (the Markdown to a file: "
                f"jupyter agents conversation {session.id} -o FILE)"
            )
        _, chunks = open_export(service, session.id, "md")
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        parts: list[str] = []
        shown = 0
        for chunk in chunks:
            parts.append(decoder.decode(chunk))
            shown += len(parts[-1])
            if shown > MAX_SHOWN:
                break
        text = "".join(parts)
        cut = len(text) > MAX_SHOWN
        print(text[:MAX_SHOWN].rstrip("\n"))
        if cut:
            print(
                f"[cut at {MAX_SHOWN} characters: all of it with --notebook, or "
                f"jupyter agents conversation {session.id}]"
            )
        return None

    def _watch(self, service: SessionService, args: argparse.Namespace) -> Any:
        """``%agent watch``: the widget in a kernel; printed lines in a terminal."""
        session = service.lookup(args.id)
        if getattr(self.shell, "kernel", None) is None:  # a terminal IPython: no widgets
            width = shutil.get_terminal_size((80, 24)).columns
            watch_in_terminal(TurnReader(service, session.id, turn_printer(width)))
            return None
        try:
            from jupyter_agents.clients.widgets import TurnsWatch
        except ImportError:
            raise UsageError(
                "%agent watch: in a notebook it needs ipywidgets (pip install "
                "'jupyter-agents[notebook]'); from a terminal: "
                f"jupyter agents turns {session.id} -f"
            ) from None
        return TurnsWatch(service, session.id)

    def _run(self, service: SessionService, args: argparse.Namespace, extra: list[str]) -> Any:
        cli = {
            "requests": cmd_requests,
            "allow": cmd_allow,
            "deny": cmd_deny,
            "diff": cmd_diff,
            "finish": cmd_finish,
        }
        if args.command in cli:
            cli[args.command](service, args)
            return None
        if args.command == "new":
            session, _ = service.create(
                name=args.name,
                cwd=args.cwd or ".",
                kind=args.kind,
                args=extra,
                strict=True,
                worktree=args.branch or args.worktree or None,
                mode=args.mode,
            )
            return SessionTable([session])
        if args.command in ("ls", "list"):
            service.refresh.catch_up()
            sessions = service.list()
            if not args.all:
                now = datetime.now(timezone.utc)
                sessions = [s for s in sessions if worth_listing(s, now)]
            return SessionTable(sessions, service.models.usage(sessions))
        if args.command in ("resume", "restore"):
            return self._resume(service, args)
        if args.command == "show":
            service.refresh.follow_conversations()
            service.refresh.read_usage()
            model = service.models.many([service.lookup(args.id)])[0]
            print(json.dumps(model, indent=2) if args.json else describe_session(model, None))
            return None
        if args.command == "grep":
            return self._grep(service, args)
        if args.command == "cost":
            service.refresh.read_usage()
            ids = [service.lookup(ref).id for ref in args.ids] or None
            print(cost_text(cost_report(service, ids), shown_width()))
            return None
        if args.command == "attach":
            return terminal_link(service.lookup(args.id))
        if args.command == "kill":
            return SessionTable([service.terminate(service.lookup(args.id).id)])
        if args.command == "rename":
            title = " ".join(args.title)
            return SessionTable([service.rename(service.lookup(args.id).id, title)])
        if args.command == "log":
            data = service.transcript(service.lookup(args.id).id).tail(1 << 20)
            print("\n".join(plain_text(data).splitlines()[-args.n :]))
            return None
        if args.command == "conversation":
            return self._conversation(service, args)
        if args.command == "watch":
            return self._watch(service, args)
        from jupyter_agents.clients.widgets import Dashboard  # ipywidgets: only for the dashboard

        return Dashboard(service=service)


# %agent's help names the kinds the agents wing has, not a list of its own
AgentMagics.agent.__doc__ = (AgentMagics.agent.__doc__ or "").replace(
    "{kinds}", ", ".join(["shell", *(kind.name for kind in BUILTIN)])
)
