"""Codex CLI (DESIGN.md section 10).

Codex cannot be given an id up front, so the id is captured after launch from evidence
tied to *that* process: the thread lock it holds open
(``$CODEX_HOME/thread-writer-locks/<id>.lock``, seen in the open files of the session's
processes), which also follows a switch to a new thread. Only while no lock is visible,
a rollout counts whose ``session_meta`` names the session's cwd, started within a few
seconds of the process, and is held by no other session; never "the newest file".

On resume: ``codex resume <id>``; a session whose id was never known starts a new
conversation in its folder (never ``codex resume --last``: the newest conversation on
the machine may be someone else's), and the folder's rollouts are offered instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence, Set
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil

from jupyter_agents.agents.attention import codex_notify
from jupyter_agents.agents.base import AgentKind, FolderConversation, Launch, home_of, is_uuid
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.store import Session

#: how far a rollout's start may be from the process's start to count as its own
ROLLOUT_WINDOW = timedelta(seconds=10)


def codex_home(env: Mapping[str, str]) -> Path:
    """``$CODEX_HOME``, else ``~/.codex`` of the session's home."""
    configured = env.get("CODEX_HOME")
    return Path(configured).expanduser() if configured else home_of(env) / ".codex"


def held_thread(home: Path, pids: Iterable[int]) -> str | None:
    """The thread id whose writer lock one of ``pids`` holds open, if any."""
    locks = home / "thread-writer-locks"
    for pid in pids:
        try:
            files = psutil.Process(pid).open_files()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for f in files:
            path = Path(f.path)
            if path.parent == locks and path.suffix == ".lock" and is_uuid(path.stem):
                return path.stem
    return None


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def rollout_meta(path: Path) -> dict[str, object] | None:
    """The ``session_meta`` payload of a rollout file (its first record), if readable."""
    try:
        with path.open("rb") as f:
            first = json.loads(f.readline(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or first.get("type") != "session_meta":
        return None
    payload = first.get("payload", first)
    return payload if isinstance(payload, dict) else None


def matching_rollouts(home: Path, cwd: str, started: datetime) -> list[str]:
    """Ids of rollouts that began in ``cwd`` within ``ROLLOUT_WINDOW`` of ``started``."""
    found: list[str] = []
    days = {started + d for d in (-ROLLOUT_WINDOW, timedelta(0), ROLLOUT_WINDOW)}
    for day in sorted({(d.year, d.month, d.day) for d in days}):
        folder = home / "sessions" / f"{day[0]:04d}" / f"{day[1]:02d}" / f"{day[2]:02d}"
        for path in folder.glob("rollout-*.jsonl"):
            meta = rollout_meta(path)
            if meta is None or not is_uuid(meta.get("id")) or meta.get("cwd") != cwd:
                continue
            when = _parse_time(meta.get("timestamp"))
            if when is not None and abs(when - started) <= ROLLOUT_WINDOW:
                found.append(str(meta["id"]))
    return found


class CodexKind(AgentKind):
    """``codex`` with its id captured from its thread lock (or its own rollout)."""

    name = "codex"
    install = "npm install -g @openai/codex"
    follows_conversation = True
    reports = "notify"
    keeps_conversations = True

    def with_reporting(self, argv: list[str], state_dir: Path, session_id: str) -> list[str]:
        """Our options go right after ``codex`` (or ``codex resume``): ``notify`` runs
        the hook at each turn's end, and ``--no-daemon`` keeps the thread in the
        session's own process tree, so its thread lock (the exact conversation id) is
        visible from the first second instead of held by a shared ``codex app-server``
        daemon that also outlives the session."""
        width = len(self.command) + (argv[len(self.command) : len(self.command) + 1] == ["resume"])
        ours = ["-c", codex_notify(state_dir, session_id), "--no-daemon"]
        return [*argv[:width], *ours, *argv[width:]]

    def check_args(self, args: object) -> list[str]:
        checked = super().check_args(args)
        if checked and checked[0] in ("resume", "fork"):
            raise InvalidRequest(
                f"'codex {checked[0]}' is chosen by jupyter_agents; to continue a "
                "conversation, restore its session"
            )
        return checked

    def launch(self, args: list[str]) -> Launch:
        return Launch([*self.command, *args])

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        cid = session.conversation_id
        if cid:
            return Launch([*self.command, "resume", cid, *session.args], cid)
        return Launch([*self.command, *session.args], None, fresh=True)

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """Rollouts whose ``session_meta`` names the session's folder, newest first (by
        the file's last write; only the newest 500 rollouts of the machine are read)."""
        if not session.cwd:
            return []
        home = codex_home(session.env or {})
        rollouts = sorted(
            home.glob("sessions/[0-9]*/[0-9]*/[0-9]*/rollout-*.jsonl"),
            key=lambda p: p.name,
            reverse=True,
        )[:500]
        found = []
        for path in rollouts:
            meta = rollout_meta(path)
            if meta is None or not is_uuid(meta.get("id")) or meta.get("cwd") != session.cwd:
                continue
            try:
                modified = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
            except OSError:
                continue
            found.append(FolderConversation(str(meta["id"]), modified))
        return sorted(found, key=lambda c: c.modified, reverse=True)[:limit]

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        """The rollout of the thread: ``sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

        That file is all ``codex resume <id>`` needs: it looks the id up in the
        ``state_*.sqlite`` thread index first and, when the index has no row or a stale
        path, searches ``sessions/`` for the id and repairs the index (openai/codex
        ``codex-rs/rollout/src/list.rs``, ``find_thread_path_by_id_str_in_subdir``)."""
        if not is_uuid(conversation_id):
            return None
        home = codex_home(session.env or {})
        found = sorted(
            home.glob(f"sessions/[0-9]*/[0-9]*/[0-9]*/rollout-*-{conversation_id}.jsonl")
        )
        return found[-1] if found else None

    def discover(
        self,
        session: Session,
        pids: Sequence[int],
        env: Mapping[str, str],
        taken: Set[str],
    ) -> str | None:
        home = codex_home(env)
        held = held_thread(home, pids)
        if held is not None or session.conversation_id is not None:
            return held or session.conversation_id
        if session.pid_created is None or not session.cwd:
            return None
        started = datetime.fromtimestamp(session.pid_created, timezone.utc)
        candidates = [c for c in matching_rollouts(home, session.cwd, started) if c not in taken]
        return candidates[0] if len(candidates) == 1 else None
