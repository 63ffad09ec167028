"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``, pinned by ``.ci/run`` into
``/opt/jupyter-agents-cli``) through our API, offline (DESIGN.md section 10): with
``~/.claude.json`` saying onboarding is done and the project is trusted, and no API key,
it reaches its prompt, and a prompt ends in ``StopFailure`` ``authentication_failed``.
So what the fakes model is checked against the real thing: our hooks fire, the
conversation id is SessionStart's, ``/clear`` is followed, the user's own hooks still
fire. Skipped, with the reason, where the CLI is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.pytest_plugin import ServerProcess, TermClient, poll

#: the version .ci/run installs
CLAUDE_VERSION = "2.1.197"
CLAUDE = Path(os.environ.get("JUPYTER_AGENTS_REAL_CLAUDE", "/opt/jupyter-agents-cli/bin/claude"))


def installed() -> str | None:
    """Why the real CLI cannot be used here, or None."""
    if not os.access(CLAUDE, os.X_OK):
        return f"real Claude Code not installed at {CLAUDE} (.ci/run installs it)"
    try:
        out = subprocess.run(
            [str(CLAUDE), "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{CLAUDE} --version failed: {e}"
    if "Claude Code" not in out:
        return f"{CLAUDE} is not Claude Code: {out.strip()[:80]!r}"
    return None


_MISSING = installed()
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(300),  # generous polls: a cold start of the real CLI can be slow
    pytest.mark.skipif(_MISSING is not None, reason=_MISSING or ""),
]

#: credentials or settings of the machine that would change what the CLI does offline
_SCRUB = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
)


def model(server: ServerProcess, session_id: str) -> dict[str, Any]:
    status, body = server.request("GET", f"/api/agents/sessions/{session_id}")
    assert status == 200, body
    return dict(body)


def spooled(server: ServerProcess, session_id: str) -> list[dict[str, Any]]:
    path = server.state_dir / "spool" / f"{session_id}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def user_hook_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def type_into(client: TermClient, text: str) -> None:
    """Type like a person: the text, a pause (the TUI treats a burst as a paste and
    slash commands open a menu first), then Enter."""
    client.stdin(text)
    time.sleep(1)
    client.stdin("\r")


def test_real_claude_through_our_api(agents_server, tmp_path, monkeypatch):
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    project = tmp_path / "proj"
    project.mkdir()
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "projects": {os.path.realpath(project): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    # the user's own hook: it must keep firing next to ours
    user_log = tmp_path / "user-hook.jsonl"
    user_hook = f"cat >> '{user_log}'; echo >> '{user_log}'"
    (home / ".claude" / "settings.json").write_text(
        json.dumps(
            {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": user_hook}]}]}}
        )
    )
    env = {
        "HOME": str(home),
        "PATH": f"{CLAUDE.parent}{os.pathsep}{os.environ['PATH']}",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    server = agents_server(env=env)
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(project)}
    )
    assert status == 201, agent
    sid, first = agent["id"], agent["conversation_id"]
    try:
        # SessionStart: through our hook (spool -> model) and the user's own
        started = poll(lambda: user_hook_runs(user_log), timeout=90, what="user's SessionStart")
        assert started[0]["hook_event_name"] == "SessionStart"
        assert started[0]["source"] == "startup"
        assert started[0]["session_id"] == first
        ours = poll(
            lambda: [r for r in spooled(server, sid) if r["event"] == "SessionStart"],
            timeout=60,
            what="our SessionStart",
        )
        assert ours[0]["conversation"] == first
        assert "prompt" not in json.dumps(ours)
        after_start = poll(
            lambda: (m := model(server, sid))["attention"] == "waiting" and m,
            timeout=60,
            what="waiting after SessionStart",
        )
        assert after_start["attention_source"] == "hooks"
        assert after_start["conversation_id"] == first

        client = server.ws(agent["name"])
        client.wait_for("\u276f", timeout=60)  # its prompt sign
        client.drain(1)

        # a prompt, offline and without a key: StopFailure authentication_failed
        type_into(client, "say hello")
        failed = poll(
            lambda: (m := model(server, sid))["attention"] == "error" and m,
            timeout=90,
            what="error after a prompt",
        )
        assert failed["attention_reason"] == "authentication_failed"
        events = [r["event"] for r in spooled(server, sid)]
        assert "UserPromptSubmit" in events and events[-1] == "StopFailure", events
        assert "say hello" not in (server.state_dir / "spool" / f"{sid}.jsonl").read_text()

        # /clear: a new conversation id, named by SessionStart (source clear)
        type_into(client, "/clear")
        cleared = poll(
            lambda: [r for r in user_hook_runs(user_log) if r.get("source") == "clear"],
            timeout=60,
            what="SessionStart after /clear",
        )
        second = cleared[0]["session_id"]
        assert second != first
        poll(
            lambda: model(server, sid)["conversation_id"] == second,
            timeout=60,
            what="the model to follow /clear",
        )
        again = poll(
            lambda: (m := model(server, sid))["attention"] == "waiting" and m,
            timeout=60,
            what="waiting after /clear",
        )
        assert again["attention_reason"] is None
        client.close()
    finally:
        server.request("DELETE", f"/api/agents/sessions/{sid}")
