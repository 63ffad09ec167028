"""The real GitHub Copilot CLI completing turns against a scripted model endpoint on
127.0.0.1 (tests/model_endpoint.py, OpenAI chat completions), through a running server:

- the conversation id is exact from the start (``--session-id``, and Copilot's own
  ``session-state/<id>/`` is made for it);
- a shell command that needs permission puts the session in ``permission`` (our
  ``permissionRequest`` hook, from a plugin folder given to that process only), the
  turn's end in ``waiting`` (``agentStop``);
- its usage totals are the tokens the endpoint sent (one ``session.usage_record`` per
  model call);
- after a power loss, restore resumes the same conversation (``--resume=<id>``): the
  next request to the endpoint carries the earlier messages;
- its turn events: a prompt, a shell call allowed over REST, its output and the answer,
  in order (issue 56).

Skipped, with the reason, where the CLI is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from model_endpoint import (
    ModelEndpoint,
    OpenAIChat,
    Reply,
    Usage,
    copilot_env,
    copilot_home,
    copilot_shell,
)
from test_attention import cli
from test_real_cli import _SCRUB, type_into
from turn_rig import RealCli, TurnRig, realcli_marks, rig_fixture
from xterm_probe import shows

from jupyter_agents.pytest_plugin import TermClient, poll

#: the version .ci/run installs
COPILOT = RealCli.pinned("Copilot CLI", "copilot", "JUPYTER_AGENTS_REAL_COPILOT", "1.0.102")
pytestmark = realcli_marks(COPILOT.missing(), "real_copilot_turns")

#: the sign of Copilot's input box
PROMPT = "\u276f"
#: what its permission dialog asks
DIALOG = "Do you want to run this command?"
#: what Copilot asks when it takes a session for one another process holds
IN_USE = "Resume anyway"
#: usage figures to tell apart (chat completions report no cache writes)
HELLO = Usage(input=2311, output=17, cache_read=1024)
ASKS = Usage(input=3101, output=58, cache_read=2048)
DONE = Usage(input=3333, output=11, cache_read=1141)
AGAIN = Usage(input=3507, output=9, cache_read=512)
#: variables of the test runner that would point Copilot elsewhere
_COPILOT_SCRUB = ("COPILOT_HOME", "COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")


@dataclass
class Rig(TurnRig):
    home: Path
    #: the session the tests share (a CLI start costs seconds)
    session: dict[str, Any] = field(default_factory=dict)


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    home = copilot_home(base / "home", project)
    return copilot_env(endpoint, home), {"home": home}


rig = rig_fixture(
    Rig, "copilot-turns", OpenAIChat, _setup, (*_SCRUB, *_COPILOT_SCRUB), [COPILOT.path.parent]
)


def _client(rig: Rig, name: str) -> TermClient:
    client = rig.server.ws(name)
    client.wait_for(shows(PROMPT), timeout=120)
    client.drain(1)
    return client


def test_exact_id_then_permission_then_waiting_and_the_usage_sent(rig: Rig) -> None:
    written = rig.project / "written-by-copilot"
    rig.endpoint.add(
        Reply("Hello-from-the-script", usage=HELLO),
        Reply("Writing", tool=copilot_shell(f"echo hi > {written}", "Write it"), usage=ASKS),
        Reply("The-file-is-written", usage=DONE),
    )
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "copilot", "cwd": str(rig.project)}
    )
    assert status == 201, agent
    rig.session = agent
    sid, cid = agent["id"], agent["conversation_id"]
    assert cid and agent["argv"][agent["argv"].index("--session-id") + 1] == cid
    client = _client(rig, agent["name"])
    # Copilot keeps the conversation under the id we chose, from its launch
    assert (rig.home / ".copilot" / "session-state" / cid / "workspace.yaml").is_file()

    type_into(client, "remember teal-heron-5")
    rig.attention_becomes(sid, "waiting", "the first turn's end")
    client.wait_for(shows("Hello-from-the-script"), timeout=60)

    type_into(client, "write the file")
    rig.attention_becomes(sid, "permission", "the shell command's permission request")
    client.wait_for(shows(DIALOG), timeout=60)
    assert not written.exists()
    client.drain(1)
    client.stdin("\r")  # "1. Yes"
    rig.attention_becomes(sid, "waiting", "the second turn's end")
    assert written.read_text().strip() == "hi"
    assert rig.get(sid)["conversation_id"] == cid

    sent = rig.endpoint.sent_usage()
    assert sent == HELLO + ASKS + DONE and rig.endpoint.overrun == 0
    usage = rig.usage_becomes(sid, sent)
    (model,) = usage["models"]
    assert usage["models"][model]["tokens"] == sent.as_tokens()
    client.close()


def test_restore_after_a_power_loss_continues_the_conversation(rig: Rig) -> None:
    if not rig.session:
        pytest.skip("the first test made no session")
    sid, cid = rig.session["id"], rig.session["conversation_id"]
    rig.endpoint.add(Reply("Teal-it-was", usage=AGAIN))
    before = len(rig.endpoint.turns())

    rig.reboot()
    assert rig.get(sid)["status"] == "interrupted"
    status, after = rig.server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert f"--resume={cid}" in after["argv"]
    assert after["conversation_id"] == cid
    client = rig.server.ws(after["name"])
    marker = "--- restored copilot session "
    resumed = shows("The-file-is-written", PROMPT, after=marker)
    in_use = shows(IN_USE, after=marker)
    client.wait_for(lambda c: resumed(c) or in_use(c), timeout=120)
    if not resumed(client):
        # Copilot at times takes the killed process's lock for a live one and asks
        client.stdin("1")  # "1. Resume anyway"
        client.drain(1)
        if in_use(client) and not resumed(client):
            client.stdin("\r")
        client.wait_for(resumed, timeout=120)
    client.drain(1)

    type_into(client, "what did I ask you to remember?")
    rig.attention_becomes(sid, "waiting", "the resumed session's turn")
    turns = rig.endpoint.turns()
    assert len(turns) == before + 1
    said = [str(m.get("content"))[:120] for m in turns[-1].body["messages"][1:]]
    assert "teal-heron-5" in turns[-1].text(), said  # the earlier messages sent again
    assert rig.endpoint.sent_usage() == HELLO + ASKS + DONE + AGAIN
    rig.usage_becomes(sid, rig.endpoint.sent_usage())
    client.close()


def test_a_permission_request_answered_over_rest_while_nobody_is_at_the_tab(rig: Rig) -> None:
    """Copilot shows no dialog while its permission hook runs: a request waits for an
    answer from elsewhere, and Copilot reads the hook's decision."""
    if not rig.session:
        pytest.skip("the first test made no session")
    sid = rig.session["id"]
    allowed = rig.project / "allowed-by-rest"
    rig.endpoint.add(
        Reply("Creating", tool=copilot_shell(f"touch {allowed}", "Create it"), usage=ASKS),
        Reply("Created-it", usage=DONE),
    )
    code, out, err = cli(rig.server.state_dir, "send", sid, "create the file")
    assert code == 0, (out, err)
    (request,) = poll(
        lambda: rig.server.request("GET", f"/api/agents/requests?session={sid}")[1],
        timeout=120,
        interval=0.5,
        what="a pending permission request",
    )
    assert request["tool"] == "bash" and f"touch {allowed}" in request["command"]
    assert request["falls_back_to_dialog"] is True
    assert rig.get(sid)["attention"] == "permission"
    assert not allowed.exists()
    rig.allow(request)
    rig.attention_becomes(sid, "waiting", "the turn's end")
    assert allowed.exists()
    rig.usage_becomes(sid, rig.endpoint.sent_usage())


