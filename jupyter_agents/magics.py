"""``%agent``: sessions from a notebook or IPython (``%load_ext jupyter_agents``).

Sessions started here belong to the backend, not to the kernel: they keep running when
the kernel restarts, and JupyterLab lists them as terminals.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .config import open_sessions
from .display import SessionTable
from .errors import AgentsError
from .render import plain_text
from .sessions import SessionService


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
    sub.add_parser("ls", add_help=False)
    p = sub.add_parser("resume", add_help=False)
    p.add_argument("id", nargs="?")
    p.add_argument("--all", action="store_true")
    sub.add_parser("kill", add_help=False).add_argument("id")
    p = sub.add_parser("rename", add_help=False)
    p.add_argument("id")
    p.add_argument("title", nargs="*")
    p = sub.add_parser("log", add_help=False)
    p.add_argument("id")
    p.add_argument("-n", type=int, default=40)
    sub.add_parser("dashboard", add_help=False)
    return parser


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

        %agent new KIND [--cwd DIR] [--name NAME] [-- ARGS...]
            start a session: shell, claude, codex or a configured kind
        %agent ls
            list sessions (an HTML table in notebooks)
        %agent resume ID | --all
            restore one ended session, or every interrupted one
        %agent kill ID
            end a session's process tree
        %agent rename ID TITLE...
            give a session a title (none: the title its program set shows again)
        %agent log ID [-n LINES]
            the last LINES lines of a session's transcript (default 40)
        %agent dashboard
            a live table of sessions with buttons (ipywidgets)

        ID is a session id or the name of a running terminal. Every command takes
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

    def _run(self, service: SessionService, args: argparse.Namespace, extra: list[str]) -> Any:
        if args.command == "new":
            session, _ = service.create(
                name=args.name, cwd=args.cwd or ".", kind=args.kind, args=extra, strict=True
            )
            return SessionTable([session])
        if args.command == "ls":
            service.read_usage()
            sessions = service.list()
            return SessionTable(sessions, service.usage_models(sessions))
        if args.command == "resume":
            if args.all == bool(args.id):
                raise UsageError("%agent resume: give a session id or --all")
            if not args.all:
                session = service.restorer.restore(service.lookup(args.id).id)
                return SessionTable([service.restorer.check_resumed(session)])
            result = service.restorer.restore_many([s.id for s in service.interrupted()])
            for sid, error in result.failed:
                print(f"{sid}: {error}")
            return SessionTable(result.restored)
        if args.command == "kill":
            return SessionTable([service.terminate(service.lookup(args.id).id)])
        if args.command == "rename":
            title = " ".join(args.title)
            return SessionTable([service.rename(service.lookup(args.id).id, title)])
        if args.command == "log":
            data = service.transcript(service.lookup(args.id).id).tail(1 << 20)
            print("\n".join(plain_text(data).splitlines()[-args.n :]))
            return None
        from .widgets import Dashboard

        return Dashboard(service=service)
