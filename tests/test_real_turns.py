"""The real Claude Code CLI completing whole turns against a scripted model endpoint on
127.0.0.1 (tests/model_endpoint.py; docs/development.md), through a running server:
what a person sees as "needs you" (issue 40, acceptance 2) and what the session spent.

- A fresh session, asked nothing, is ``ready``; a finished turn makes it ``waiting``.
- A tool call that needs permission makes it ``permission``, a state of its own; once
  allowed, the tool runs and the turn's end makes it ``waiting``.
- After a reboot, the restored session is ``ready`` until a turn of it finishes.
- Its usage totals are the tokens the endpoint sent, a reply with a tool call (written
  by the CLI as two lines with one ``message.id``) counted once.

One server, one endpoint and one HOME serve the module (each session its own
conversation and script); the reboot test comes last. Skipped, with the reason, where
the CLI is not installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_endpoint import (
    AnthropicMessages,
    ModelEndpoint,
    Reply,
    ToolCall,
    Usage,
    bash,
    claude_env,
    claude_home,
)
from test_real_cli import _MISSING, _SCRUB, CLAUDE, conversation_path, type_into
from turn_rig import TurnRig, realcli_marks, rig_fixture
from xterm_probe import shows

from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.pytest_plugin import (
    EventClient,
    TermClient,
    poll,
)

pytestmark = realcli_marks(_MISSING, "real_turns")

#: the prompt sign of Claude Code's input box (its TUI moves the cursor between the
#: words it draws, so the scripted replies a test waits to see are one word each)
PROMPT = "\u276f"
#: usage figures to tell apart: each reply its own
HELLO = Usage(input=2311, output=17, cache_read=1024, cache_creation=64)
ASKS = Usage(input=3101, output=58, cache_read=2048, cache_creation=45)
DONE = Usage(input=3333, output=11, cache_read=1141, cache_creation=0)


@dataclass
class Rig(TurnRig):
    """The module's server, endpoint and HOME."""

    home: Path

    def listed(self, sid: str) -> dict[str, Any]:
        """The session as the listing (what the panel shows) has it."""
        status, body = self.server.request("GET", "/api/agents/sessions")
        assert status == 200, body
        return next(s for s in body if s["id"] == sid)

    def claude(self, *script: Reply) -> tuple[dict[str, Any], TermClient]:
        """A new claude session whose conversation gets ``script`` from the endpoint,
        and a terminal client once its input box is shown."""
        status, agent = self.server.request(
            "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(self.project)}
        )
        assert status == 201, agent
        self.endpoint.add(*script, conversation=agent["conversation_id"])
        client = self.server.ws(agent["name"])
        client.wait_for(PROMPT, timeout=120)
        client.drain(1)
        return agent, client


def claude_setup(
    endpoint: ModelEndpoint, base: Path, project: Path
) -> tuple[dict[str, str], dict[str, Any]]:
    """Claude Code's HOME in ``base`` for the endpoint, the project trusted."""
    home = claude_home(base / "home", project)
    return claude_env(endpoint, home), {"home": home}


rig = rig_fixture(Rig, "turns", AnthropicMessages, claude_setup, _SCRUB, [CLAUDE.parent])


def test_fresh_session_is_ready_and_a_finished_turn_needs_you(rig: Rig) -> None:
    agent, client = rig.claude(Reply("Hello-from-the-script", usage=HELLO))
    sid, cid = agent["id"], agent["conversation_id"]

    # started, asked nothing: ready, in the listing too, not needs-you
    ready = rig.attention_becomes(sid, "ready", "a fresh session")
    assert ready["attention_source"] == "hooks"
    assert rig.listed(sid)["attention"] not in NEEDS_YOU
    assert rig.spooled(sid) == ["SessionStart"]  # no turn yet, no other event
    assert rig.endpoint.turns(cid) == []

    type_into(client, "say hello")
    client.wait_for(shows("Hello-from-the-script"), timeout=120)
    done = rig.attention_becomes(sid, "waiting", "the finished turn")
    assert done["attention"] in NEEDS_YOU and rig.listed(sid)["attention"] == "waiting"
    events = rig.spooled(sid)
    assert events[-1] == "Stop" and "UserPromptSubmit" in events, events
    (turn,) = rig.endpoint.turns(cid)
    assert "say hello" in turn.text()

    # what it spent: exactly what the endpoint sent for this conversation, by kind
    sent = rig.endpoint.sent_usage(cid)
    assert sent == HELLO
    usage = poll(
        lambda: (u := rig.get(sid)["usage"]) and u["tokens"] == sent.as_tokens() and u,
        timeout=60,
        what=f"usage {sent.as_tokens()}",
    )
    (model,) = usage["models"]
    assert usage["models"][model]["tokens"] == sent.as_tokens()
    client.close()


