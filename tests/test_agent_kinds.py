"""Agent kinds and restore helpers as plain functions: no server, real files."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jupyter_agents.agents.base import validate_args
from jupyter_agents.agents.claude import ClaudeKind, project_slug
from jupyter_agents.agents.codex import CodexKind
from jupyter_agents.agents.kinds import make_kinds
from jupyter_agents.core.errors import InvalidRequest, OutOfRange
from jupyter_agents.core.records import Session
from jupyter_agents.server.params import wanted
from jupyter_agents.sessions.restore import prelude, prelude_argv, sanitize_tail
from jupyter_agents.terminal.transcripts import MAX_CHUNK as MAX_LOG_CHUNK
from jupyter_agents.terminal.transcripts import window


def session(kind: str, cwd: Path, cid: str | None, args: list[str] | None = None) -> Session:
    return Session(
        id="s1",
        name="1",
        status="interrupted",
        backend="tmux",
        kind=kind,
        cwd=str(cwd),
        conversation_id=cid,
        args=args or [],
        pid_created=datetime.now(timezone.utc).timestamp(),
    )


def test_claude_resume_argv_follows_the_transcript(tmp_path):
    env = {"HOME": str(tmp_path)}
    cwd = tmp_path / "work dir"
    cwd.mkdir()
    cid = str(uuid.uuid4())
    kind = ClaudeKind(["claude"])
    # no message was ever sent: no transcript, so the id is started again
    launch = kind.resume(session("claude", cwd, cid, ["--model", "opus"]), env)
    assert launch.argv == ["claude", "--session-id", cid, "--model", "opus"]
    assert not launch.ambiguous
    transcript = tmp_path / ".claude" / "projects" / project_slug(str(cwd)) / f"{cid}.jsonl"
    transcript.parent.mkdir(parents=True)
    # written, but no message in it (Claude Code writes its title and mode first):
    # `--resume` would say "No conversation found"; a new conversation, said so
    heads = [{"type": "ai-title", "title": "x"}, {"type": "permission-mode", "mode": "default"}]
    transcript.write_text("".join(json.dumps(h) + "\n" for h in heads))
    empty = kind.resume(session("claude", cwd, cid, ["--model", "opus"]), env)
    assert (empty.fresh, empty.empty) == (True, True), empty
    assert empty.argv[:2] == ["claude", "--session-id"] and empty.conversation_id != cid
    assert empty.argv[3:] == ["--model", "opus"]  # its launch args, in its folder
    with transcript.open("a") as f:
        f.write(json.dumps({"type": "user", "message": {"content": "hi"}}) + "\n")
    assert kind.resume(session("claude", cwd, cid), env).argv == ["claude", "--resume", cid]
    # unknown id: a new conversation, never "the most recent" (it may be another's)
    launch = kind.resume(session("claude", cwd, None), env)
    assert launch.argv[:2] == ["claude", "--session-id"] and launch.argv[2] != cid
    assert (launch.conversation_id, launch.fresh, launch.ambiguous) == (launch.argv[2], True, False)
    unknown = dataclasses.replace(session("claude", cwd, None), env=env)
    assert [c.conversation_id for c in kind.folder_conversations(unknown)] == [cid]


def test_claude_respects_config_dir_and_finds_moved_transcripts(tmp_path):
    cid = str(uuid.uuid4())
    config = tmp_path / "cfg"
    (config / "projects" / "-elsewhere").mkdir(parents=True)
    (config / "projects" / "-elsewhere" / f"{cid}.jsonl").write_text('{"type": "user"}\n')
    env = {"HOME": str(tmp_path / "nohome"), "CLAUDE_CONFIG_DIR": str(config)}
    kind = ClaudeKind(["claude"])
    assert kind.resume(session("claude", tmp_path, cid), env).argv[1] == "--resume"
    assert kind.resume(session("claude", tmp_path, cid), {}).argv[1] == "--session-id"


def test_claude_follows_its_pid_map_only(tmp_path):
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path)}
    (tmp_path / "sessions").mkdir()
    cid, other = str(uuid.uuid4()), str(uuid.uuid4())
    (tmp_path / "sessions" / "4242.json").write_text(json.dumps({"pid": 4242, "sessionId": cid}))
    (tmp_path / "sessions" / "777.json").write_text(json.dumps({"pid": 1, "sessionId": other}))
    kind = ClaudeKind(["claude"])
    s = session("claude", tmp_path, None)
    assert kind.discover(s, [99, 4242], env, set()) == cid
    assert kind.discover(s, [777], env, set()) is None  # the file does not name pid 777
    # a newer transcript in the folder is never taken for the id
    (tmp_path / "projects" / "x").mkdir(parents=True)
    (tmp_path / "projects" / "x" / f"{other}.jsonl").write_text("{}\n")
    assert kind.discover(s, [99], env, set()) is None


def test_claude_slug_of_long_paths():
    path = "/" + "a" * 250
    slug = project_slug(path)
    assert slug.startswith("-" + "a" * 199 + "-")
    assert len(slug) > 201 and slug[201:].isalnum()
    assert project_slug("/tmp/x.y_z") == "-tmp-x-y-z"


def write_rollout(home: Path, cid: str, cwd: str, when: datetime) -> Path:
    folder = home / "sessions" / when.strftime("%Y/%m/%d")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-{when.strftime('%Y-%m-%dT%H-%M-%S')}-{cid}.jsonl"
    meta = {"id": cid, "cwd": cwd, "timestamp": when.isoformat()}
    path.write_text(json.dumps({"type": "session_meta", "payload": meta}) + "\n")
    return path


def test_codex_id_from_rollouts_never_guesses(tmp_path):
    home = tmp_path / "codex"
    env = {"CODEX_HOME": str(home)}
    kind = CodexKind(["codex"])
    s = session("codex", tmp_path, None)
    started = datetime.fromtimestamp(s.pid_created or 0, timezone.utc)
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    write_rollout(home, mine, str(tmp_path), started)
    write_rollout(home, str(uuid.uuid4()), "/other/cwd", started)
    write_rollout(home, str(uuid.uuid4()), str(tmp_path), started.replace(year=2020))
    assert kind.discover(s, [], env, set()) == mine
    # two candidates: ambiguous, no id... unless the other one is held by another session
    write_rollout(home, theirs, str(tmp_path), started)
    assert kind.discover(s, [], env, set()) is None
    assert kind.discover(s, [], env, {theirs}) == mine


def test_codex_resume_argv():
    cid = str(uuid.uuid4())
    kind = CodexKind(["codex"])
    assert kind.resume(session("codex", Path("/"), cid, ["-m", "o3"]), {}).argv == [
        "codex", "resume", cid, "-m", "o3",
    ]  # fmt: skip
    launch = kind.resume(session("codex", Path("/"), None), {})
    assert (launch.argv, launch.fresh, launch.ambiguous) == (["codex"], True, False)


def test_configured_kinds(tmp_path):
    kinds = make_kinds(
        ["bash"],
        {
            "claude": {"command": ["/opt/claude"]},
            "mycli": {
                "command": ["mycli", "--id", "{conversation_id}"],
                "resume": ["mycli", "--resume", "{conversation_id}"],
                "id": "assign",
            },
        },
    )
    assert kinds["claude"].launch([]).argv[0] == "/opt/claude"
    launch = kinds["mycli"].launch(["-v"])
    assert launch.argv == ["mycli", "--id", launch.conversation_id, "-v"]
    s = session("mycli", tmp_path, launch.conversation_id, ["-v"])
    assert kinds["mycli"].resume(s, {}).argv == ["mycli", "--resume", launch.conversation_id, "-v"]
    for bad in (
        {"shell": {"command": ["zsh"]}},
        {"x y": {"command": ["a"]}},
        {"a": {"command": "a b"}},
        {"a": {"command": []}},
        {"a": {"command": ["a"], "id": "guess"}},
        {"a": {"command": ["a"], "id": "assign"}},
        {"a": {"command": ["a", "{conversation_id}"]}},
        {"claude": {"command": ["c"], "resume": ["c"]}},
        {"a": {"command": ["a"], "extra": 1}},
    ):
        with pytest.raises(ValueError, match="agent kind"):
            make_kinds(["bash"], bad)


def test_an_acp_agent_of_its_own_or_the_cli_with_acp_args(tmp_path):
    """Claude's and Codex's ACP agents are adapters, programs of their own; Gemini's is
    its CLI with ``--acp``; configuration says where either is, and a kind whose ACP
    program is missing says so and how to install it (its terminal mode unaffected)."""
    kinds = make_kinds(
        ["bash"],
        {
            "codex": {"acp_command": ["/opt/acp/codex-acp", "-v"]},
            "myacp": {"command": ["myacp"], "acp_command": ["myacp-adapter"]},
            "otheracp": {"command": ["other"], "acp": ["--stdio"]},
        },
    )
    assert kinds["claude"].acp_launch(["x"]) == ["claude-agent-acp", "x"]
    assert kinds["codex"].acp_launch([]) == ["/opt/acp/codex-acp", "-v"]
    assert kinds["codex"].command == ["codex"]
    assert kinds["gemini"].acp_launch([]) == ["gemini", "--acp"]
    assert kinds["myacp"].acp_launch([]) == ["myacp-adapter"]
    assert kinds["otheracp"].acp_launch([]) == ["other", "--stdio"]
    with pytest.raises(InvalidRequest, match="no ACP mode"):
        kinds["shell"].acp_launch([])
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "claude").write_text("#!/bin/sh\n")
    (bin_ / "claude").chmod(0o755)
    claude = kinds["claude"].describe(str(bin_))
    assert claude["available"] and claude["modes"] == ["terminal", "acp"]
    assert claude["acp_command"] == ["claude-agent-acp"]
    assert claude["acp_unavailable"] == (
        "claude-agent-acp was not found on PATH; install it: "
        "npm install -g @agentclientprotocol/claude-agent-acp"
    )
    (bin_ / "claude-agent-acp").write_text("#!/bin/sh\n")
    (bin_ / "claude-agent-acp").chmod(0o755)
    assert kinds["claude"].unavailable(str(bin_), "acp") is None
    assert "acp_unavailable" not in kinds["claude"].describe(str(bin_))
    assert kinds["shell"].describe(str(bin_))["modes"] == ["terminal"]
    for bad in (
        {"claude": {"acp_command": []}},
        {"claude": {"acp_command": "claude-agent-acp"}},
        {"claude": {"acp": ["--acp"]}},
        {"a": {"command": ["a"], "acp": [], "acp_command": ["b"]}},
    ):
        with pytest.raises(ValueError, match="agent kind"):
            make_kinds(["bash"], bad)


@pytest.mark.parametrize(
    "args",
    [
        "--model opus",
        ["a;b"],
        ["x | y"],
        ["$(id)"],
        ["${HOME}"],
        ["`id`"],
        ["a && b"],
        ["> out"],
        ["run &"],
        ["a\nb"],
        ["\x1b[31m"],
        ["x"] * 65,
        ["y" * 5000],
        [None],
    ],
)
def test_args_that_are_not_argv_are_refused(args):
    with pytest.raises(InvalidRequest):
        validate_args(args)


def test_plain_args_pass():
    assert validate_args(["--model", "opus", "fix the bug in a.py, then test", "-p"]) == [
        "--model", "opus", "fix the bug in a.py, then test", "-p",
    ]  # fmt: skip
    assert validate_args(None) == []


def test_sanitized_tail_has_no_queries_or_mode_switches():
    raw = b"x" * 100 + b"\nkeep me\x1b[6n\x1b[c\x1b]10;?\x07\x1b[?1049h\x1b[?1000h\x1bc more\x1b[3"
    tail = sanitize_tail(raw, 60)
    body = tail.split(b"\x1b[0m")[0]
    assert body == b"keep me more"
    assert sanitize_tail(b"", 10) == b""


def test_prelude_runs_before_the_program_without_a_shell_parsing_either(tmp_path):
    odd = tmp_path / "pre $(touch pwned) 'q'"
    odd.write_bytes(prelude(b"old line 1\r\nold line 2\r\n", "--- restored shell session s1 ---"))
    argv = prelude_argv(odd, ["printf", "%s|", "new $(run)", "`x`"])
    out = subprocess.run(argv, capture_output=True, cwd=tmp_path, check=True).stdout
    assert out.index(b"old line 2") < out.index(b"--- restored") < out.index(b"new $(run)|`x`|")
    assert not odd.exists()  # read once, then deleted
    assert not (tmp_path / "pwned").exists()


def test_log_window():
    def log_window(first, size, offset, length, header):  # as GET .../log reads it
        want = wanted(offset, length, header)
        return (*window(first, size, want), want.partial)

    assert log_window(0, 10, "10", None, None) == (10, 0, False)
    assert log_window(0, 10, None, None, "bytes=2-4") == (2, 3, True)
    assert log_window(0, 10 * MAX_LOG_CHUNK, None, None, None) == (0, MAX_LOG_CHUNK, False)
    assert log_window(5, 10, None, "3", None) == (5, 3, False)  # from the first kept byte
    with pytest.raises(OutOfRange):
        log_window(0, 10, "11", None, None)
    for offset, length, header in (("-1", None, None), ("1.5", None, None), (None, "x", None)):
        with pytest.raises(InvalidRequest):
            log_window(0, 10, offset, length, header)
    with pytest.raises(InvalidRequest):
        log_window(0, 10, None, None, "bytes=-")
