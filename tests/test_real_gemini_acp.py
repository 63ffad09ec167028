"""The real Gemini CLI in ACP mode (``gemini --acp``, issue 58) against the scripted
model endpoint on 127.0.0.1, through a running server: a prompt over REST, the model's
shell call, Gemini's permission request made a pending request with its own options,
answered over REST, the command run, the answer; the turns from the journal in order.
Skipped, with the reason, where the CLI is not installed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from model_endpoint import GeminiGenerateContent, ModelEndpoint, Reply, gemini_env, gemini_home
from model_endpoint import gemini_shell as shell_call
from test_real_gemini_turns import _MISSING, _SCRUB, GEMINI

from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(300),
    pytest.mark.skipif(_MISSING is not None, reason=_MISSING or ""),
]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[ServerProcess, ModelEndpoint, Path]]:
    project = tmp_path / "proj"
    project.mkdir()
    home = gemini_home(tmp_path / "home", project)
    with (
        pytest.MonkeyPatch.context() as env_of_tests,
        ModelEndpoint(GeminiGenerateContent()) as endpoint,
    ):
        for name in _SCRUB:
            env_of_tests.delenv(name, raising=False)
        env = {
            **gemini_env(endpoint, home),
            "PATH": f"{GEMINI.parent}{os.pathsep}{os.environ['PATH']}",
        }
        server = ServerProcess(tmp_path / "state", tmp_path, env=env).start()
        try:
            yield server, endpoint, project
        finally:
            server.stop()
            kill_backends(tmp_path / "state")


def test_a_gemini_acp_turn_with_a_permission_answered_over_rest(rig: Any) -> None:
    server, endpoint, project = rig
    made = project / "made-over-acp"
    endpoint.add(
        Reply("Writing-the-file", tool=shell_call(f"touch {made}", "Make it")),
        Reply("Made-it"),
    )
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "gemini", "cwd": str(project), "mode": "acp"}
    )
    assert status == 201, agent
    sid = agent["id"]
    assert agent["argv"][-2:] == [str(GEMINI), "--acp"] or agent["argv"][-1] == "--acp"
    cid = poll(
        lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"],
        timeout=120,
        what="Gemini's ACP session id",
    )

    def prompt() -> Any:
        status, sent = server.request(
            "POST", f"/api/agents/sessions/{sid}/prompt", {"text": "make the file"}
        )
        return sent if status == 202 else None

    poll(prompt, timeout=60, what="the prompt accepted")

    def asked() -> list[dict[str, Any]]:
        status, listed = server.request("GET", f"/api/agents/requests?session={sid}")
        assert status == 200, listed
        return list(listed)

    (request,) = poll(asked, timeout=120, what="Gemini's permission request")
    assert request["tool"] == f"touch {made}"
    assert [s["label"] for s in request["suggestions"]] == ["Allow for this session"]
    assert not made.exists()
    status, answered = server.request(
        "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
    )
    assert status == 200, answered
    poll(made.exists, timeout=60, what="the command run")

    def turns() -> list[dict[str, Any]] | None:
        events = server.request("GET", f"/api/agents/sessions/{sid}/turns")[1]["events"]
        return events if events and events[-1]["type"] == "turn_end" else None

    events = poll(turns, timeout=120, what="the turn's end")
    events = [e for e in events if e["type"] != "other"]  # (its commands, modes: no rows)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "user_message" and events[0]["text"] == "make the file"
    text = "".join(e["text"] for e in events if e["type"] == "agent_message")
    assert "Writing-the-file" in text and "Made-it" in text
    calls = [e for e in events if e["type"] == "tool_call"]
    assert calls, events
    assert calls[0]["tool_kind"] == "execute" and calls[0]["title"] == f"touch {made}"
    ends = [e for e in events if e["type"] == "tool_call_update"]
    assert ends and ends[-1]["status"] == "completed"
    assert kinds.index("tool_call") < kinds.index("tool_call_update") < len(kinds) - 1
    assert events[-1]["stop_reason"] == "end_turn"
    session = server.request("GET", f"/api/agents/sessions/{sid}")[1]
    assert session["conversation_id"] == cid and session["mode"] == "acp"
    assert session["attention"] == "waiting" and session["attention_source"] == "acp"
