"""The GitHub Copilot CLI kind without the CLI: its argv, its hooks plugin folder (run by
a real bash, as Copilot runs it), its usage records, folder conversations, Markdown and
bad input. The real CLI is in tests/test_real_copilot_turns.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_agent_kinds import session

from jupyter_agents.agents.copilot import (
    COPILOT_EVENTS,
    SPOOL_ENV,
    CopilotKind,
    CopilotUsage,
    markdown,
    parse_usage,
)
from jupyter_agents.agents.kinds import BUILTIN, make_kinds
from jupyter_agents.agents.permissions import Answer, RequestFolder
from jupyter_agents.agents.spool import read_spool, spool_path
from jupyter_agents.agents.usage import BadRecord, Tokens
from jupyter_agents.core.errors import InvalidRequest

CID = "0b7b2d3c-54a4-4e43-9a4e-6f1a1f0f2c11"


def usage_line(**usage: object) -> bytes:
    record = {
        "type": "session.usage_record",
        "timestamp": "2026-12-05T15:15:23.532Z",
        "data": {"usage": usage},
    }
    return json.dumps(record).encode()


def events(home: Path, cid: str, cwd: str, *more: dict[str, object]) -> Path:
    folder = home / ".copilot" / "session-state" / cid
    folder.mkdir(parents=True)
    start = {"type": "session.start", "data": {"sessionId": cid, "context": {"cwd": cwd}}}
    path = folder / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in (start, *more)))
    return path


def test_it_is_built_in_and_offered() -> None:
    kinds = make_kinds(["bash"], {})
    assert CopilotKind in BUILTIN and isinstance(kinds["copilot"], CopilotKind)
    described = kinds["copilot"].describe(path="/nonexistent")
    assert described["label"] == "GitHub Copilot CLI" and described["available"] is False
    assert "npm install -g @github/copilot" in described["unavailable"]


def test_launch_chooses_the_id_and_resume_keeps_it(tmp_path: Path) -> None:
    kind = CopilotKind(["copilot"])
    launch = kind.launch(["--model", "gpt-5.4"])
    assert launch.argv == ["copilot", "--session-id", launch.conversation_id, "--model", "gpt-5.4"]
    assert str(uuid.UUID(launch.conversation_id or "")) == launch.conversation_id

    env = {"HOME": str(tmp_path)}
    said_nothing = session("copilot", tmp_path, CID, ["--model", "x"])
    said_nothing.env = env
    # no events.jsonl: nothing to resume yet, the same id again
    assert kind.resume(said_nothing, env).argv == ["copilot", "--session-id", CID, "--model", "x"]
    # the archive saw its file: resumed by id, so Copilot says why if it cannot
    assert kind.resume(said_nothing, env, had_file=True).argv[1] == f"--resume={CID}"
    started = events(tmp_path, CID, str(tmp_path))  # started, no message in it
    empty = kind.resume(said_nothing, env)
    assert empty.fresh and empty.empty and empty.argv[1] == "--session-id"
    assert empty.conversation_id != CID and empty.argv[3:] == ["--model", "x"]
    with started.open("a") as f:
        f.write(json.dumps({"type": "user.message", "data": {"content": "hi"}}) + "\n")
    resumed = kind.resume(said_nothing, env)
    assert resumed.argv[:2] == ["copilot", f"--resume={CID}"] and resumed.conversation_id == CID
    unknown = kind.resume(session("copilot", tmp_path, None), env)
    assert unknown.fresh and unknown.argv[1] == "--session-id" and unknown.conversation_id != CID


def test_resume_clears_the_locks_of_processes_that_are_gone(tmp_path: Path) -> None:
    """A lock whose pid runs nothing, or runs a process that started after the lock was
    written (a pid reused after a reboot), goes before Copilot resumes; the lock of a
    process that may still hold the conversation stays (Copilot then asks)."""
    kind = CopilotKind(["copilot"])
    env = {"HOME": str(tmp_path)}
    said = {"type": "user.message", "data": {"content": "hi"}}
    folder = events(tmp_path, CID, str(tmp_path), said).parent
    long_ago = time.time() - 3600

    def lock(pid: int, written: float) -> Path:
        path = folder / f"inuse.{pid}.lock"
        path.write_text(str(pid))
        os.utime(path, (written, written))
        return path

    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = lock(dead.pid, long_ago)
    with subprocess.Popen(["sleep", "30"]) as newer:  # started after its lock was written
        try:
            reused = lock(newer.pid, long_ago)
            holder = lock(os.getpid(), time.time())  # this process may hold it
            unread = folder / "inuse.x.lock"  # not a lock of Copilot's shape: left alone
            unread.write_text("")
            said_nothing = session("copilot", tmp_path, CID)
            assert kind.resume(said_nothing, env).argv[1] == f"--resume={CID}"
            assert not gone.exists() and not reused.exists()
            assert holder.exists() and unread.exists()
            assert (folder / "events.jsonl").exists()
        finally:
            newer.kill()


@pytest.mark.parametrize(
    "arg", ["--resume", "--resume=abc", "-r", "--continue", "--session-id", "--config-dir"]
)
def test_flags_that_choose_the_conversation_are_refused(arg: str) -> None:
    with pytest.raises(InvalidRequest):
        CopilotKind(["copilot"]).check_args([arg])
    assert CopilotKind(["copilot"]).check_args(["--model", "gpt-5.4"]) == ["--model", "gpt-5.4"]


def test_hooks_come_from_one_plugin_folder_and_each_session_its_spool(tmp_path: Path) -> None:
    kind = CopilotKind(["/opt/bin/copilot"])
    state = tmp_path / "state"
    argv = kind.with_reporting(["/opt/bin/copilot", "--resume=x", "-i", "hi"], state, "s1")
    assert argv[:3] == ["/opt/bin/copilot", "--plugin-dir", argv[2]]
    assert argv[3:] == ["--resume=x", "-i", "hi"]
    folder = Path(argv[2])
    assert kind.with_reporting(["/opt/bin/copilot"], state, "s2")[2] == str(folder)
    manifest = json.loads((folder / "plugin.json").read_text())
    hooks = json.loads((folder / "hooks" / "hooks.json").read_text())
    assert manifest["name"] == "jupyter-agents-attention" and hooks["version"] == 1
    assert set(hooks["hooks"]) == set(COPILOT_EVENTS)
    assert kind.reporting_env(state, "s1") == {SPOOL_ENV: str(spool_path(state, "s1"))}
    assert not (state / "hooks" / "copilot-plugin").stat().st_mode & 0o077


@pytest.mark.parametrize(
    ("event", "payload", "recorded"),
    [
        ("agentStop", {"stopReason": "end_turn", "transcriptPath": "/x"}, "Stop"),
        ("permissionRequest", {"toolName": "bash", "toolInput": {}}, "PermissionRequest"),
        ("userPromptSubmitted", {"prompt": "secret words"}, "UserPromptSubmit"),
        ("postToolUseFailure", {"toolName": "bash", "error": "no"}, "PostToolUse"),
    ],
)
def test_a_hook_run_as_copilot_runs_it_spools_its_event(
    tmp_path: Path, event: str, payload: dict[str, object], recorded: str
) -> None:
    """Copilot runs the ``bash`` of a hook with the payload on stdin (no event name in
    it) and its own environment, where our spool variable is set."""
    kind = CopilotKind(["copilot"])
    kind.ask_wait = 0  # the permission hook only reports
    state = tmp_path / "state"
    folder = Path(kind.with_reporting(["copilot"], state, "s7")[2])
    (handler,) = json.loads((folder / "hooks" / "hooks.json").read_text())["hooks"][event]
    env = {**os.environ, **kind.reporting_env(state, "s7"), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        ["bash", "-c", handler["bash"]],
        input=json.dumps({"sessionId": CID, "cwd": str(tmp_path), **payload}),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "", done
    (record,), _ = read_spool(spool_path(state, "s7"), 0)
    assert record["event"] == recorded
    assert "secret words" not in json.dumps(record)


@pytest.mark.parametrize("made_by", ["this version", "a version before --answer"])
def test_a_permission_request_answered_elsewhere_is_printed_as_copilot_reads_it(
    tmp_path: Path, made_by: str
) -> None:
    """The kind's hook says how Copilot reads the decision (``--answer copilot``); a
    hook written for a session started before that option, which a live Copilot
    process still runs, gets the same answer from the payload's ``hookName``."""
    kind = CopilotKind(["copilot"])
    kind.ask_wait = 60
    state = tmp_path / "state"
    folder = Path(kind.with_reporting(["copilot"], state, "s8")[2])
    (handler,) = json.loads((folder / "hooks" / "hooks.json").read_text())["hooks"][
        "permissionRequest"
    ]
    assert handler["timeoutSec"] > 60
    assert " --answer copilot " in handler["bash"]
    if made_by != "this version":
        handler["bash"] = handler["bash"].replace(" --answer copilot ", " ")
    env = {**os.environ, **kind.reporting_env(state, "s8"), "PYTHONPATH": os.pathsep.join(sys.path)}
    payload = {
        "hookName": "permissionRequest",
        "sessionId": CID,
        "toolName": "bash",
        "toolInput": {"command": "echo hi > made.txt"},
        "permissionSuggestions": [],
    }
    with subprocess.Popen(
        ["bash", "-c", handler["bash"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        text=True,
    ) as hook:
        assert hook.stdin is not None
        hook.stdin.write(json.dumps(payload))
        hook.stdin.close()
        requests = RequestFolder(state)
        deadline = time.monotonic() + 30
        while not (pending := requests.pending(["s8"])) and time.monotonic() < deadline:
            time.sleep(0.1)
        (request,) = pending
        assert request.tool == "bash" and request.summary == {"command": "echo hi > made.txt"}
        assert request.conversation == CID
        requests.answer(request.id, Answer("deny", time.time(), message="Not today"))
        assert hook.stdout is not None
        out = hook.stdout.read()
        assert hook.wait(timeout=30) == 0
    assert json.loads(out) == {"behavior": "deny", "message": "Not today"}


def test_usage_input_excludes_what_was_read_from_or_written_to_a_cache() -> None:
    line = usage_line(
        model="claude-sonnet-4.5",
        inputTokens=1000,
        outputTokens=20,
        cacheReadTokens=600,
        cacheWriteTokens=100,
        cost=1.0,
        apiCallId="msg_1",
        accounting={"usageId": "u1"},
    )
    record = parse_usage(line)
    assert record is not None
    assert record.key == "u1" and record.model == "claude-sonnet-4.5"
    assert record.tokens == Tokens(input=300, output=20, cache_creation=100, cache_read=600)
    assert parse_usage(usage_line(inputTokens=0, outputTokens=0)) is None
    assert parse_usage(b'{"type": "assistant.message", "data": {"content": "usage"}}') is None
    assert CopilotUsage().dump() is None


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "session.usage_record", "data": {"usage": ',  # cut short
        b'{"type": "session.usage_record", "data": {"usage": "many"}}',
        b'["session.usage_record"]',
        usage_line(inputTokens=-1),
        usage_line(inputTokens="12"),
    ],
)
def test_a_bad_usage_record_is_a_bad_record(line: bytes) -> None:
    with pytest.raises(BadRecord):
        parse_usage(line)


def test_folder_conversations_and_the_conversation_file(tmp_path: Path) -> None:
    kind = CopilotKind(["copilot"])
    project = tmp_path / "proj"
    mine = str(uuid.uuid4())
    older = str(uuid.uuid4())
    elsewhere = str(uuid.uuid4())
    path = events(tmp_path, mine, str(project))
    os.utime(events(tmp_path, older, str(project)), (1, 1))
    events(tmp_path, elsewhere, str(tmp_path / "other"))
    broken = tmp_path / ".copilot" / "session-state" / str(uuid.uuid4())
    broken.mkdir()
    (broken / "events.jsonl").write_bytes(b"\x00not json")
    s = session("copilot", project, mine)
    s.env = {"HOME": str(tmp_path)}
    assert [c.conversation_id for c in kind.folder_conversations(s)] == [mine, older]
    assert kind.conversation_file(s, mine) == path
    assert kind.conversation_file(s, "../../etc") is None
    assert kind.conversation_file(s, str(uuid.uuid4())) is None
    s.env = {"HOME": str(tmp_path / "nobody"), "COPILOT_HOME": str(tmp_path / ".copilot")}
    assert kind.conversation_file(s, mine) == path


def test_markdown_of_a_turn_with_a_tool() -> None:
    records: list[dict[str, Any]] = [
        {"type": "session.start", "data": {"sessionId": CID, "context": {"cwd": "/p"}}},
        {"type": "user.message", "data": {"content": "write a file"}},
        {
            "type": "assistant.message",
            "data": {
                "content": "Writing.",
                "toolRequests": [{"name": "bash", "arguments": {"command": "echo hi > f"}}],
            },
        },
        {"type": "tool.execution_complete", "data": {"success": True, "result": {"content": "ok"}}},
        {"type": "session.usage_record", "data": {"usage": {"inputTokens": 5}}},
        {"type": "assistant.message", "data": "not an object"},
    ]
    text = "".join(part for record in records for part in markdown(record))
    assert CID in text and "write a file" in text and "Writing." in text
    assert "echo hi > f" in text and "ok" in text
    assert "inputTokens" not in text