def test_a_permission_request_is_apart_from_a_finished_turn(rig: Rig) -> None:
    written = rig.project / "written-by-claude.txt"
    agent, client = rig.claude(
        Reply(
            "Writing-the-file",
            tool=bash(f"echo scripted > {written}", "Write a file"),
            usage=ASKS,
        ),
        Reply("The-file-is-written", usage=DONE),
    )
    sid, cid = agent["id"], agent["conversation_id"]
    rig.attention_becomes(sid, "ready", "a fresh session")

    type_into(client, "write the file")
    asked = rig.attention_becomes(sid, "permission", "the permission dialog")
    assert asked["attention"] in NEEDS_YOU and rig.listed(sid)["attention"] == "permission"
    assert "PermissionRequest" in rig.spooled(sid)
    (request,) = rig.endpoint.turns(cid)  # the endpoint was asked, and answered the tool call
    assert request.reply is not None and request.reply.tool is not None
    assert not written.exists()  # nothing ran: it waits for the person

    # the request is pending, with the command; the dialog is on screen meanwhile
    pending = rig.pending(sid)
    assert pending["tool"] == "Bash" and pending["command"] == f"echo scripted > {written}"
    assert pending["description"] == "Write a file"

    # allow it in the terminal (the dialog's first choice), before anyone else does:
    # the tool runs, the model is asked again, the pending request closes
    client.wait_for(shows("proceed?"), timeout=60)  # "Do you want to proceed?" 1. Yes
    client.drain(1)
    client.stdin("\r")
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 2, what="the tool's result")
    rig.none_pending(sid)
    late = poll(
        lambda: (
            (
                a := rig.server.request(
                    "POST", f"/api/agents/requests/{pending['id']}", {"decision": "deny"}
                )
            )[0]
            == 409
            and a
        ),
        what="a 409 saying how it ended",
    )
    assert "answered in the terminal" in late[1]["message"], late
    done = rig.attention_becomes(sid, "waiting", "the finished turn")
    assert done["attention_reason"] is None
    assert written.read_text() == "scripted\n"
    order = ["UserPromptSubmit", "PreToolUse", "PermissionRequest", "PostToolUse", "Stop"]
    events = iter(rig.spooled(sid))
    assert all(event in events for event in order), rig.spooled(sid)  # in this order
    second = rig.endpoint.turns(cid)[1]
    assert "tool_result" in second.text()

    # two replies, the first written by the CLI as two lines (text, tool_use) with one
    # message id and the whole usage each: counted once each
    lines = conversation_path(rig.home, rig.project, cid).read_text().splitlines()
    ids = [r["message"]["id"] for r in map(json.loads, lines) if r.get("type") == "assistant"]
    assert ids.count(request.message_id) == 2, ids
    sent = rig.endpoint.sent_usage(cid)
    assert sent == ASKS + DONE
    poll(
        lambda: (u := rig.get(sid)["usage"]) and u["tokens"] == sent.as_tokens(),
        timeout=60,
        what=f"usage {sent.as_tokens()}",
    )
    client.close()


def test_a_permission_request_answered_over_rest_with_no_key_pressed(rig: Rig) -> None:
    """Issue 36: allowed over REST, the tool runs (its file appears) with no key sent to
    the terminal; denied over REST, it does not run and the model reads the message."""
    allowed = rig.project / "allowed-over-rest.txt"
    denied = rig.project / "denied-over-rest.txt"
    agent, client = rig.claude(
        Reply("Writing", tool=bash(f"echo allowed > {allowed}", "Write one"), usage=ASKS),
        Reply("Written", usage=DONE),
        Reply("Writing-again", tool=bash(f"echo denied > {denied}", "Write two"), usage=ASKS),
        Reply("Understood", usage=DONE),
    )
    sid, cid = agent["id"], agent["conversation_id"]
    rig.attention_becomes(sid, "ready", "a fresh session")

    type_into(client, "write the first file")
    request = rig.pending(sid)
    assert request["command"] == f"echo allowed > {allowed}"
    assert rig.get(sid)["attention"] == "permission"
    client.wait_for(shows("proceed?"), timeout=60)  # its own dialog, on screen meanwhile
    client.drain(1)
    # from here until the tool ran, nothing is typed into its terminal
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 2, what="the tool's result")
    assert allowed.read_text() == "allowed\n"
    rig.attention_becomes(sid, "waiting", "the turn's end")
    rig.none_pending(sid)

    type_into(client, "write the second file")
    request = rig.pending(sid)
    status, body = rig.server.request(
        "POST",
        f"/api/agents/requests/{request['id']}",
        {"decision": "deny", "message": "Not that folder: ask me first"},
    )
    assert status == 200, body
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 4, what="the denial")
    assert not denied.exists()
    told = rig.endpoint.turns(cid)[3].text()
    assert "Not that folder: ask me first" in told, told[-2000:]
    rig.attention_becomes(sid, "waiting", "the turn's end")
    rig.none_pending(sid)
    client.close()


