"""OpenCode (docs/agents-opencode.md).

OpenCode makes a conversation's id (``ses_...``) only at the first prompt, and refuses
an id it does not know (``-s <id>``: "Session not found"), so no id can be chosen at
launch. Each process we start loads our plugin (``opencode_plugin.js``, named in its
``OPENCODE_CONFIG_CONTENT``: the user's config files stay as they are), which reports
OpenCode's own events to the session's hook: the ``session.created`` of the first
prompt as ``SessionStart`` with the new id (the attention tracker follows it, as it
follows Claude's ``/clear``), a busy status as ``UserPromptSubmit``, ``permission.asked``
as ``PermissionRequest`` (answerable from elsewhere: the plugin replies through
OpenCode's own API), ``permission.replied`` as ``PostToolUse``, ``session.error`` as
``StopFailure`` and ``session.idle`` as ``Stop``.

OpenCode keeps conversations in SQLite (``$XDG_DATA_HOME/opencode/opencode.db``,
tables ``session``, ``message``, ``part``), which is read here read-only and briefly
(whether a conversation exists, a folder's conversations). What the ledger, the
archive, search and the export read line by line is the plugin's record of each
conversation: ``<state dir>/opencode/<session id>/<ses id>.jsonl``, one line per
finished message (``{"type": "message", "info": {id, role, modelID, providerID,
tokens, cost, time...}}``) and per finished part (``{"type": "part", "role", "part":
{type: text | reasoning | tool, ...}}``), plus a ``session`` line when one starts.

On resume: ``opencode -s <id>`` when OpenCode's database holds the conversation (or the
archive saw its record: OpenCode then says why it cannot); a new conversation when the
id is unknown (never ``-c``, the most recent conversation, which may be someone else's).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jupyter_agents.agents.base import AgentKind, FolderConversation, Launch, home_of
from jupyter_agents.agents.hooks import ask_command, hook_command, spool_dir
from jupyter_agents.agents.markdown import code, timestamp, tool_call, tool_result, turn
from jupyter_agents.agents.turns import call, other, plan, result, said, turn_event
from jupyter_agents.agents.usage import BadRecord, Record, Tokens, UsageReader, count, json_object
from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.paths import ensure_private_dir
from jupyter_agents.core.records import Session

#: an OpenCode conversation id (``ses_`` and 26 letters and digits in 1.18)
CONVERSATION_ID = re.compile(r"ses_[A-Za-z0-9]{8,64}", re.ASCII)
#: flags that choose the conversation: ours to set
_ID_FLAGS = frozenset({"-s", "--session", "-c", "--continue", "--fork"})
#: our plugin, shipped beside this module
PLUGIN = Path(__file__).with_name("opencode_plugin.js")
#: how long a permission request waits for an answer from elsewhere (OpenCode's dialog
#: stays on screen meanwhile, and the first answer wins)
ASK_WAIT = 3600.0
#: how long a read of OpenCode's database waits for a lock (it is never written here)
DB_TIMEOUT = 0.5


def is_conversation_id(value: object) -> bool:
    """Whether ``value`` is an OpenCode conversation id.

    >>> is_conversation_id("ses_db939e313ffeTQCV148nfB0mLc"), is_conversation_id("ses_../x")
    (True, False)
    """
    return isinstance(value, str) and CONVERSATION_ID.fullmatch(value) is not None


def data_dir(env: Mapping[str, str]) -> Path:
    """OpenCode's data folder: ``$XDG_DATA_HOME/opencode``, else
    ``~/.local/share/opencode`` of the session's home."""
    xdg = env.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else home_of(env) / ".local" / "share"
    return base / "opencode"


def database(env: Mapping[str, str]) -> Path:
    """OpenCode's database: ``$OPENCODE_DB`` (relative to the data folder), else
    ``opencode.db`` in the data folder (the npm build's release channel)."""
    configured = env.get("OPENCODE_DB")
    if configured and configured != ":memory:":
        return data_dir(env) / Path(configured).expanduser()
    return data_dir(env) / "opencode.db"


