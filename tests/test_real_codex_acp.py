"""Codex in ACP mode (issue 58) through the real adapter (``codex-acp``, npm
``@agentclientprotocol/codex-acp``, on ``codex app-server`` of the Codex it bundles)
against the scripted model endpoint on 127.0.0.1, through a running server:

- the conversation id is the ACP session id, and it is Codex's own thread id: the one
  its rollout file is named by;
- a prompt over REST; the model's ``update_plan`` becomes the ACP plan; its shell call
  asks approval, made a pending request with the adapter's own options (its "don't ask
  again" one a suggestion), answered over REST; the command runs; the answer; the turns
  from the journal in order;
- after a reboot, restore resumes the same thread (``session/resume``, which the adapter
  offers): the next request carries the earlier turn.

The adapter starts in its "Auto review" mode, where a model request (Codex's guardian)
decides approvals; ``INITIAL_AGENT_MODE=workspace-write`` (its "Workspace access": ask
the user) is set as a person would set it. Skipped, with the reason, where the adapter
is not installed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from model_endpoint import (
    ModelEndpoint,
    OpenAIResponses,
    Reply,
    ToolCall,
    codex_env,
    codex_home,
    codex_shell,
)
from test_real_cli import _SCRUB
from turn_rig import TurnRig

from jupyter_agents.pytest_plugin import ServerProcess, poll

#: the version .ci/run installs
ADAPTER_VERSION = "2.6.0"
ADAPTER = Path(
    os.environ.get("JUPYTER_AGENTS_REAL_CODEX_ACP", "/opt/jupyter-agents-cli/bin/codex-acp")
)
PACKAGE = ADAPTER.parent.parent / "lib/node_modules/@agentclientprotocol/codex-acp"


def adapter_missing() -> str | None:
    """Why the real adapter cannot be used here, or None (it has no ``--version``: its
    package says its version)."""
    if not os.access(ADAPTER, os.X_OK):
        return f"the Codex ACP adapter is not installed at {ADAPTER} (.ci/run installs it)"
    try:
        version = subprocess.run(
            ["node", "-p", f"require({str(PACKAGE / 'package.json')!r}).version"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"the version of {PACKAGE} could not be read: {e}"
    if version != ADAPTER_VERSION:
        return f"{ADAPTER} is not codex-acp {ADAPTER_VERSION}: {version!r}"
    return None


_MISSING = adapter_missing()
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(300),  # generous polls: a cold start of the real CLI can be slow
    pytest.mark.skipif(_MISSING is not None, reason=_MISSING or ""),
    pytest.mark.xdist_group("real_codex_acp"),  # one server for the module, tests in order
]


@dataclass
class Rig(TurnRig):
    """The module's server, endpoint and HOME, and the session the tests go on with."""

    home: Path
    sid: str = ""
    cid: str = ""


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    base = tmp_path_factory.mktemp("codexacp")
    project = base / "proj"
    project.mkdir()
    with pytest.MonkeyPatch.context() as env_of_tests, ModelEndpoint(OpenAIResponses()) as ep:
        for name in _SCRUB:
            env_of_tests.delenv(name, raising=False)
        home = base / "home"
        codex_home(home, ep, project)
        env = {
            **codex_env(ep, home),
            "INITIAL_AGENT_MODE": "workspace-write",
            "PATH": f"{ADAPTER.parent}{os.pathsep}{os.environ['PATH']}",
        }
        server = ServerProcess(base / "state", base, env=env).start()
        rig = Rig(server=server, endpoint=ep, project=project, env=env, base=base, home=home)
        try:
            yield rig
        finally:
            rig.close()


def test_a_codex_acp_turn_with_a_plan_and_an_approval_answered_over_rest(rig: Rig) -> None:
    made = rig.base / "made-over-acp"  # outside the workspace: the sandbox asks
    plan = [
        {"step": "Make the file", "status": "in_progress"},
        {"step": "Say it is made", "status": "pending"},
    ]
    rig.endpoint.add(
        Reply("Planning-it", tool=ToolCall("update_plan", {"plan": plan})),
        Reply("Writing-the-file", tool=codex_shell(f"touch {made}", "Make it?")),
        Reply("Made-it"),
    )
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "codex", "cwd": str(rig.project), "mode": "acp"}
    )
    assert status == 201, agent
    rig.sid = sid = agent["id"]
    assert agent["mode"] == "acp" and agent["argv"][-1] == "codex-acp"
    rig.cid = cid = poll(
        lambda: rig.get(sid)["conversation_id"], timeout=120, what="Codex's ACP session id"
    )

    rig.prompt(sid, "make the file")
    request = rig.pending(sid)
    assert request["tool"] == f"touch {made}"
    (always,) = request["suggestions"]
    assert "don't ask again" in always["label"]
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
    assert calls[0]["tool_kind"] == "execute" and calls[0]["title"] == f"touch {made}"
    ends = [e for e in events if e["type"] == "tool_call_update"]
    assert ends and ends[-1]["status"] == "completed"
    assert kinds.index("plan") < kinds.index("tool_call") < kinds.index("tool_call_update")
    assert events[-1]["stop_reason"] == "end_turn"

    # the ACP session id is Codex's thread id: its rollout is named by it
    rollouts = list((rig.home / ".codex" / "sessions").rglob(f"rollout-*-{cid}.jsonl"))
    assert len(rollouts) == 1, rollouts
    session = rig.get(sid)
    assert session["conversation_id"] == cid and session["mode"] == "acp"
    assert session["attention"] == "waiting" and session["attention_source"] == "acp"


def test_after_a_reboot_restore_resumes_the_codex_thread(rig: Rig) -> None:
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
    assert "make the file" in last.text() and "Made-it" in last.text()  # the earlier turn
    session = rig.get(rig.sid)
    assert session["conversation_id"] == rig.cid and session["reason"] is None
