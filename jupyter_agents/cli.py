"""``jupyter agents``: sessions from a shell, with or without a running Jupyter server.

The CLI is a peer of the server over the same library (store + backend), so what it
starts is visible in JupyterLab and what the server started can be listed, killed or
restored here. Exit codes: 0 done, 1 failed, 2 bad usage, 3 unknown id, 4 the session's
state does not allow it (e.g. restoring a running session).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from jupyter_core.application import JupyterApp
from traitlets.config import Config

from .app import AgentsApp
from .display import text_table
from .errors import AgentsError, Conflict, NotFound
from .store import Session
from .terminals import TerminalManager

EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT = 1, 2, 3, 4


class _ConfigReader(JupyterApp):
    """Reads the Jupyter Server config files, where ``c.AgentsApp`` lives."""

    name = "jupyter-agents"
    config_file_name = "jupyter_server_config"


def load_config() -> Config:
    """The user's Jupyter Server config (``AgentsApp`` traits included)."""
    reader = _ConfigReader()
    reader.load_config_file()
    return reader.config


def open_manager(state_dir: str | None = None, create: bool = False) -> TerminalManager:
    """A TerminalManager on the state dir the server would use (or ``state_dir``).

    Without ``create``, a state dir that does not exist is :class:`NotFound` (no session
    was ever started there) instead of being made.
    """
    app = AgentsApp(config=load_config(), log_level=logging.WARNING)
    if state_dir:
        app.state_dir = str(Path(state_dir).expanduser().absolute())
    if not create and not Path(app.state_dir).is_dir():
        raise NotFound(
            f"no state dir at {app.state_dir}: no session was started there "
            "(give --state-dir, or set JUPYTER_AGENTS_STATE_DIR)"
        )
    return app.create_manager(root_dir=os.getcwd())


def progress(done: int, total: int, label: str, out: TextIO) -> None:
    """One line of a text progress bar (rewritten in place on a terminal)."""
    width = 20
    filled = width * done // max(total, 1)
    bar = "#" * filled + "-" * (width - filled)
    end = "\r" if out.isatty() and done < total else "\n"
    out.write(f"[{bar}] {done}/{total} {label}{end}")
    out.flush()


# -- commands ---------------------------------------------------------------------------


def cmd_list(manager: TerminalManager, args: argparse.Namespace) -> int:
    manager.reconcile()
    manager.refresh_conversations()
    sessions = manager.store.list(args.status or None)
    if args.json:
        print(json.dumps([s.to_model() for s in sessions], indent=2))
    else:
        print(text_table(sessions))
    return 0


def cmd_show(manager: TerminalManager, args: argparse.Namespace) -> int:
    manager.refresh_conversations()
    print(json.dumps(manager.lookup(args.id).to_model(), indent=2))
    return 0


def cmd_new(manager: TerminalManager, args: argparse.Namespace) -> int:
    session, _ = manager.create(
        name=args.name, cwd=args.cwd or os.getcwd(), kind=args.kind, args=args.args, strict=True
    )
    if args.json:
        print(json.dumps(session.to_model(), indent=2))
    else:
        print(session.id)
    return 0


def cmd_log(manager: TerminalManager, args: argparse.Namespace) -> int:
    session = manager.lookup(args.id)
    path = manager.backend.transcript_path(session.id)
    out = sys.stdout.buffer
    try:
        f = path.open("rb")
    except OSError as e:
        raise NotFound(f"session {session.id} has no transcript") from e
    with f:
        if args.tail is not None:
            f.seek(max(0, f.seek(0, 2) - args.tail))
        while True:
            chunk = f.read(1 << 16)
            if chunk:
                out.write(chunk)
                continue
            out.flush()
            if not args.follow or manager.store.get(session.id).status != "running":
                return 0
            time.sleep(0.2)


def cmd_kill(manager: TerminalManager, args: argparse.Namespace) -> int:
    session = asyncio.run(manager.terminate_session(manager.lookup(args.id).id))
    print(f"killed {session.id} (terminal {session.name!r}, pid {session.pid})")
    return 0


def cmd_adopt(manager: TerminalManager, args: argparse.Namespace) -> int:
    session = manager.adopt(manager.lookup(args.id).id)
    print(f"adopted {session.id} as terminal {session.name!r}")
    return 0


