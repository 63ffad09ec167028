"""Issue 57, acceptance 2 with the real Claude Code CLI against the scripted model
endpoint on 127.0.0.1 (tests/model_endpoint.py): its permission request reaches a fake
push service on 127.0.0.1 as a Web Push, decrypted with the keys of a subscription the
test made (no browser); posting the Allow answer link runs the command (its file
appears), posting Deny tells the model. Nothing is typed into the terminal meanwhile.
Skipped, with the reason, where the CLI is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from model_endpoint import AnthropicMessages, Reply, bash
from test_notify import Device, FakeService, anonymous, push_args
from test_real_cli import _MISSING, _SCRUB, CLAUDE, type_into
from test_real_turns import ASKS, DONE, Rig, claude_setup
from turn_rig import realcli_marks, serving

from jupyter_agents.pytest_plugin import poll

pytestmark = realcli_marks(_MISSING)


@pytest.fixture
def pushed_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Rig, FakeService]]:
    base = tmp_path_factory.mktemp("pushed")
    push = FakeService()
    try:
        provider = AnthropicMessages()
        served = serving(
            Rig, base, provider, claude_setup, _SCRUB, [CLAUDE.parent], args=push_args()
        )
        for rig in served:
            yield rig, push
    finally:
        push.close()


def test_a_real_claude_request_pushed_and_answered_from_the_push(pushed_rig) -> None:
    rig, push = pushed_rig
    device = Device(push.url + "push/phone")
    made = rig.server.request("POST", "/api/agents/push/subscriptions", device.subscription())
    assert made[0] == 201, made
    allowed = rig.project / "allowed-from-a-push.txt"
    denied = rig.project / "denied-from-a-push.txt"
    agent, client = rig.claude(
        Reply("Writing", tool=bash(f"echo allowed > {allowed}", "Write one"), usage=ASKS),
        Reply("Written", usage=DONE),
        Reply("Writing-again", tool=bash(f"echo denied > {denied}", "Write two"), usage=ASKS),
        Reply("Understood", usage=DONE),
    )
    sid, cid = agent["id"], agent["conversation_id"]
    rig.attention_becomes(sid, "ready", "a fresh session")

    type_into(client, "write the first file")
    poll(lambda: push.received, timeout=120, what="the push")
    payload = device.decrypt(push.received[0]["body"])
    assert payload["command"] == f"echo allowed > {allowed}"
    assert (payload["kind"], payload["session"], payload["tool"]) == (
        "claude",
        agent["name"],
        "Bash",
    )
    # from here until the tool ran, nothing is typed into its terminal
    (token,) = [a["token"] for a in payload["actions"] if a["action"] == "allow"]
    status, body = anonymous(rig.server, "POST", f"/agents/act/{token}")
    assert status == 200, body
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 2, what="the tool's result")
    assert allowed.read_text() == "allowed\n"
    rig.attention_becomes(sid, "waiting", "the turn's end")

    type_into(client, "write the second file")
    poll(lambda: len(push.received) == 2, timeout=120, what="the second push")
    payload = device.decrypt(push.received[1]["body"])
    (token,) = [a["token"] for a in payload["actions"] if a["action"] == "deny"]
    status, body = anonymous(rig.server, "POST", f"/agents/act/{token}")
    assert status == 200, body
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 4, what="the denial")
    assert not denied.exists()
    told = rig.endpoint.turns(cid)[3].text()
    assert "The user denied this from JupyterLab." in told, told[-2000:]
    client.close()