def test_the_turns_of_a_real_conversation_in_order(rig: Rig) -> None:
    """Issue 56 (the server's part of acceptance 1): a prompt, a plan (TodoWrite), a Bash
    call that asks permission, allowed over REST, its output, the answer: the session's
    turn events in that order, with the command and the output exact."""
    command = rig.marker_command
    # Claude Code 2.1's plan is its tasks (TodoWrite is "No such tool" there)
    task = {"subject": "Print the marker", "description": "Print it", "activeForm": "Printing"}
    started = {"taskId": "1", "status": "in_progress"}
    agent, client = rig.claude(
        Reply("Planning-it", tool=ToolCall("TaskCreate", task), usage=ASKS),
        Reply("Starting-it", tool=ToolCall("TaskUpdate", started), usage=ASKS),
        Reply("Printing-it", tool=bash(command, "Print the marker"), usage=ASKS),
        Reply("Printed-it", usage=DONE),
    )
    sid, cid = agent["id"], agent["conversation_id"]
    rig.attention_becomes(sid, "ready", "a fresh session")
    type_into(client, "print the marker")
    request = rig.pending(sid)
    assert request["command"] == command
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns(cid)) == 4, what="the last reply")
    rig.attention_becomes(sid, "waiting", "the turn's end")

    shown = rig.turn_events(sid, "Printed-it")
    assert [(e["type"], e.get("tool")) for e in shown] == [
        ("user_message", None),
        ("agent_message", None),
        ("tool_call", "TaskCreate"),
        ("tool_call_update", None),
        ("plan", None),
        ("agent_message", None),
        ("tool_call", "TaskUpdate"),
        ("tool_call_update", None),
        ("plan", None),
        ("agent_message", None),
        ("tool_call", "Bash"),
        ("tool_call_update", None),
        ("agent_message", None),
    ], shown
    said = [e["text"] for e in shown if e["type"].endswith("_message")]
    assert said == ["print the marker", "Planning-it", "Starting-it", "Printing-it", "Printed-it"]
    made, started_plan = (e for e in shown if e["type"] == "plan")
    assert made["partial"] and made["entries"] == [
        {"id": "1", "content": "Print the marker", "status": "pending"}
    ]
    assert started_plan["entries"] == [{"id": "1", "status": "in_progress"}]
    call, output = shown[-3:-1]
    notebook = rig.marker_printed(sid, call, output, "Bash", "turn-42")
    plans = [c.source for c in notebook.cells if c.source.startswith("**Plan**")]
    # the task made, then started: the second cell shows the whole plan as it is then
    assert [p.split("\n\n", 1)[1] for p in plans] == [
        "- [ ] Print the marker\n",
        "- [-] Print the marker\n",
    ], plans
    client.close()


def test_a_resumed_session_is_ready_until_a_turn_finishes(rig: Rig) -> None:
    agent, client = rig.claude(
        Reply("First-answer", usage=HELLO), Reply("Second-answer", usage=DONE)
    )
    sid, cid = agent["id"], agent["conversation_id"]
    type_into(client, "remember teal-heron-5")
    rig.attention_becomes(sid, "waiting", "the first turn's end")
    # Claude Code runs its Stop hook while its queued writes to the conversation file
    # can still be pending: a power loss in that moment loses the turn in its own file
    # ("No conversation found" on --resume). The reboot comes once the turn is saved.
    saved = conversation_path(rig.home, rig.project, cid)
    poll(
        lambda: saved.exists() and "First-answer" in saved.read_text(),
        timeout=60,
        what="the first turn in the conversation file",
    )
    client.close()

    rig.reboot()
    assert rig.get(sid)["status"] == "interrupted"
    events = EventClient(rig.server)
    status, after = rig.server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert "--resume" in after["argv"]
    # resumed, asked nothing yet: not needs-you, neither in the reply, nor in any event
    # the panel gets, nor after its start
    assert after["attention"] not in NEEDS_YOU, after
    resumed = rig.attention_becomes(sid, "ready", "the resumed session")
    assert resumed["conversation_id"] == cid
    assert rig.listed(sid)["attention"] == "ready"
    poll(lambda: events.of(sid, "attention"), what="the event of its start")
    events.close()
    told = [(e["action"], e["status"], e["attention"]) for e in events.of(sid)]
    assert not [t for t in told if t[1] == "running" and t[2] in NEEDS_YOU], told

    client = rig.server.ws(after["name"])
    # after the old screen's replay: the resumed CLI shows the old conversation again
    marker = "--- restored claude session "

    client.wait_for(shows("First-answer", PROMPT, after=marker), timeout=120)
    client.drain(1)
    type_into(client, "what did I ask you to remember?")
    rig.attention_becomes(sid, "waiting", "the resumed session's turn")
    _, second = rig.endpoint.turns(cid)
    assert "teal-heron-5" in second.text()  # the earlier messages sent again
    assert rig.endpoint.sent_usage(cid) == HELLO + DONE
    poll(
        lambda: (u := rig.get(sid)["usage"]) and u["tokens"] == (HELLO + DONE).as_tokens(),
        timeout=60,
        what="usage across the restore",
    )
    client.close()