def cmd_restore(manager: TerminalManager, args: argparse.Namespace) -> int:
    if args.all == bool(args.id):
        raise SystemExit(_usage_error("restore: give a session id or --all, not both"))
    ids = [s.id for s in manager.interrupted()] if args.all else [manager.lookup(args.id).id]
    if args.all and not ids:
        print("no interrupted sessions")
        return 0
    started: list[Session] = []
    failed = 0
    for done, sid in enumerate(ids, 1):
        try:
            started.append(manager.restore(sid))
            label = f"{sid} started"
        except AgentsError as e:
            if not args.all:
                raise
            failed += 1
            label = f"{sid} FAILED: {e}"
        if args.all:
            progress(done, len(ids), label, sys.stderr)
    with ThreadPoolExecutor(max_workers=8) as pool:
        checked = list(pool.map(manager.watch_resumed, started))
    for session in checked:
        if session.status == "running":
            print(f"restored {session.id} ({session.kind}) as terminal {session.name!r}")
        else:
            failed += 1
            print(f"{session.id}: {session.reason}", file=sys.stderr)
    return EXIT_FAILED if failed else 0


def cmd_reconcile(manager: TerminalManager, args: argparse.Namespace) -> int:
    actions = manager.reconcile()
    for action in actions:
        print(action.describe())
    if not actions:
        print("no sessions to reconcile")
    return 0


def cmd_attach(manager: TerminalManager, args: argparse.Namespace) -> int:
    session = manager.lookup(args.id)
    if session.status not in ("running", "orphaned"):
        raise Conflict(f"session {session.id} is {session.status}; nothing to attach to")
    argv = manager.backend.debug_attach_command(session.id)
    os.execvp(argv[0], argv)  # noqa: S606 - argv from the backend, never a shell


def cmd_kill_server(manager: TerminalManager, args: argparse.Namespace) -> int:
    ended = manager.kill_server()
    print(f"stopped the {manager.backend.name} backend; {len(ended)} sessions marked killed")
    return 0


def cmd_gc(manager: TerminalManager, args: argparse.Namespace) -> int:
    stale = manager.stale_processes()
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
        ended = manager.gc(stale)
        print(
            f"ended {len(ended)} of them (the others had already exited or their pid was reused)"
            if len(ended) != len(stale)
            else f"ended {len(ended)}"
        )
    return 0


COMMANDS = {
    "list": cmd_list,
    "show": cmd_show,
    "new": cmd_new,
    "log": cmd_log,
    "kill": cmd_kill,
    "adopt": cmd_adopt,
    "restore": cmd_restore,
    "reconcile": cmd_reconcile,
    "attach": cmd_attach,
    "kill-server": cmd_kill_server,
    "gc": cmd_gc,
}


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
        epilog="Exit codes: 0 done, 1 failed, 2 bad usage, 3 unknown id, 4 wrong state.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common])

    p = add("list", "list sessions (all statuses)")
    p.add_argument("--json", action="store_true", help="JSON, the REST model")
    p.add_argument(
        "--status",
        action="append",
        choices=["running", "exited", "interrupted", "orphaned", "killed"],
        help="only these statuses (repeatable)",
    )
    add("show", "one session as JSON").add_argument("id")
    p = add("new", "start a session: jupyter agents new claude --cwd DIR -- --model opus")
    p.add_argument("kind", help="shell, claude, codex or a configured kind")
    p.add_argument("--cwd", help="working directory (default: the current one)")
    p.add_argument("--name", help="terminal name (default: the next free number)")
    p.add_argument("--json", action="store_true", help="print the model, not just the id")
    p.add_argument("args", nargs="*", help="arguments for the agent CLI (after --)")
    p = add("log", "print a session's raw transcript")
    p.add_argument("id")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing while it runs")
    p.add_argument("--tail", type=int, metavar="BYTES", help="only the last BYTES bytes")
    add("kill", "end a session's process tree").add_argument("id")
    add("adopt", "make an orphaned session a normal terminal").add_argument("id")
    p = add("restore", "relaunch an ended session (agents resume their conversation)")
    p.add_argument("id", nargs="?")
    p.add_argument("--all", action="store_true", help="every interrupted session")
    add("reconcile", "match the store with the backend now and print what changed")
    add("attach", "attach this terminal to a session (tmux attach)").add_argument("id")
    add("kill-server", "emergency stop of the backend: every session ends")
    p = add("gc", "list processes left by ended sessions (e.g. agent daemons); --kill ends them")
    p.add_argument("--kill", action="store_true", help="end them (identity re-checked)")
    p.add_argument("--json", action="store_true", help="JSON output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jupyter-agents`` (``jupyter agents``)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after "--" is for the agent CLI (argparse mishandles it in subcommands)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - 1] if "--" in argv else argv)
    if extra:
        if args.command != "new":
            return _usage_error("arguments after -- are only for 'new'")
        args.args = [*args.args, *extra]
    try:
        manager = open_manager(getattr(args, "state_dir", None), create=args.command == "new")
        return COMMANDS[args.command](manager, args)
    except NotFound as e:
        print(f"jupyter agents: {e}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except Conflict as e:
        print(f"jupyter agents: {e}", file=sys.stderr)
        return EXIT_CONFLICT
    except (AgentsError, ValueError) as e:
        print(f"jupyter agents: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
