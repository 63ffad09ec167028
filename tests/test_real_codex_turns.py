"""The real Codex CLI completing turns against a scripted model endpoint on 127.0.0.1
(tests/model_endpoint.py, OpenAI Responses; docs/development.md), through a running
server: its permission requests (issue 36); its usage, and its thread resumed after a
reboot (issue 38); its turn events in order (issue 56).

Codex shows no dialog while a hook runs, so a request waits for an answer from
elsewhere only while nobody is at its tab. Here the prompts are typed with
``jupyter agents send`` (not a person at a tab): allowed over REST, the command runs
with no key pressed; denied, it does not run and the model reads why. Once a person
types into its tab, a request goes straight to Codex's own dialog. Our hooks run
because they are trusted on Codex's command line, by hash, and nothing else is.

Skipped, with the reason, where the CLI is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_endpoint import (
    ModelEndpoint,
    OpenAIResponses,
    Reply,
    ToolCall,
    Usage,
    codex_env,
    codex_home,
    codex_shell,
)
from test_real_cli import _SCRUB, CODEX_CLI
from turn_rig import TurnRig, realcli_marks, rig_fixture
from xterm_probe import shows

from jupyter_agents.pytest_plugin import (
    TermClient,
    poll,
)

pytestmark = realcli_marks(CODEX_CLI.missing(), "real_codex_turns")

#: what Codex's input box says while it waits for a prompt
PROMPT = "Ask Codex"
ASKS = Usage(input=2100, output=40, cache_read=1024)
DONE = Usage(input=2300, output=12, cache_read=2048)
HELLO = Usage(input=1717, output=23, cache_read=512)
AGAIN = Usage(input=1919, output=9, cache_read=1536)


@dataclass
class Rig(TurnRig):
    home: Path

    def codex(self) -> tuple[dict[str, Any], TermClient, str]:
        """A new codex session at its prompt, a terminal client watching it (typing
        nothing), and its thread id."""
        status, agent = self.server.request(
            "POST", "/api/agents/sessions", {"kind": "codex", "cwd": str(self.project)}
        )
        assert status == 201, agent
        client = self.server.ws(agent["name"])
        client.wait_for(shows(PROMPT), timeout=120)
        cid = poll(
            lambda: self.server.model(agent["id"])["conversation_id"],
            timeout=60,
            what="codex's thread id",
        )
        return agent, client, str(cid)

    def attention(self, sid: str) -> str | None:
        return self.server.model(sid)["attention"]


def codex_setup(
    endpoint: ModelEndpoint, base: Path, project: Path
) -> tuple[dict[str, str], dict[str, Any]]:
    """Codex's HOME in ``base`` for the endpoint, the project trusted."""
    home = base / "home"
    codex_home(home, endpoint, project)
    return codex_env(endpoint, home), {"home": home}


rig = rig_fixture(Rig, "codex-turns", OpenAIResponses, codex_setup, _SCRUB, [CODEX_CLI.path.parent])


def test_a_request_answered_over_rest_while_nobody_is_at_the_tab(rig: Rig) -> None:
    allowed = rig.project / "allowed-by-rest"
    denied = rig.project / "denied-by-rest"
    agent, client, cid = rig.codex()
    sid = agent["id"]
    rig.endpoint.add(
        Reply("Creating", tool=codex_shell(f"touch {allowed}", "Create it?"), usage=ASKS),
        Reply("Created-it", usage=DONE),
        Reply("Again", tool=codex_shell(f"touch {denied}", "Create this too?"), usage=ASKS),
        Reply("Understood-then", usage=DONE),
        conversation=cid,
    )

    rig.send(sid, "create the first file")
    request = rig.pending(sid)
    assert request["tool"] == "Bash" and f"touch {allowed}" in request["command"]
    assert request["falls_back_to_dialog"] is True
    assert rig.attention(sid) == "permission"  # the inbox shows Codex asking
    assert not allowed.exists()
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 2, what="the tool's output")
    assert allowed.exists()
    client.wait_for(shows("Created-it"), timeout=60)
    rig.none_pending(sid)
    poll(lambda: rig.attention(sid) == "waiting", timeout=60, what="the turn's end")

    rig.send(sid, "create the second file")
    request = rig.pending(sid)
    status, body = rig.server.request(
        "POST",
        f"/api/agents/requests/{request['id']}",
        {"decision": "deny", "message": "Leave the sandbox alone"},
    )
    assert status == 200, body
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 4, what="the denial")
    assert not denied.exists()
    told = rig.endpoint.turns(cid)[3].text()
    assert "Leave the sandbox alone" in told, told[-2000:]
    rig.none_pending(sid)
    client.close()


