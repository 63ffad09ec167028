"""The OpenCode kind without the CLI: argv, resume, its database read read-only, the
plugin's records (usage, Markdown), the environment that loads the plugin, the tracker
following ``ses_`` ids, bad input; and the plugin itself, run by Node.js with OpenCode's
events as the real CLI sends them (tests/test_real_opencode_turns.py runs it in
OpenCode)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.agents.attention import AttentionTracker
from jupyter_agents.agents.hooks import hook_command
from jupyter_agents.agents.kinds import make_kinds
from jupyter_agents.agents.opencode import (
    PLUGIN,
    OpenCodeKind,
    markdown,
    parse_usage,
    records_dir,
)
from jupyter_agents.agents.spool import spool_path
from jupyter_agents.agents.usage import BadRecord, Tokens
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.events import EventAction
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore

CID = "ses_db939e313ffeTQCV148nfB0mLc"
OTHER = "ses_db93403acffev4Qf7NOGEoYXjY"


def opencode_db(home: Path, rows: list[tuple[str, str | None, str, int, int | None]]) -> Path:
    """An OpenCode database (the columns read here) in ``home``: (id, parent, folder,
    time_updated in ms, time_archived)."""
    path = home / ".local" / "share" / "opencode" / "opencode.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE session (id text PRIMARY KEY, parent_id text, directory text NOT NULL, "
        "time_updated integer NOT NULL, time_archived integer)"
    )
    db.executemany("INSERT INTO session VALUES (?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    return path


def session(home: Path, cwd: Path, cid: str | None = None, **kw: Any) -> Session:
    return Session(
        id="s1",
        name="1",
        status="interrupted",
        backend="tmux",
        kind="opencode",
        cwd=str(cwd),
        conversation_id=cid,
        env={"HOME": str(home)},
        **kw,
    )


def test_launch_has_no_id_and_the_id_flags_are_ours() -> None:
    kind = OpenCodeKind(["opencode"])
    launch = kind.launch(kind.check_args(["--model", "anthropic/claude-sonnet-5"]))
    assert launch.argv == ["opencode", "--model", "anthropic/claude-sonnet-5"]
    assert launch.conversation_id is None  # OpenCode makes it at the first prompt
    for flag in (["-s", CID], [f"--session={CID}"], ["-c"], ["--continue"], ["--fork"]):
        with pytest.raises(InvalidRequest, match="set by jupyter_agents"):
            kind.check_args(flag)
    assert "opencode" in make_kinds(["bash"], {})


def test_resume_by_id_only_when_opencode_holds_it(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    cwd.mkdir()
    kind = OpenCodeKind(["opencode"])
    env = {"HOME": str(home)}
    # no database yet: nothing to resume, a new conversation (never `-c`)
    fresh = kind.resume(session(home, cwd, CID), env)
    assert fresh.argv == ["opencode"] and fresh.fresh and fresh.conversation_id is None
    # the archive saw its record: by id, so that OpenCode says why it cannot
    kept = kind.resume(session(home, cwd, CID), env, had_file=True)
    assert kept.argv == ["opencode", "--session", CID] and kept.conversation_id == CID
    opencode_db(home, [(CID, None, str(cwd), 1_796_483_727_862, None)])
    resumed = kind.resume(session(home, cwd, CID, args=["--agent", "plan"]), env)
    assert resumed.argv == ["opencode", "--session", CID, "--agent", "plan"]
    # an id of another shape is never passed on
    assert kind.resume(session(home, cwd, "../x"), env, had_file=True).fresh


def test_folder_conversations_come_from_the_database_read_only(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    cwd.mkdir()
    path = opencode_db(
        home,
        [
            (CID, None, str(cwd), 2_000, None),
            (OTHER, None, str(cwd), 3_000, None),
            ("ses_child0000000", CID, str(cwd), 9_000, None),  # a subagent's
            ("ses_archived0000", None, str(cwd), 8_000, 8_500),
            ("ses_elsewhere000", None, str(tmp_path), 7_000, None),
        ],
    )
    before = path.read_bytes()
    found = OpenCodeKind(["opencode"]).folder_conversations(session(home, cwd))
    assert [c.conversation_id for c in found] == [OTHER, CID]
    assert found[0].modified.timestamp() == 3.0
    assert path.read_bytes() == before and not path.with_name("opencode.db-wal").exists()


def test_an_unreadable_database_is_no_conversation(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    cwd.mkdir()
    path = home / ".local" / "share" / "opencode" / "opencode.db"
    path.parent.mkdir(parents=True)
    path.write_text("not a database")
    kind = OpenCodeKind(["opencode"])
    assert kind.folder_conversations(session(home, cwd)) == []
    assert kind.resume(session(home, cwd, CID), {"HOME": str(home)}).fresh
    # OPENCODE_DB names another file in the data folder
    opencode_db(tmp_path / "elsewhere", [(CID, None, str(cwd), 1, None)]).rename(
        path.with_name("mine.db")
    )
    env = {"HOME": str(home), "OPENCODE_DB": "mine.db"}
    assert kind.resume(session(home, cwd, CID), env).argv[-1] == CID


def test_usage_of_the_plugins_records() -> None:
    def line(info: dict[str, Any]) -> bytes:
        return json.dumps({"t": 1_796_483_727_742, "type": "message", "info": info}).encode()

    tokens = {"input": 1300, "output": 12, "reasoning": 4, "cache": {"write": 0, "read": 1100}}
    info = {"id": "msg_1", "role": "assistant", "modelID": "gpt-5", "tokens": tokens}
    record = parse_usage(line({**info, "time": {"completed": 1_796_483_727_740}}))
    assert record is not None
    assert record.key == "msg_1" and record.model == "gpt-5" and record.when == 1_796_483_727.74
    assert record.tokens == Tokens(input=1300, output=16, cache_creation=0, cache_read=1100)
    assert parse_usage(line({**info, "role": "user"})) is None
    zero = {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    assert parse_usage(line({**info, "tokens": zero})) is None  # not answered yet
    assert parse_usage(b'{"type": "part", "part": {"type": "text", "text": "message"}}') is None
    for bad in (
        line({**info, "tokens": None}),
        line({**info, "tokens": {**tokens, "input": -1}}),
        line({**info, "tokens": {**tokens, "cache": 3}}),
        b'{"type": "message", not json',
    ):
        with pytest.raises(BadRecord):
            parse_usage(bad)


def test_markdown_of_the_plugins_records() -> None:
    records = [
        {"t": 1, "type": "session", "info": {"id": CID, "directory": "/w"}},
        {"t": 2, "type": "part", "role": "user", "part": {"type": "text", "text": "do it"}},
        {"t": 3, "type": "part", "role": "assistant", "part": {"type": "reasoning", "text": "hm"}},
        {
            "t": 4,
            "type": "part",
            "role": "assistant",
            "part": {
                "type": "tool",
                "tool": "bash",
                "state": {"status": "completed", "input": {"command": "ls"}, "output": "a b"},
            },
        },
        {"t": 5, "type": "part", "role": "assistant", "part": {"type": "tool", "state": "x"}},
        {"t": 6, "type": "message", "info": {"id": "msg_1"}},
    ]
    text = "".join("".join(markdown(r)) for r in records)
    assert f"*OpenCode session `{CID}` started in `/w`.*" in text
    assert "> do it" in text and "hm" not in text
    assert "**Tool call** `bash`: `ls`" in text and "**Tool result**: `a b`" in text


def test_the_environment_loads_our_plugin_for_that_process(tmp_path: Path) -> None:
    kind = OpenCodeKind(["opencode"])
    env = kind.reporting_env(tmp_path, "s1")
    assert set(env) == {"OPENCODE_CONFIG_CONTENT"}
    ((spec, options),) = json.loads(env["OPENCODE_CONFIG_CONTENT"])["plugin"]
    assert spec == PLUGIN.as_uri() and PLUGIN.is_file()
    assert options["hook"] == hook_command(tmp_path, "s1")
    assert options["ask"][-1] == str(spool_path(tmp_path, "s1")) and "--ask" in options["ask"]
    assert options["records"] == str(records_dir(tmp_path, "s1"))
    assert kind.with_reporting(["opencode"], tmp_path, "s1") == ["opencode"]


def test_the_conversation_file_is_the_plugins_record(tmp_path: Path) -> None:
    kind = OpenCodeKind(["opencode"])
    one = session(tmp_path, tmp_path, CID)
    assert kind.conversation_file(one, CID) is None  # no state dir known yet
    kind.state_dir = tmp_path
    assert kind.conversation_file(one, CID) is None  # nothing recorded yet
    path = records_dir(tmp_path, "s1") / f"{CID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("{}\n")
    assert kind.conversation_file(one, CID) == path
    assert kind.conversation_file(one, "../../s1/" + CID) is None


def test_the_tracker_follows_ses_ids_of_opencode_sessions_only(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions.db")
    kinds = make_kinds(["bash"], {})

    def change(
        session_id: str, action: EventAction | None = None, *, expect: Any = None, **fields: Any
    ) -> Session | None:
        store.update(session_id, expect=expect, **fields)
        return store.get(session_id)

    for sid, kind in (("s1", "opencode"), ("s2", "claude")):
        store.add(Session(id=sid, name=sid, status="running", backend="tmux", kind=kind))
        spool_path(tmp_path, sid).parent.mkdir(exist_ok=True)
        spool_path(tmp_path, sid).write_text(
            json.dumps({"t": 10.0, "event": "SessionStart", "conversation": None})
            + "\n"
            + json.dumps({"t": 11.0, "event": "SessionStart", "conversation": CID})
            + "\n"
            + json.dumps({"t": 12.0, "event": "Stop", "conversation": CID})
            + "\n"
        )
    tracker = AttentionTracker(tmp_path, store, kinds, change, logging.getLogger("t"))
    tracker.apply_spool()
    assert (store.get("s1").conversation_id, store.get("s1").attention) == (CID, "waiting")
    assert store.get("s2").conversation_id is None  # a Claude id is a UUID
    store.close()


# -- the plugin, in Node.js -------------------------------------------------------------

DRIVER = """
const [plugin, options] = process.argv.slice(2);
const { JupyterAgents } = await import(plugin);
const replies = [];
const ctx = { client: { postSessionIdPermissionsPermissionId: async (x) => { replies.push(x); } } };
const hooks = await JupyterAgents(ctx, JSON.parse(options));
let input = "";
for await (const chunk of process.stdin) input += chunk;
const shell = { env: {} };
await hooks["shell.env"]({ cwd: "/" }, shell);
for (const event of JSON.parse(input)) await hooks.event({ event });
process.on("exit", () => console.log(JSON.stringify({ replies, env: shell.env })));
"""


def event(kind: str, **properties: Any) -> dict[str, Any]:
    return {"id": "e", "type": kind, "properties": properties}


def assistant(mid: str, session_id: str, done: bool) -> dict[str, Any]:
    tokens = {"input": 1000, "output": 30, "reasoning": 0, "cache": {"read": 200, "write": 0}}
    info: dict[str, Any] = {"id": mid, "sessionID": session_id, "role": "assistant"}
    info |= {"tokens": tokens, "time": {"created": 1, **({"completed": 2} if done else {})}}
    return event("message.updated", sessionID=session_id, info=info)


#: one turn as OpenCode 1.18.33 sends it (trimmed): a prompt, a shell command that asks,
#: allowed, a subagent's session whose own turn is not the session's, the turn's end
TURN = [
    event("session.created", sessionID=CID, info={"id": CID, "directory": "/w"}),
    event("message.updated", info={"id": "msg_u", "sessionID": CID, "role": "user"}),
    event(
        "message.part.updated",
        part={"id": "p1", "messageID": "msg_u", "sessionID": CID, "type": "text", "text": "hi"},
    ),
    event("session.status", sessionID=CID, status={"type": "busy"}),
    assistant("msg_a", CID, done=False),
    event("session.status", sessionID=CID, status={"type": "busy"}),
    event(
        "permission.asked",
        id="per_1",
        sessionID=CID,
        permission="bash",
        patterns=["touch x"],
        metadata={"command": "touch x"},
    ),
    event("permission.replied", sessionID=CID, requestID="per_1", reply="once"),
    event(
        "message.part.updated",
        part={
            "id": "p2",
            "messageID": "msg_a",
            "sessionID": CID,
            "type": "tool",
            "tool": "bash",
            "state": {"status": "completed", "input": {"command": "touch x"}, "output": ""},
        },
    ),
    assistant("msg_a", CID, done=True),
    event("session.created", sessionID=OTHER, info={"id": OTHER, "parentID": CID}),
    event("session.status", sessionID=OTHER, status={"type": "busy"}),
    assistant("msg_c", OTHER, done=True),
    event(
        "message.part.updated",
        part={"id": "p3", "messageID": "msg_c", "sessionID": OTHER, "type": "text", "text": "x"},
    ),
    event("session.idle", sessionID=OTHER),
    event("session.error", sessionID=CID, error={"name": "MessageAbortedError"}),
    event("session.idle", sessionID=CID),
]


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_plugin_reports_in_order_and_records_the_conversation(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.mjs"  # an ES module whatever Node's version
    shutil.copyfile(PLUGIN, plugin)
    driver = tmp_path / "driver.mjs"
    driver.write_text(DRIVER)
    allow = {"hookSpecificOutput": {"decision": {"behavior": "allow"}}}
    ask = [sys.executable, "-c", f"import sys; sys.stdin.read(); print({json.dumps(allow)!r})"]
    options = {
        "hook": hook_command(tmp_path, "s1"),
        "ask": ask,
        "records": str(records_dir(tmp_path, "s1")),
    }
    (tmp_path / "spool").mkdir()
    done = subprocess.run(
        ["node", str(driver), plugin.as_uri(), json.dumps(options)],
        input=json.dumps(TURN),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "OPENCODE_CONFIG_CONTENT": '{"plugin": ["opencode_plugin.js"]}'},
    )
    out = json.loads(done.stdout.splitlines()[-1])
    # allowed elsewhere: answered through OpenCode's API (the SDK client 1.18 gives
    # plugins), once
    assert out["replies"] == [
        {"path": {"id": CID, "permissionID": "per_1"}, "body": {"response": "once"}}
    ]
    # the commands it runs do not load the plugin again
    assert out["env"] == {"OPENCODE_CONFIG_CONTENT": ""}
    spooled = [json.loads(x) for x in spool_path(tmp_path, "s1").read_text().splitlines()]
    assert [(r["event"], r["conversation"]) for r in spooled] == [
        ("SessionStart", None),  # its start, before any conversation
        ("SessionStart", CID),  # the first prompt made it
        ("UserPromptSubmit", CID),
        ("PostToolUse", CID),  # the permission (asked by the ask hook) answered
        ("Stop", CID),  # an interrupt is a turn's end, the subagent's end is not
    ]
    assert [r["t"] for r in spooled] == sorted(r["t"] for r in spooled)
    record = records_dir(tmp_path, "s1") / f"{CID}.jsonl"
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["session", "part", "part", "message", "message"]
    assert lines[1]["role"] == "user" and lines[2]["part"]["type"] == "tool"
    # the subagent's message counts in its parent's conversation; its words stay out
    assert [r["info"]["id"] for r in lines if r["type"] == "message"] == ["msg_a", "msg_c"]
    assert not (records_dir(tmp_path, "s1") / f"{OTHER}.jsonl").exists()


def part(pid: str, mid: str, kind: str, **fields: Any) -> dict[str, Any]:
    return event(
        "message.part.updated",
        part={"id": pid, "messageID": mid, "sessionID": CID, "type": kind, **fields},
    )


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_plugin_records_a_messages_parts_in_the_order_they_began(tmp_path: Path) -> None:
    """OpenCode 1.18.33 ends a text part when its step's stream ends: a tool call that
    came after the text (a ``todowrite``) may end first. The record keeps the order the
    parts began in; a part still unfinished when its message ends is left out."""
    plugin = tmp_path / "plugin.mjs"
    shutil.copyfile(PLUGIN, plugin)
    driver = tmp_path / "driver.mjs"
    driver.write_text(DRIVER)
    options = {"hook": [], "records": str(records_dir(tmp_path, "s1"))}
    todo = {"status": "completed", "input": {"todos": []}, "output": "[]"}
    started = {"start": 1}
    events = [
        event("session.created", sessionID=CID, info={"id": CID, "directory": "/w"}),
        assistant("msg_a", CID, done=False),
        part("p1", "msg_a", "step-start"),
        part("p2", "msg_a", "text", text="Planning", time=started),
        part("p3", "msg_a", "tool", tool="todowrite", state={"status": "running"}),
        part("p3", "msg_a", "tool", tool="todowrite", state=todo),  # ended first
        part("p2", "msg_a", "text", text="Planning-it", time={"start": 1, "end": 2}),
        part("p3", "msg_a", "tool", tool="todowrite", state=todo),  # again: recorded once
        part("p4", "msg_a", "reasoning", text="never ended", time=started),
        part("p5", "msg_a", "tool", tool="bash", state={"status": "error", "error": "no"}),
        assistant("msg_a", CID, done=True),
    ]
    subprocess.run(
        ["node", str(driver), plugin.as_uri(), json.dumps(options)],
        input=json.dumps(events),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    record = records_dir(tmp_path, "s1") / f"{CID}.jsonl"
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert [(r["type"], r.get("part", {}).get("id")) for r in lines] == [
        ("session", None),
        ("part", "p2"),
        ("part", "p3"),
        ("part", "p5"),  # the reasoning before it never ended: left out at the message's end
        ("message", None),
    ]
    assert lines[1]["part"]["text"] == "Planning-it"