def query(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` in the SQLite database at ``path``, opened read-only (never
    created, never written, waiting at most :data:`DB_TIMEOUT` for a lock); [] when it
    cannot be read (absent, another schema, locked)."""
    if not path.is_file():
        return []
    try:
        db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=DB_TIMEOUT)
    except sqlite3.Error:
        return []
    try:
        return [tuple(row) for row in db.execute(sql, params).fetchall()]
    except sqlite3.Error:
        return []
    finally:
        db.close()


def records_dir(state_dir: Path, session_id: str) -> Path:
    """Where the plugin keeps the records of session ``session_id``'s conversations."""
    return state_dir / "opencode" / session_id


def plugin_config(state_dir: Path, session_id: str) -> str:
    """The ``OPENCODE_CONFIG_CONTENT`` that loads our plugin for session ``session_id``
    (a config OpenCode merges last, over the user's own; its ``plugin`` list adds to
    theirs), with its options: the hook's argv, the asking hook's argv and the folder of
    the session's records (:mod:`opencode_plugin.js <jupyter_agents.agents>`)."""
    options = {
        "hook": hook_command(state_dir, session_id),
        "ask": ask_command(state_dir, session_id, ASK_WAIT, "shown"),
        "records": str(records_dir(state_dir, session_id)),
    }
    return json.dumps({"plugin": [[PLUGIN.as_uri(), options]]})


# -- usage ------------------------------------------------------------------------------


def parse_usage(line: bytes) -> Record | None:
    """The usage of one line of the plugin's record: a finished assistant message's
    ``tokens`` (``input`` excludes cached input; ``output`` excludes ``reasoning``,
    which counts as output here), keyed by the message id; None for other lines.

    >>> line = (b'{"t": 1796483727742, "type": "message", "info": {"id": "msg_1", '
    ...         b'"role": "assistant", "modelID": "gpt-5", "time": {"completed": 1796483727740}, '
    ...         b'"tokens": {"input": 1300, "output": 12, "reasoning": 3, '
    ...         b'"cache": {"write": 5, "read": 1100}}, "cost": 0.01}}')
    >>> r = parse_usage(line)
    >>> r.key, r.model, r.tokens
    ('msg_1', 'gpt-5', Tokens(input=1300, output=15, cache_creation=5, cache_read=1100))
    >>> parse_usage(b'{"type": "part", "part": {"type": "text"}}') is None
    True
    """
    if b'"message"' not in line:
        return None
    entry = json_object(line)
    info = entry.get("info")
    if entry.get("type") != "message" or not isinstance(info, dict):
        return None
    if info.get("role") != "assistant":
        return None
    tokens = info.get("tokens")
    if not isinstance(tokens, dict):
        raise BadRecord("an assistant message without tokens")
    cache = tokens.get("cache") or {}
    if not isinstance(cache, dict):
        raise BadRecord("tokens.cache is not an object")
    counted = Tokens(
        count(tokens.get("input")),
        count(tokens.get("output")) + count(tokens.get("reasoning")),
        count(cache.get("write")),
        count(cache.get("read")),
    )
    if not counted.total:
        return None
    key = info.get("id")
    model = info.get("modelID")
    when = _seconds((info.get("time") or {}).get("completed") or entry.get("t"))
    return Record.of(key, model, when, counted)


def _seconds(milliseconds: object) -> float | None:
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, (int, float)):
        return None
    return milliseconds / 1000


class OpenCodeUsage(UsageReader):
    """Reads the usage of the plugin's record of one conversation (:func:`parse_usage`):
    the plugin writes a message each time OpenCode finishes it, so a message written
    twice is one record (keyed by its id), counted once. OpenCode also records each
    message's ``cost`` (from its model catalogue); the ledger prices tokens by model
    instead (``AgentsApp.prices``), so the recorded cost is not used."""

    def parse(self, line: bytes) -> Record | None:
        return parse_usage(line)


# -- the conversation as Markdown -------------------------------------------------------


def markdown(record: Mapping[str, Any]) -> Iterator[str]:
    """The Markdown of one line of the plugin's record: a conversation's start, and
    text and tool parts (the user's text quoted; reasoning left out)."""
    when = _when(record.get("t"))
    if record.get("type") == "session":
        info = record.get("info")
        if isinstance(info, dict):
            where = f" in {code(str(info['directory']))}" if info.get("directory") else ""
            yield f"*OpenCode session {code(str(info.get('id', '?')))} started{where}.*\n\n"
        return
    part = record.get("part")
    if record.get("type") != "part" or not isinstance(part, dict):
        return
    user = record.get("role") == "user"
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        yield from turn("User" if user else "Assistant", when, [part["text"]], [], user)
    elif part.get("type") == "tool":
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        assert isinstance(state, dict)
        name = str(part.get("tool") or "tool")
        yield from turn("Assistant", when, [], [tool_call(name, state.get("input"))], False)
        error = state.get("status") == "error"
        output = state.get("error") if error else state.get("output")
        yield from turn("Tool", when, [], [tool_result(output, error)], False)


#: the statuses of an OpenCode tool part, as ACP's
_PART_STATUS = {"pending": "pending", "running": "in_progress", "completed": "completed"}


def turns(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The turn events of one line of the plugin's record
    (:mod:`jupyter_agents.agents.turns`): text parts (the user's or the agent's),
    ``reasoning`` parts (``thought``) and tool parts: a ``tool_call`` with its state's
    status, and once it ended its ``tool_call_update`` (and, for ``todowrite``, whose
    input is the whole new list, a ``plan``).

    >>> rec = {"type": "part", "role": "assistant", "t": 1765083600000, "part": {
    ...     "type": "tool", "callID": "c1", "tool": "bash", "state": {"status": "completed",
    ...     "input": {"command": "ls"}, "output": "a.txt"}}}
    >>> [(e["type"], e["status"], e["at"]) for e in turns(rec)]
    [('tool_call', 'completed', '2025-12-07T05:00:00Z'), ('tool_call_update', 'completed', '2025-12-07T05:00:00Z')]
    """  # noqa: E501
    seconds = _seconds(record.get("t"))
    at = None if seconds is None else clock.iso(seconds)
    part = record.get("part")
    if record.get("type") != "part" or not isinstance(part, dict):
        yield other(at, record.get("type"))
        return
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        yield said(record.get("role") == "user", at, part["text"])
    elif kind == "reasoning" and isinstance(part.get("text"), str):
        yield turn_event("thought", at, text=part["text"])
    elif kind == "tool":
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        assert isinstance(state, dict)
        name = str(part.get("tool") or "tool")
        call_id = part.get("callID") or part.get("id")
        error = state.get("status") == "error"
        status = "failed" if error else _PART_STATUS.get(str(state.get("status")), "pending")
        arguments = state.get("input")
        yield call(at, call_id, name, arguments, status)
        if status in ("completed", "failed"):
            yield result(at, call_id, state.get("error") if error else state.get("output"), error)
        todos = arguments.get("todos") if isinstance(arguments, dict) else None
        if name == "todowrite" and status == "completed" and isinstance(todos, list):
            yield plan(
                at, [(t.get("content"), t.get("status")) for t in todos if isinstance(t, dict)]
            )
    else:
        yield other(at, f"part/{kind}")


def _when(milliseconds: object) -> str:
    seconds = _seconds(milliseconds)
    return "" if seconds is None else timestamp(clock.iso(seconds))


class OpenCodeKind(AgentKind):
    """``opencode`` (its TUI), its conversation id reported by our plugin at the first
    prompt."""

    name = "opencode"
    label = "OpenCode"
    badge = ("O", "#4b4646")
    install = "npm install -g opencode-ai"
    #: its ACP mode (DESIGN section 18)
    acp_args = ("acp",)
    reports = "hooks"
    keeps_conversations = True
    reports_usage = True
    #: Escape pressed twice within 5 s interrupts a turn (OpenCode's
    #: ``session_interrupt``; one press only shows "esc again to interrupt"). Two bare
    #: ESC bytes in one write read as one key, so each press is sent in the kitty
    #: keyboard protocol's form of Escape, which its TUI reads as a key of its own
    interrupt_key = "\x1b[27u\x1b[27u"
    #: set by OpenCode for the processes it runs (its bash tool, its terminal)
    own_env = ("OPENCODE", "OPENCODE_PID")
    #: the server's state dir (where the plugin keeps its records), set by the session
    #: service; None until then (no records are found)
    state_dir: Path | None = None

    def is_conversation_id(self, value: object) -> bool:
        return is_conversation_id(value)

    def usage_reader(self, saved: str | None) -> UsageReader:
        return OpenCodeUsage()

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        return markdown(record)

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return turns(record)

    def session_files(self, state_dir: Path, session_id: str) -> list[Path]:
        """The folder where our plugin records its conversations."""
        return [records_dir(state_dir, session_id)]

    def reporting_env(self, state_dir: Path, session_id: str) -> dict[str, str]:
        """``OPENCODE_CONFIG_CONTENT`` loading our plugin (:func:`plugin_config`; it
        replaces one the session's environment has). OpenCode waits for its plugin
        dependencies to be installed in its config folders before it loads a plugin:
        on a machine where ``~/.config/opencode/node_modules`` was never installed and
        the npm registry is out of reach, its start waits for that install to fail."""
        spool_dir(state_dir)
        ensure_private_dir(records_dir(state_dir, session_id).parent)
        return {"OPENCODE_CONFIG_CONTENT": plugin_config(state_dir, session_id)}

    def check_args(self, args: object) -> list[str]:
        checked = super().check_args(args)
        for arg in checked:
            flag = arg.split("=", 1)[0]
            if flag in _ID_FLAGS:
                raise InvalidRequest(
                    f"{flag} is set by jupyter_agents (each session follows its own "
                    "conversation); to continue a conversation, restore its session"
                )
        return checked

    def launch(self, args: list[str]) -> Launch:
        return Launch([*self.command, *args])

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        cid = session.conversation_id
        if is_conversation_id(cid) and (had_file or self.exists(env, str(cid))):
            return Launch([*self.command, "--session", str(cid), *session.args], cid)
        return Launch([*self.command, *session.args], None, fresh=True)

    def exists(self, env: Mapping[str, str], conversation_id: str) -> bool:
        """Whether OpenCode's database holds conversation ``conversation_id``."""
        rows = query(database(env), "SELECT 1 FROM session WHERE id = ?", (conversation_id,))
        return bool(rows)

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """Top-level conversations OpenCode's database holds for the session's folder
        (not archived), newest first by their last change."""
        if not session.cwd:
            return []
        rows = query(
            database(session.env or {}),
            "SELECT id, time_updated FROM session WHERE directory = ? AND parent_id IS NULL "
            "AND time_archived IS NULL ORDER BY time_updated DESC LIMIT ?",
            (str(Path(session.cwd).resolve()), max(0, limit)),
        )
        return [
            FolderConversation(str(cid), clock.from_epoch(updated / 1000))
            for cid, updated in rows
            if is_conversation_id(cid) and isinstance(updated, (int, float))
        ]

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        """The plugin's record of the conversation (OpenCode's own is a database row,
        which ``opencode --session`` needs: a record put back by the archive keeps the
        usage and the export, not OpenCode's ability to resume)."""
        if self.state_dir is None or not is_conversation_id(conversation_id):
            return None
        path = records_dir(self.state_dir, session.id) / f"{conversation_id}.jsonl"
        return path if path.is_file() else None