def test_with_a_person_at_the_tab_codex_shows_its_own_dialog(rig: Rig) -> None:
    marker = rig.project / "made-in-the-dialog"
    agent, client, cid = rig.codex()
    sid = agent["id"]
    rig.endpoint.add(
        Reply("Making", tool=codex_shell(f"touch {marker}", "Make it?"), usage=ASKS),
        Reply("Made-it", usage=DONE),
        conversation=cid,
    )
    # a person types the prompt in the tab: they are at it
    for key in "make the marker":
        client.stdin(key)
    client.wait_for(shows("make the marker"), timeout=60)
    client.stdin("\r")
    client.wait_for(shows("Would you like to run the following command?"), timeout=120)
    rig.none_pending(sid)  # handed to the dialog, not waiting elsewhere
    assert rig.attention(sid) == "permission"
    client.drain(1)
    client.stdin("y")
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 2, what="the tool's output")
    assert marker.exists()
    ended = [
        line
        for line in (rig.state / "spool" / f"{sid}.jsonl").read_text().splitlines()
        if '"PermissionEnded"' in line
    ]
    assert ended and '"decision": "dialog"' in ended[-1], ended
    client.close()


def test_the_turns_of_a_real_conversation_in_order(rig: Rig) -> None:
    """Issue 56 (the server's part of acceptance 1): a prompt, a plan (``update_plan``),
    a shell call (``exec_command``) that asks permission, allowed over REST, its output,
    the answer: the session's turn events in that order, with the command and the
    output exact. Codex records neither the question nor the answer, only the call and
    what it printed (after the header of its ``exec_command`` output)."""
    marker, command = rig.marker, rig.marker_command
    steps = {"plan": [{"step": "Print the marker", "status": "in_progress"}]}
    agent, client, cid = rig.codex()
    sid = agent["id"]
    rig.endpoint.add(
        Reply("Planning-it", tool=ToolCall("update_plan", steps), usage=ASKS),
        Reply("Printing-it", tool=codex_shell(command, "Print it?"), usage=ASKS),
        Reply("Printed-it", usage=DONE),
        conversation=cid,
    )
    rig.send(sid, "print the marker")
    request = rig.pending(sid)
    assert (request["tool"], request["command"]) == ("Bash", command)
    assert not marker.exists()
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 3, what="the last reply")
    poll(lambda: rig.attention(sid) == "waiting", timeout=120, what="the turn's end")

    def events() -> list[dict[str, Any]] | None:
        status, page = rig.server.request("GET", f"/api/agents/sessions/{sid}/turns")
        assert status == 200, page
        shown = [e for e in page["events"] if e["type"] != "other"]
        return shown if shown and shown[-1]["type"] == "turn_end" else None

    shown = poll(events, timeout=30, what="the turn's end in its events")
    assert [(e["type"], e.get("tool")) for e in shown] == [
        ("user_message", None),
        ("agent_message", None),
        ("tool_call", "update_plan"),
        ("plan", None),
        ("tool_call_update", None),
        ("agent_message", None),
        ("tool_call", "exec_command"),
        ("tool_call_update", None),
        ("agent_message", None),
        ("turn_end", None),
    ], shown
    said = [e["text"] for e in shown if e["type"].endswith("_message")]
    assert said == ["print the marker", "Planning-it", "Printing-it", "Printed-it"]
    planning, made, planned = shown[2:5]
    assert made["entries"] == [{"content": "Print the marker", "status": "in_progress"}]
    assert "partial" not in made  # the whole plan each time
    assert (planned["tool_call_id"], planned["output"]) == (
        planning["tool_call_id"],
        "Plan updated",
    )
    call, output = shown[6:8]
    rig.marker_printed(sid, call, output, "exec_command", "turn-42\n", field="cmd")
    client.close()


def test_usage_is_what_was_sent_and_a_reboot_resumes_the_thread(rig: Rig) -> None:
    agent, client, cid = rig.codex()
    sid = agent["id"]
    rig.endpoint.add(Reply("First-codex-answer", usage=HELLO), conversation=cid)
    rig.send(sid, "remember amber-otter-7")
    poll(lambda: rig.attention(sid) == "waiting", timeout=120, what="the first turn's end")
    # the title thread's requests (a thread of its own) are not the session's
    assert rig.endpoint.sent_usage(cid) == HELLO
    rig.usage_becomes(sid, HELLO)
    client.close()

    rig.reboot()
    assert rig.server.model(sid)["status"] == "interrupted"
    status, after = rig.server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert after["conversation_id"] == cid and cid in after["argv"], after
    rig.endpoint.add(Reply("Second-codex-answer", usage=AGAIN), conversation=cid)
    client = rig.server.ws(after["name"])
    # the resumed CLI's prompt, not the one in the old screen's replay before the marker
    client.wait_for(shows(PROMPT, after="--- restored codex session "), timeout=120)
    rig.send(sid, "what did I ask you to remember")
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 2, what="the resumed turn")
    told = rig.endpoint.turns(cid)[1].text()
    assert "amber-otter-7" in told and "First-codex-answer" in told, told[-2000:]
    poll(lambda: rig.attention(sid) == "waiting", timeout=120, what="the resumed turn's end")
    rig.usage_becomes(sid, HELLO + AGAIN)
    client.close()