def test_the_turns_of_a_real_conversation_in_order(rig: Rig) -> None:
    """Issue 56 (the server's part of acceptance 1): a prompt, a bash call that asks
    permission, allowed over REST, its output, the answer: the session's turn events in
    that order, with the command and the output exact (without the line Copilot adds
    for the model, ``<shellId: 0 completed with exit code 0>``). Copilot 1.0.102 has no
    plan tool whose records hold the plan (its todos are rows of its session database,
    written with its ``sql`` tool), so the turn has no plan; and its
    ``assistant.turn_end`` ends each model call, not the turn, so no ``turn_end``."""
    marker, command = rig.marker, rig.marker_command
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "copilot", "cwd": str(rig.project)}
    )
    assert status == 201, agent
    sid = agent["id"]
    client = _client(rig, agent["name"])
    rig.endpoint.add(
        Reply("Printing-it", tool=copilot_shell(command, "Print the marker"), usage=ASKS),
        Reply("Printed-it", usage=DONE),
    )
    rig.send(sid, "print the marker")
    request = rig.pending(sid)
    assert (request["tool"], request["command"]) == ("bash", command)
    assert not marker.exists()
    rig.allow(request)
    rig.attention_becomes(sid, "waiting", "the turn's end")

    shown = rig.turn_events(sid, "Printed-it")
    assert [(e["type"], e.get("tool")) for e in shown] == [
        ("user_message", None),
        ("agent_message", None),
        ("tool_call", "bash"),
        ("tool_call_update", None),
        ("agent_message", None),
    ], shown
    said = [e["text"] for e in shown if e["type"].endswith("_message")]
    assert said == ["print the marker", "Printing-it", "Printed-it"]
    call, output = shown[2:4]
    rig.marker_printed(sid, call, output, "bash", "turn-42")
    client.close()
