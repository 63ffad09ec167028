"""Claude Code in ACP mode (issue 58) through the real adapter
(``claude-agent-acp``, npm ``@agentclientprotocol/claude-agent-acp``, which runs the
Claude Code its SDK bundles) against the scripted model endpoint on 127.0.0.1, through a
running server:

- the conversation id is the ACP session id, and it is Claude's own session id: the
  one the CLI names in its requests and its transcript's file name;
- a prompt over REST; the model's TodoWrite becomes the ACP plan; its Bash call asks
  permission, made a pending request with the adapter's own options, answered over
  REST; the command runs; the answer; the turns from the journal in order;
- after a reboot, restore resumes the same conversation (``session/resume``, which the
  adapter offers): the next request carries the earlier turn.

Skipped, with the reason, where the adapter is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from model_endpoint import (
    AnthropicMessages,
    ModelEndpoint,
    Reply,
    ToolCall,
    bash,
    claude_env,
    claude_home,
)
from test_real_cli import _SCRUB, conversation_path
from turn_rig import TurnRig

from jupyter_agents.agents.base import is_uuid
from jupyter_agents.pytest_plugin import ServerProcess, poll

#: the version .ci/run installs
ADAPTER_VERSION = "0.101.0"
ADAPTER = Path(
    os.environ.get("JUPYTER_AGENTS_REAL_CLAUDE_ACP", "/opt/jupyter-agents-cli/bin/claude-agent-acp")
)


def adapter_missing() -> str | None:
    """Why the real adapter cannot be used here, or None."""
    if not os.access(ADAPTER, os.X_OK):
        return f"the Claude ACP adapter is not installed at {ADAPTER} (.ci/run installs it)"
    try:
        out = subprocess.run(
            [str(ADAPTER), "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"{ADAPTER} --version failed: {e}"
    if ADAPTER_VERSION not in out:
        return f"{ADAPTER} is not claude-agent-acp {ADAPTER_VERSION}: {out.strip()[:80]!r}"
    return None


_MISSING = adapter_missing()
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(300),  # generous polls: a cold start of the real CLI can be slow
    pytest.mark.skipif(_MISSING is not None, reason=_MISSING or ""),
    pytest.mark.xdist_group("real_claude_acp"),  # one server for the module, tests in order
]

#: besides the credentials: the adapter lets a root process run Claude in bypass mode
#: when ``IS_SANDBOX`` is set at all, Claude Code only when it is ``1``, so any other
#: value fails every new ACP session ("cannot be used with root/sudo privileges")
SCRUB = (*_SCRUB, "IS_SANDBOX")


@dataclass
class Rig(TurnRig):
    """The module's server, endpoint and HOME, and the session the tests go on with."""

    home: Path
    sid: str = ""
    cid: str = ""


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    base = tmp_path_factory.mktemp("claudeacp")
    project = base / "proj"
    project.mkdir()
    home = claude_home(base / "home", project)
    # the adapter's own default is Claude's "auto" mode, which (against an endpoint that
    # is not Anthropic's) ran the command without asking; "default" asks, as the
    # terminal does
    settings = {"permissions": {"defaultMode": "default"}}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    with pytest.MonkeyPatch.context() as env_of_tests, ModelEndpoint(AnthropicMessages()) as ep:
        for name in SCRUB:
            env_of_tests.delenv(name, raising=False)
        env = {**claude_env(ep, home), "PATH": f"{ADAPTER.parent}{os.pathsep}{os.environ['PATH']}"}
        server = ServerProcess(base / "state", base, env=env).start()
        rig = Rig(server=server, endpoint=ep, project=project, env=env, base=base, home=home)
        try:
            yield rig
        finally:
            rig.close()


def todo(content: str, status: str) -> dict[str, str]:
    return {"content": content, "status": status, "activeForm": content}


def test_a_claude_acp_turn_with_a_plan_and_a_permission_answered_over_rest(rig: Rig) -> None:
    made = rig.project / "made-over-acp"
    plan = [todo("Make the file", "in_progress"), todo("Say it is made", "pending")]
    rig.endpoint.add(
        Reply("Planning-it", tool=ToolCall("TodoWrite", {"todos": plan})),
        Reply("Writing-the-file", tool=bash(f"touch {made}", "Make it")),
        Reply("Made-it"),
    )
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(rig.project), "mode": "acp"}
    )
    assert status == 201, agent
    rig.sid = sid = agent["id"]
    assert agent["mode"] == "acp" and agent["argv"][-1] == "claude-agent-acp"
    rig.cid = cid = poll(
        lambda: rig.get(sid)["conversation_id"], timeout=120, what="Claude's ACP session id"
    )
    assert is_uuid(cid)

    rig.prompt(sid, "make the file")
    request = rig.pending(sid)
    assert request["tool"] == f"touch {made}"
    assert request["suggestions"] == []  # the adapter offers "Yes" and "No" only
    assert not made.exists()
    status, answered = rig.server.request(
        "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
    )
    assert status == 200, answered
    poll(made.exists, timeout=60, what="the command run")

    events = rig.turn_ended(sid, "Made-it")
    kinds = [e["type"] for e in events]
    assert kinds[0] == "user_message" and events[0]["text"] == "make the file"
    text = "".join(e["text"] for e in events if e["type"] == "agent_message")
    assert text.index("Planning-it") < text.index("Writing-the-file") < text.index("Made-it")
    (shown,) = [e for e in events if e["type"] == "plan"]
    assert [(e["content"], e["status"]) for e in shown["entries"]] == [
        ("Make the file", "in_progress"),
        ("Say it is made", "pending"),
    ]
    calls = [e for e in events if e["type"] == "tool_call"]
    assert calls and calls[0]["tool_kind"] == "execute"
    assert f"touch {made}" in [c.get("title") for c in calls]
    ends = [e for e in events if e["type"] == "tool_call_update"]
    assert ends and ends[-1]["status"] == "completed"
    assert kinds.index("plan") < kinds.index("tool_call") < kinds.index("tool_call_update")
    assert events[-1]["stop_reason"] == "end_turn"

    # the ACP session id is Claude's own: its requests name it, its transcript is it
    turns = rig.endpoint.turns()
    assert turns and {t.conversation for t in turns} == {cid}
    assert conversation_path(rig.home, rig.project, cid).is_file()
    session = rig.get(sid)
    assert session["conversation_id"] == cid and session["mode"] == "acp"
    assert session["attention"] == "waiting" and session["attention_source"] == "acp"


def test_after_a_reboot_restore_resumes_the_claude_conversation(rig: Rig) -> None:
    assert rig.sid, "the test before started the session"
    rig.reboot()
    assert rig.get(rig.sid)["status"] == "interrupted"
    rig.endpoint.add(Reply("Again-here"))
    status, restored = rig.server.request("POST", f"/api/agents/sessions/{rig.sid}/restore")
    assert status == 200 and restored["status"] == "running", restored

    (resumed,) = poll(lambda: rig.readies(rig.sid)[1:], timeout=120, what="the new ready")
    assert resumed["how"] == "resumed" and resumed["sessionId"] == rig.cid

    rig.prompt(rig.sid, "say it again")
    events = rig.turn_ended(rig.sid, "Again-here")
    assert [e["text"] for e in events if e["type"] == "user_message"][-1] == "say it again"
    last = rig.endpoint.turns()[-1]
    assert last.conversation == rig.cid
    assert "make the file" in last.text() and "Made-it" in last.text()  # the earlier turn
    session = rig.get(rig.sid)
    assert session["conversation_id"] == rig.cid and session["reason"] is None
