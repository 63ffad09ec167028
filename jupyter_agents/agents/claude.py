"""Claude Code (DESIGN.md section 10).

The conversation id is assigned at launch (``--session-id <uuid4>``), so it is exact
from the first second. While the session runs, Claude keeps
``$CLAUDE_CONFIG_DIR/sessions/<pid>.json`` = ``{"pid", "sessionId", "cwd", ...}`` up to
date (``/clear`` rotates the id and rewrites it): that per-pid file is how the id is
followed, never "the newest transcript in the folder".

On resume: ``--resume <id>`` when the conversation's transcript exists, ``--session-id
<id>`` when none does (no message was ever sent, so there is nothing to resume yet), and
a new conversation (a new ``--session-id``) when the id is unknown: never
``--continue``, whose "most recent in the folder" may be another session's. The folder's
conversations are offered instead.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence, Set
from datetime import datetime, timezone
from pathlib import Path

from jupyter_agents.agents.attention import claude_settings
from jupyter_agents.agents.base import AgentKind, FolderConversation, Launch, home_of, is_uuid
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.store import Session

#: flags that choose the conversation: ours to set
_ID_FLAGS = frozenset(
    {"--session-id", "--resume", "-r", "--continue", "-c", "--fork-session", "--from-pr"}
)
_SLUG_MAX = 200


def config_dir(env: Mapping[str, str]) -> Path:
    """``$CLAUDE_CONFIG_DIR``, else ``~/.claude`` of the session's home."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    return Path(configured).expanduser() if configured else home_of(env) / ".claude"


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le")
    return [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed, over UTF-16 code units).

    >>> _java_hash("hello")
    99162322
    """
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def project_slug(path: str) -> str:
    """The folder name Claude stores a cwd's transcripts under.

    Every UTF-16 code unit outside ``[a-zA-Z0-9]`` becomes ``-``; a slug over 200
    characters is cut to 200 plus ``-`` and the base-36 ``abs`` of the path's Java
    string hash.

    >>> project_slug("/home/u/my project")
    '-home-u-my-project'
    >>> project_slug("/é")
    '--'
    """
    slug = "".join(
        chr(u) if chr(u).isascii() and chr(u).isalnum() else "-" for u in _utf16_units(path)
    )
    if len(slug) <= _SLUG_MAX:
        return slug
    return f"{slug[:_SLUG_MAX]}-{_base36(abs(_java_hash(path)))}"


def conversation_file(env: Mapping[str, str], cwd: str | None, conversation_id: str) -> Path | None:
    """The transcript file of conversation ``conversation_id``, if it has one (a message
    was sent).

    Looks where Claude writes it for ``cwd`` first, then under any project folder (the
    file name is the id, so this is exact, not a guess).
    """
    projects = config_dir(env) / "projects"
    if cwd:
        path = projects / project_slug(str(Path(cwd).resolve())) / f"{conversation_id}.jsonl"
        if path.is_file():
            return path
    return next(iter(sorted(projects.glob(f"*/{conversation_id}.jsonl"))), None)


def live_conversation(env: Mapping[str, str], pid: int) -> str | None:
    """The conversation id Claude process ``pid`` holds now, from its per-pid file."""
    try:
        data = json.loads((config_dir(env) / "sessions" / f"{pid}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("pid") not in (pid, str(pid)):
        return None
    cid = data.get("sessionId")
    return cid if is_uuid(cid) else None


class ClaudeKind(AgentKind):
    """``claude`` with an id assigned at launch and followed through ``/clear``."""

    name = "claude"
    install = "npm install -g @anthropic-ai/claude-code"
    follows_conversation = True
    reports = "hooks"
    keeps_conversations = True

    def with_reporting(self, argv: list[str], state_dir: Path, session_id: str) -> list[str]:
        return [*argv, "--settings", str(claude_settings(state_dir, session_id))]

    def check_args(self, args: object) -> list[str]:
        checked = super().check_args(args)
        for arg in checked:
            flag = arg.split("=", 1)[0]
            if flag in _ID_FLAGS:
                raise InvalidRequest(
                    f"{flag} is set by jupyter_agents (each session gets its own "
                    "conversation id); to continue a conversation, restore its session"
                )
        return checked

    def launch(self, args: list[str]) -> Launch:
        cid = str(uuid.uuid4())
        return Launch([*self.command, "--session-id", cid, *args], cid)

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        cid = session.conversation_id
        if not is_uuid(cid):
            return dataclasses.replace(self.launch(session.args), fresh=True)
        assert cid is not None
        exists = had_file or conversation_file(env, session.cwd, cid) is not None
        flag = "--resume" if exists else "--session-id"
        return Launch([*self.command, flag, cid, *session.args], cid)

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """``projects/<slug of the folder>/<id>.jsonl``, newest first."""
        if not session.cwd:
            return []
        folder = config_dir(session.env or {}) / "projects"
        folder = folder / project_slug(str(Path(session.cwd).resolve()))
        found = []
        for path in folder.glob("*.jsonl"):
            if not is_uuid(path.stem):
                continue
            try:
                modified = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
            except OSError:
                continue
            found.append(FolderConversation(path.stem, modified))
        return sorted(found, key=lambda c: c.modified, reverse=True)[:limit]

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        if not is_uuid(conversation_id):
            return None
        return conversation_file(session.env or {}, session.cwd, conversation_id)

    def discover(
        self,
        session: Session,
        pids: Sequence[int],
        env: Mapping[str, str],
        taken: Set[str],
    ) -> str | None:
        for pid in pids:
            cid = live_conversation(env, pid)
            if cid is not None:
                return cid
        return None
