"""The Qwen Code kind as plain functions: no CLI, real files (the layouts Qwen Code 0.24.4
writes, seen in tests/test_real_qwen_turns.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path

import pytest
from test_agent_kinds import session as agent_session

from jupyter_agents.agents.kinds import BUILTIN, make_kinds
from jupyter_agents.agents.qwen import (
    SYSTEM_DEFAULTS_ENV,
    QwenKind,
    markdown,
    parse_usage,
    project_slug,
)
from jupyter_agents.agents.usage import BadRecord, Tokens
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session


def session(cwd: Path, cid: str | None, home: Path, args: list[str] | None = None) -> Session:
    """An interrupted qwen session in ``cwd`` whose HOME is ``home``."""
    made = agent_session("qwen", cwd, cid, args)
    made.env = {"HOME": str(home)}
    return made


def chats(home: Path, cwd: Path) -> Path:
    folder = home / ".qwen" / "projects" / project_slug(str(cwd.resolve())) / "chats"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_launch_chooses_the_id_and_refuses_flags_that_choose_one() -> None:
    kind = QwenKind(["qwen"])
    launch = kind.launch(["--model", "m"])
    assert launch.argv == ["qwen", "--session-id", launch.conversation_id, "--model", "m"]
    assert str(uuid.UUID(launch.conversation_id)) == launch.conversation_id
    for flag in (["--resume", "x"], ["-c"], ["--session-id=x"], ["-r", "x"], ["--continue"]):
        with pytest.raises(InvalidRequest, match="set by jupyter_agents"):
            kind.check_args(flag)
    assert kind.check_args(["--approval-mode", "default"]) == ["--approval-mode", "default"]
    assert QwenKind in BUILTIN and isinstance(make_kinds(["sh"], {})["qwen"], QwenKind)
    assert make_kinds(["sh"], {}, permission_wait=7)["qwen"].ask_wait == 7  # type: ignore[attr-defined]


def test_resume_by_transcript_and_the_folder_conversations(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "my project"
    cwd.mkdir()
    kind = QwenKind(["qwen"])
    cid = str(uuid.uuid4())
    s = session(cwd, cid, home, ["--yolo"])
    env = {"HOME": str(home)}
    # no prompt was ever sent: no transcript, the id is started again
    assert kind.resume(s, env).argv == ["qwen", "--session-id", cid, "--yolo"]
    # the archive saw its file (gone now): resumed by id, Qwen says why it cannot
    assert kind.resume(s, env, had_file=True).argv == ["qwen", "--resume", cid, "--yolo"]
    transcript = chats(home, cwd) / f"{cid}.jsonl"
    transcript.write_text('{"type": "system", "subtype": "ui_telemetry"}\n')
    empty = kind.resume(s, env)  # written, no message in it: nothing to resume
    assert empty.fresh and empty.empty and empty.argv[1] == "--session-id"
    assert empty.conversation_id != cid and empty.argv[3:] == ["--yolo"]
    with transcript.open("a") as f:
        f.write('{"type": "user", "message": {"parts": [{"text": "hi"}]}}\n')
    assert kind.resume(s, env).argv[1:3] == ["--resume", cid]
    assert kind.conversation_file(s, cid) == transcript
    assert kind.conversation_file(s, "../x") is None
    (transcript.parent / "not-an-id.jsonl").write_text("{}\n")
    assert [c.conversation_id for c in kind.folder_conversations(s)] == [cid]
    # unknown id: a new conversation, never "the most recent one"
    fresh = kind.resume(dataclasses.replace(s, conversation_id=None), env)
    assert fresh.fresh and fresh.argv[1] == "--session-id" and fresh.conversation_id != cid


def test_discover_follows_the_per_pid_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sessions = home / ".qwen" / "sessions"
    sessions.mkdir(parents=True)
    kind = QwenKind(["qwen"])
    s = session(tmp_path, None, home)
    env = {"HOME": str(home)}
    new = str(uuid.uuid4())
    (sessions / "41.json").write_text(json.dumps({"pid": 41, "sessionId": new}))
    (sessions / "42.json").write_text(json.dumps({"pid": 99, "sessionId": new}))  # not its pid
    (sessions / "43.json").write_text("not json")
    assert kind.discover(s, [40, 43, 42, 41], env, set()) == new
    assert kind.discover(s, [42, 43], env, set()) is None


def test_reporting_env_adds_our_hooks_to_the_admins_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = tmp_path / "system-defaults.json"
    theirs = {"type": "command", "command": "audit"}
    admin.write_text(json.dumps({"ui": {"theme": "x"}, "hooks": {"Stop": [{"hooks": [theirs]}]}}))
    monkeypatch.setenv(SYSTEM_DEFAULTS_ENV, str(admin))
    kind = QwenKind(["qwen"])
    env = kind.reporting_env(tmp_path / "state", "sess1")
    path = Path(env[SYSTEM_DEFAULTS_ENV])
    assert path != admin and path.stat().st_mode & 0o777 == 0o600
    content = json.loads(path.read_text())
    assert content["ui"] == {"theme": "x"}
    stop = content["hooks"]["Stop"]
    assert stop[0]["hooks"] == [theirs] and "jupyter_agents.hook" in stop[1]["hooks"][0]["command"]
    ask = content["hooks"]["PermissionRequest"][0]["hooks"][0]
    assert "--ask" in ask["command"] and "dialog" in ask["command"]
    assert ask["timeout"] == int(kind.ask_wait) + 30
    failure = content["hooks"]["PostToolUseFailure"][0]["hooks"][0]["command"]
    assert "--as PostToolUse" in failure
    assert json.loads(admin.read_text())["hooks"]["Stop"] == [{"hooks": [theirs]}]  # untouched

    admin.write_text("{not json")  # unreadable: ours alone, the session still starts
    content = json.loads(
        Path(kind.reporting_env(tmp_path / "state", "s2")[SYSTEM_DEFAULTS_ENV]).read_text()
    )
    assert set(content) == {"hooks"} and len(content["hooks"]["Stop"]) == 1


def test_usage_and_bad_records() -> None:
    line = json.dumps(
        {
            "uuid": "u1",
            "type": "assistant",
            "model": "qwen-scripted",
            "usageMetadata": {
                "promptTokenCount": 3124,
                "candidatesTokenCount": 40,
                "thoughtsTokenCount": 0,
                "totalTokenCount": 3164,
                "cachedContentTokenCount": 1024,
            },
        }
    ).encode()
    record = parse_usage(line)
    assert record is not None and record.key == "u1"
    assert record.tokens == Tokens(input=2100, output=40, cache_creation=0, cache_read=1024)
    telemetry = b'{"type": "system", "subtype": "ui_telemetry", "usageMetadata": {}}'
    assert parse_usage(telemetry) is None
    for bad in (
        b'{"type": "assistant", "usageMetadata": "x"}',
        b'{"type": "assistant", "usageMetadata": {"promptTokenCount": -1}}',
        b'{"type": "assistant", "usageMetadata": {"promptTokenCount": 1, '
        b'"cachedContentTokenCount": 2}}',
        b'{"usageMetadata": not json',
    ):
        with pytest.raises(BadRecord):
            parse_usage(bad)


def test_markdown_of_a_tool_turn() -> None:
    call = {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}
    reply = {"type": "assistant", "message": {"role": "model", "parts": [{"text": "Hi"}, call]}}
    result = {
        "type": "tool_result",
        "message": {"parts": [{"functionResponse": {"response": {"output": "a.txt"}}}]},
    }
    prompt = {"type": "user", "message": {"parts": [{"text": "list"}]}}
    text = "".join(part for r in (prompt, reply, result) for part in markdown(r))
    assert "> list" in text and "`run_shell_command`: `ls`" in text and "`a.txt`" in text
    assert list(markdown({"type": "system", "subtype": "ui_telemetry"})) == []
    assert list(markdown({"type": "assistant", "message": "x"})) == []


def _node(root: Path, major: int) -> Path:
    install = root / f"node{major}"
    (install / "bin").mkdir(parents=True)
    (install / "include" / "node").mkdir(parents=True)
    (install / "include" / "node" / "node_version.h").write_text(
        f"#define NODE_MAJOR_VERSION {major}\n"
    )
    node = install / "bin" / "node"
    node.write_text("#!/bin/sh\n")
    node.chmod(0o755)
    return install / "bin"


def test_unavailable_says_when_the_node_on_path_is_too_old(tmp_path: Path) -> None:
    cli = tmp_path / "cli"
    cli.mkdir()
    qwen = cli / "qwen"
    qwen.write_text("#!/usr/bin/env node\n")
    qwen.chmod(0o755)
    kind = QwenKind(["qwen"])
    old, new = _node(tmp_path, 20), _node(tmp_path, 22)
    why = kind.unavailable(os.pathsep.join([str(cli), str(old)]))
    assert why is not None and "Node.js 22" in why and "version 20" in why
    assert kind.unavailable(os.pathsep.join([str(cli), str(new), str(old)])) is None
    assert kind.unavailable(str(cli)) is None  # no node known: not claimed
    assert "not found" in (kind.unavailable(str(old)) or "")
