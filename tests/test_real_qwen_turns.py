"""The real Qwen Code CLI completing turns against a scripted model endpoint on 127.0.0.1
(tests/model_endpoint.py, OpenAI chat completions; docs/development.md), through a
running server.

- The conversation id is exact from the launch (``--session-id``); a fresh session is
  ``ready``.
- A shell command that writes asks permission (approval mode ``default``, set in the
  test's HOME: the kind leaves the user's mode alone): the session is ``permission``
  and the request is pending; allowed over REST (nobody at the tab: prompts typed with
  ``jupyter agents send``), the command runs with no key pressed and the turn's end
  makes the session ``waiting``.
- The usage totals are the tokens the endpoint sent.
- Its turn events: a prompt, a plan, a shell call allowed over REST, its output and the
  answer, in order (issue 56).
- After a reboot, restore resumes the same conversation (``--resume``): the next
  request carries the earlier messages.

Skipped, with the reason, where the CLI (or Node.js 22) is not installed.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_endpoint import (
    ModelEndpoint,
    OpenAIChat,
    Reply,
    ToolCall,
    Usage,
    qwen_env,
    qwen_home,
    qwen_shell,
    qwen_side_request,
)
from test_real_cli import _SCRUB, type_into
from turn_rig import RealCli, TurnRig, realcli_marks, rig_fixture
from xterm_probe import shows

from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.agents.base import is_uuid

NODE = Path(os.environ.get("JUPYTER_AGENTS_NODE22", "/opt/jupyter-agents-node22/bin"))
#: the version .ci/run installs (it needs Node.js 22)
QWEN = RealCli.pinned("Qwen Code", "qwen", "JUPYTER_AGENTS_REAL_QWEN", "0.24.4", path_first=[NODE])
_NO_NODE = None if os.access(NODE / "node", os.X_OK) else f"Node.js 22 is not installed in {NODE}"
pytestmark = realcli_marks(_NO_NODE or QWEN.missing(), "real_qwen_turns")

#: the placeholder of Qwen's input box, shown while it waits for a prompt
PROMPT = "Type your message"
#: usage figures to tell apart (no cache writes: the chat API has no count of them)
ASKS = Usage(input=2100, output=40, cache_read=1024)
DONE = Usage(input=2300, output=12, cache_read=2048)
HELLO = Usage(input=1900, output=17, cache_read=512)


@dataclass
class Rig(TurnRig):
    home: Path

    def qwen(self) -> dict[str, Any]:
        status, agent = self.server.request(
            "POST", "/api/agents/sessions", {"kind": "qwen", "cwd": str(self.project)}
        )
        assert status == 201, agent
        return dict(agent)


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    home = base / "home"
    qwen_home(home)
    return qwen_env(endpoint, home), {"home": home}


_QWEN_SCRUB = (*_SCRUB, "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "QWEN_HOME")
rig = rig_fixture(
    Rig,
    "qwen-turns",
    functools.partial(OpenAIChat, side=qwen_side_request),
    _setup,
    _QWEN_SCRUB,
    [QWEN.path.parent, NODE],
)


def test_permission_allowed_over_rest_then_waiting_and_usage(rig: Rig) -> None:
    written = rig.project / "written-by-qwen.txt"
    denied = rig.project / "denied-over-rest.txt"
    agent = rig.qwen()
    sid, cid = agent["id"], agent["conversation_id"]
    assert is_uuid(cid) and agent["argv"][1:3] == ["--session-id", cid]
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    ready = rig.attention_becomes(sid, "ready", "a fresh session")
    assert ready["attention_source"] == "hooks" and ready["conversation_id"] == cid
    assert rig.spooled(sid) == ["SessionStart"]
    rig.endpoint.add(
        Reply("Writing-it", tool=qwen_shell(f"echo scripted > {written}", "Write it"), usage=ASKS),
        Reply("Written-it", usage=DONE),
        Reply("Again", tool=qwen_shell(f"echo no > {denied}", "Write another"), usage=ASKS),
        Reply("Understood-then", usage=DONE),
    )

    rig.send(sid, "write the file")
    request = rig.pending(sid)
    assert request["command"] == f"echo scripted > {written}"
    assert request["falls_back_to_dialog"] is True
    assert rig.get(sid)["attention"] == "permission"
    assert not written.exists()
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == 2, what="the tool's result")
    assert written.read_text() == "scripted\n"
    client.wait_for(shows("Written-it"), timeout=60)
    done = rig.attention_becomes(sid, "waiting", "the turn's end")
    assert done["attention"] in NEEDS_YOU
    order = ["UserPromptSubmit", "PermissionRequest", "PreToolUse", "PostToolUse", "Stop"]
    events = iter(rig.spooled(sid))
    assert all(event in events for event in order), rig.spooled(sid)
    assert "run_shell_command" in rig.endpoint.turns()[1].text()  # the tool's result sent

    rig.send(sid, "write another file")
    request = rig.pending(sid)
    status, body = rig.server.request(
        "POST",
        f"/api/agents/requests/{request['id']}",
        {"decision": "deny", "message": "Not that folder: ask me first"},
    )
    assert status == 200, body
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == 4, what="the denial")
    assert not denied.exists()
    told = rig.endpoint.turns()[3].text()
    assert "Not that folder: ask me first" in told, told[-2000:]
    rig.attention_becomes(sid, "waiting", "the turn's end")

    # a person types into the tab: the request goes straight to Qwen's own dialog
    marker = rig.project / "made-in-the-dialog.txt"
    rig.endpoint.add(
        Reply("Making-it", tool=qwen_shell(f"echo dialog > {marker}", "Make it"), usage=ASKS),
        Reply("Made-it", usage=DONE),
    )
    client.drain(1)
    type_into(client, "make the marker")
    client.wait_for(shows("Allow execution"), timeout=120)
    rig.attention_becomes(sid, "permission", "Qwen's own dialog")
    assert pending_now(rig, sid) == []  # handed to the dialog, not waiting elsewhere
    assert not marker.exists()
    client.drain(1)
    client.stdin("\r")  # "1. Yes, allow once"
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == 6, what="the tool's result")
    assert marker.read_text() == "dialog\n"
    rig.attention_becomes(sid, "waiting", "the turn's end")
    ended = [
        line
        for line in (rig.state / "spool" / f"{sid}.jsonl").read_text().splitlines()
        if '"PermissionEnded"' in line
    ]
    assert ended and '"decision": "dialog"' in ended[-1], ended

    # what it spent: exactly what the endpoint sent (no side request was made)
    assert rig.endpoint.overrun == 0 and rig.endpoint.unused() == []
    sent = rig.endpoint.sent_usage(side=True)
    assert sent == ASKS + DONE + ASKS + DONE + ASKS + DONE
    rig.usage_becomes(sid, sent)
    assert rig.get(sid)["conversation_id"] == cid
    client.close()


def test_the_turns_of_a_real_conversation_in_order(rig: Rig) -> None:
    """Issue 56 (the server's part of acceptance 1): a prompt, a plan (``todo_write``), a
    shell call that asks permission, allowed over REST, its output, the answer: the
    session's turn events in that order, with the command and the output exact (the
    output as Qwen showed it: the model is sent it framed by the command, folder, exit
    code...)."""
    marker, command = rig.marker, rig.marker_command
    todos = {"todos": [{"id": "1", "content": "Print the marker", "status": "in_progress"}]}
    agent = rig.qwen()
    sid = agent["id"]
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    rig.attention_becomes(sid, "ready", "a fresh session")
    before = len(rig.endpoint.turns())
    rig.endpoint.add(
        Reply("Planning-it", tool=ToolCall("todo_write", todos), usage=ASKS),
        Reply("Printing-it", tool=qwen_shell(command, "Print the marker"), usage=ASKS),
        Reply("Printed-it", usage=DONE),
    )
    rig.send(sid, "print the marker")
    request = rig.pending(sid)
    assert (request["tool"], request["command"]) == ("run_shell_command", command)
    assert not marker.exists()
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == before + 3, what="the answer")
    rig.attention_becomes(sid, "waiting", "the turn's end")

    shown = rig.turn_events(sid, "Printed-it")
    assert [(e["type"], e.get("tool")) for e in shown] == [
        ("user_message", None),
        ("agent_message", None),
        ("tool_call", "todo_write"),
        ("tool_call_update", None),
        ("plan", None),
        ("agent_message", None),
        ("tool_call", "run_shell_command"),
        ("tool_call_update", None),
        ("agent_message", None),
    ], shown
    said = [e["text"] for e in shown if e["type"].endswith("_message")]
    assert said == ["print the marker", "Planning-it", "Printing-it", "Printed-it"]
    planning, planned, made = shown[2:5]
    assert (planned["tool_call_id"], planned["status"]) == (planning["tool_call_id"], "completed")
    assert made["entries"] == [{"content": "Print the marker", "status": "in_progress"}]
    assert "partial" not in made  # the whole list each time
    call, output = shown[6:8]
    rig.marker_printed(sid, call, output, "run_shell_command", "turn-42")
    client.close()


def test_restore_after_a_reboot_resumes_the_conversation(rig: Rig) -> None:
    agent = rig.qwen()
    sid, cid = agent["id"], agent["conversation_id"]
    before = len(rig.endpoint.turns())
    rig.endpoint.add(Reply("First-answer", usage=HELLO), Reply("Second-answer", usage=DONE))
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    client.drain(1)
    type_into(client, "remember teal-heron-5")
    client.wait_for(shows("First-answer"), timeout=120)
    rig.attention_becomes(sid, "waiting", "the first turn's end")
    # Qwen shows the reply and runs its Stop hook while its write of the reply to the
    # conversation file can still be pending (a power loss then resumes without it):
    # the reboot comes once the reply's usage is read from that file
    rig.usage_becomes(sid, HELLO)
    client.close()

    rig.reboot()
    assert rig.get(sid)["status"] == "interrupted"
    status, after = rig.server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert after["argv"][1:3] == ["--resume", cid], after["argv"]
    assert after["attention"] not in NEEDS_YOU
    resumed = rig.attention_becomes(sid, "ready", "the resumed session")
    assert resumed["conversation_id"] == cid

    client = rig.server.ws(after["name"])
    marker = "--- restored qwen session "
    client.wait_for(shows("First-answer", PROMPT, after=marker), timeout=120)
    client.drain(1)
    type_into(client, "what did I ask you to remember?")
    client.wait_for(shows("Second-answer"), timeout=120)
    rig.attention_becomes(sid, "waiting", "the resumed session's turn")
    _, second = rig.endpoint.turns()[before:]
    assert "teal-heron-5" in second.text()  # the earlier messages sent again
    assert "First-answer" in second.text()
    rig.usage_becomes(sid, HELLO + DONE)
    client.close()


def pending_now(rig: Rig, sid: str) -> list[Any]:
    """The session's pending permission requests now."""
    status, body = rig.server.request("GET", f"/api/agents/requests?session={sid}")
    assert status == 200, body
    return list(body)
