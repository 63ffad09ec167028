"""The Gemini CLI kind as plain functions: argv, its files (real files shaped as Gemini
0.61 writes them), usage, Markdown, the hooks file and the hook it runs. No CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from test_agent_kinds import session as agent_session

from jupyter_agents.agents import gemini as g
from jupyter_agents.agents.attention import state_after
from jupyter_agents.agents.gemini import GeminiKind
from jupyter_agents.agents.kinds import make_kinds
from jupyter_agents.agents.spool import read_spool, spool_path
from jupyter_agents.agents.usage import BadRecord, Tokens
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session

KIND = GeminiKind(["gemini"])


def session(cwd: Path, cid: str | None, home: Path, args: list[str] | None = None) -> Session:
    """An interrupted gemini session in ``cwd`` whose HOME is ``home``."""
    made = agent_session("gemini", cwd, cid, args)
    made.env = {"HOME": str(home)}
    return made


def write_conversation(home: Path, project: str, cid: str, when: str, lines: int = 1) -> Path:
    """A conversation file as Gemini writes it: its header, then ``lines`` messages."""
    chats = home / ".gemini" / "tmp" / project / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    path = chats / f"session-{when}-{cid[:8]}.jsonl"
    head = {"sessionId": cid, "projectHash": "ab", "startTime": when, "kind": "main"}
    body = [{"id": f"m{i}", "type": "user", "content": [{"text": "hi"}]} for i in range(lines)]
    path.write_text("".join(json.dumps(r) + "\n" for r in [head, *body]))
    return path


def register(home: Path, cwd: Path, project: str) -> None:
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    registry = {"projects": {str(cwd): project}}
    (home / ".gemini" / "projects.json").write_text(json.dumps(registry))


def test_launch_chooses_the_id_and_the_id_flags_are_ours() -> None:
    launch = KIND.launch(["--model", "gemini-2.5-pro"])
    assert launch.argv[:2] == ["gemini", "--session-id"]
    assert launch.argv[3:] == ["--model", "gemini-2.5-pro"]
    assert launch.conversation_id == launch.argv[2] and uuid.UUID(launch.argv[2])
    for flag in ("--resume", "-r", "--session-id=x", "--session-file", "--delete-session"):
        with pytest.raises(InvalidRequest, match="set by jupyter_agents"):
            KIND.check_args([flag, "1"])
    assert KIND.check_args(["--approval-mode", "auto_edit"]) == ["--approval-mode", "auto_edit"]
    assert "gemini" in make_kinds(["bash"], {})


def test_resume_by_id_only_when_the_conversation_has_a_file(tmp_path: Path) -> None:
    home, cwd, cid = tmp_path / "home", tmp_path / "proj", str(uuid.uuid4())
    cwd.mkdir()
    env = {"HOME": str(home)}
    launch = KIND.resume(session(cwd, cid, home, ["-m", "x"]), env)
    assert launch.argv == ["gemini", "--session-id", cid, "-m", "x"]  # nothing to resume
    assert KIND.resume(session(cwd, cid, home), env, had_file=True).argv[1] == "--resume"
    register(home, cwd, "proj")
    # started, never prompted: its chat file holds the header only, and `--resume`
    # answers "No previous sessions found for this project" (exit 42): a new
    # conversation in its folder, with its launch args, said so
    stub = write_conversation(home, "proj", cid, "2026-12-05T15-16", lines=0)
    empty = KIND.resume(session(cwd, cid, home, ["-m", "x"]), env)
    assert empty.fresh and empty.empty and empty.argv[1] == "--session-id"
    assert empty.conversation_id != cid and empty.argv[3:] == ["-m", "x"]
    stub.unlink()
    write_conversation(home, "proj", cid, "2026-12-05T15-16")
    assert KIND.resume(session(cwd, cid, home), env).argv == ["gemini", "--resume", cid]
    fresh = KIND.resume(session(cwd, None, home), env)
    assert fresh.fresh and fresh.argv[1] == "--session-id" and fresh.argv[2] != cid


def test_the_conversation_file_is_the_largest_that_names_the_id(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    cwd.mkdir()
    register(home, cwd, "proj")
    cid = str(uuid.uuid4())
    twin = cid[:8] + str(uuid.uuid4())[8:]  # another id, the same first 8 characters
    first = write_conversation(home, "proj", cid, "2026-12-05T15-16", lines=5)
    stub = write_conversation(home, "proj", cid, "2026-12-05T15-20", lines=1)  # a resume's
    write_conversation(home, "proj", twin, "2026-12-05T15-30", lines=9)
    broken = first.with_name(f"session-2026-12-05T15-40-{cid[:8]}.jsonl")
    broken.write_text("not json\n" * 50)
    s = session(cwd, cid, home)
    assert KIND.conversation_file(s, cid) == first
    first.unlink()  # gone: the stub is what is left
    assert KIND.conversation_file(s, cid) == stub
    assert KIND.conversation_file(s, "../etc") is None
    # a folder Gemini does not know yet: found in any project folder all the same
    other = dataclasses.replace(s, cwd=str(tmp_path / "elsewhere"))
    assert KIND.conversation_file(other, cid) == stub
    assert KIND.conversation_file(dataclasses.replace(s, env={"HOME": "/nonexistent"}), cid) is None


def test_folder_conversations_are_one_per_id_newest_first(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    cwd.mkdir()
    assert KIND.folder_conversations(session(cwd, None, home)) == []  # no registry yet
    register(home, cwd, "proj")
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    paths = [
        write_conversation(home, "proj", old, "2026-12-05T10-00"),
        write_conversation(home, "proj", new, "2026-12-05T11-00"),
        write_conversation(home, "proj", old, "2026-12-05T12-00"),  # resumed later
    ]
    for age, path in zip((300, 200, 100), paths, strict=True):
        stamp = datetime.now(timezone.utc).timestamp() - age
        os.utime(path, (stamp, stamp))
    sub = home / ".gemini" / "tmp" / "proj" / "chats" / "session-2026-12-05T13-00-aaaaaaaa.jsonl"
    sub.write_text(json.dumps({"sessionId": str(uuid.uuid4()), "kind": "subagent"}) + "\n")
    found = KIND.folder_conversations(session(cwd, None, home))
    assert [c.conversation_id for c in found] == [old, new]


def test_usage_counts_each_message_once_by_its_id() -> None:
    tokens = {"input": 1500, "output": 30, "cached": 400, "thoughts": 0, "tool": 0}
    first = {"id": "m1", "type": "gemini", "content": "Writing", "tokens": tokens, "model": "x"}
    again = {**first, "toolCalls": [{"name": "run_shell_command", "args": {"command": "ls"}}]}
    reader = KIND.usage_reader(None)
    records = [reader.parse(json.dumps(r).encode()) for r in (first, again)]
    assert {r.key for r in records if r} == {"m1"}  # one message: the ledger keeps one
    assert records[0] is not None
    assert records[0].tokens == Tokens(input=1100, output=30, cache_creation=0, cache_read=400)
    assert reader.parse(b'{"type": "user", "content": "tokens"}') is None
    assert reader.parse(b'{"sessionId": "x", "kind": "main"}') is None
    with pytest.raises(BadRecord):
        reader.parse(b'{"type": "gemini", "tokens": [1, 2]}')
    with pytest.raises(BadRecord):
        reader.parse(b'{"type": "gemini", "tokens": {"input": -4}}')
    with pytest.raises(BadRecord):
        reader.parse(b'not json but "tokens"')
    assert KIND.reports_usage and KIND.prices == {}  # counted, not priced


def test_markdown_of_a_tool_turn() -> None:
    records: list[dict[str, Any]] = [
        {"sessionId": "x", "kind": "main"},
        {"$set": {"messages": []}},
        {"type": "user", "content": [{"text": "<session_context>\nsetup"}]},
        {"type": "user", "timestamp": "2026-12-05T15:17:12Z", "content": [{"text": "make it"}]},
        {"id": "m1", "type": "gemini", "content": "Writing"},
        {
            "id": "m1",
            "type": "gemini",
            "content": "Writing",
            "toolCalls": [{"name": "run_shell_command", "args": {"command": "touch a"}}],
        },
        {
            "type": "user",
            "content": [{"functionResponse": {"name": "x", "response": {"output": "done"}}}],
        },
        {"type": "info", "content": "Request cancelled."},
    ]
    text = "".join(part for r in records for part in KIND.markdown(r))
    assert "setup" not in text and "> make it" in text
    assert text.count("Writing") == 1 and "`touch a`" in text and "done" in text
    assert "*Request cancelled.*" in text


def test_the_hooks_file_adds_ours_to_the_admins_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = tmp_path / "etc" / "system-defaults.json"
    admin.parent.mkdir()
    theirs = {"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "audit"}]}
    admin.write_text(json.dumps({"ui": {"hideTips": True}, "hooks": {"BeforeTool": [theirs]}}))
    # read as Gemini reads it, were it root's (what the check looks at is tested below)
    monkeypatch.setattr(g, "accepted_as_system_file", lambda path: True)
    path = g.gemini_settings(tmp_path / "state", "s1", {g.SYSTEM_DEFAULTS_ENV: str(admin)})
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    settings = json.loads(path.read_text())
    assert settings["ui"] == {"hideTips": True}
    assert settings["hooks"]["BeforeTool"][0] == theirs  # the admin's run first
    assert set(settings["hooks"]) == set(g.GEMINI_EVENTS)
    ours = settings["hooks"]["BeforeTool"][1]["hooks"][0]
    assert "--as PreToolUse" in ours["command"] and ours["timeout"] == g.HOOK_TIMEOUT_MS
    assert "--as" not in settings["hooks"]["Notification"][0]["hooks"][0]["command"]
    # an admin file Gemini would skip (or none) is not carried over
    monkeypatch.setattr(g, "accepted_as_system_file", lambda path: False)
    path = g.gemini_settings(tmp_path / "state", "s1", {g.SYSTEM_DEFAULTS_ENV: str(admin)})
    assert "ui" not in json.loads(path.read_text())


def test_the_hooks_are_given_only_where_gemini_reads_them(tmp_path: Path) -> None:
    # under /tmp (anyone may write there) Gemini skips a system file: no variable, so
    # the administrator's own system defaults are not hidden either
    assert str(tmp_path).startswith("/tmp/")
    assert KIND.reporting_env(tmp_path / "state", "s1") == {}
    assert not g.accepted_as_system_file(tmp_path / "state" / "hooks" / "s1.gemini.json")
    assert g.system_defaults_path({}) == Path("/etc/gemini-cli/system-defaults.json")
    moved = {g.SYSTEM_SETTINGS_ENV: "/opt/site/gemini.json"}
    assert g.system_defaults_path(moved) == Path("/opt/site/system-defaults.json")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can own what Gemini reads")
def test_a_root_owned_state_dir_gets_the_hooks(tmp_path: Path) -> None:
    home = Path(os.path.expanduser("~root"))
    if not g.accepted_as_system_file(home / "x.json"):
        pytest.skip(f"{home} is not a folder Gemini trusts")
    state = Path(tempfile.mkdtemp(prefix=".jupyter-agents-test-", dir=home))
    try:
        env = KIND.reporting_env(state, "s1")
        assert env == {g.SYSTEM_DEFAULTS_ENV: str(state / "hooks" / "s1.gemini.json")}
        loose = state / "loose.json"
        loose.write_text("{}")
        loose.chmod(0o620)  # writable by its group: Gemini would skip it
        assert g.accepted_as_system_file(state / "hooks" / "s1.gemini.json")
        assert not g.accepted_as_system_file(loose)
        loose.chmod(0o600)
        assert g.accepted_as_system_file(loose)
    finally:
        shutil.rmtree(state)


def test_the_hook_records_gemini_events_as_ours(tmp_path: Path) -> None:
    """Each hook command as Gemini runs it (a shell, the payload on stdin), with
    payloads of Gemini 0.61: the states a tool turn with a dialog goes through."""
    hooks = g.gemini_hooks(tmp_path, "s1")
    cid = str(uuid.uuid4())
    payloads: list[tuple[str, dict[str, Any]]] = [
        ("SessionStart", {"source": "startup"}),
        ("BeforeAgent", {"prompt": "make the file"}),
        ("BeforeTool", {"tool_name": "run_shell_command", "tool_input": {"command": "x"}}),
        ("Notification", {"notification_type": "ToolPermission", "message": "Confirm"}),
        ("AfterTool", {"tool_name": "run_shell_command"}),
        ("AfterAgent", {"prompt": "make the file", "prompt_response": "Made-it"}),
    ]
    for event, extra in payloads:
        payload = {"session_id": cid, "hook_event_name": event, "cwd": str(tmp_path), **extra}
        command = hooks[event][0]["hooks"][0]["command"]
        done = subprocess.run(
            ["bash", "-c", command], input=json.dumps(payload), capture_output=True, text=True
        )
        assert done.returncode == 0 and done.stdout == "", done  # stdout must stay empty
    records, _ = read_spool(spool_path(tmp_path, "s1"), 0)
    assert [r["event"] for r in records] == [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "Notification",
        "PostToolUse",
        "Stop",
    ]
    assert {r["conversation"] for r in records} == {cid}
    states = []
    current = None
    for record in records:
        after = state_after(record, current)
        current = after[0] if after else current
        states.append(current)
    assert states == ["ready", "working", "working", "permission", "working", "waiting"]
