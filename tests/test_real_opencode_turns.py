"""The real OpenCode CLI completing turns against a scripted model endpoint on 127.0.0.1
(tests/model_endpoint.py, OpenAI chat completions; docs/development.md), through a
running server, with our plugin loaded by the session's environment:

- started, the session has no conversation yet (OpenCode makes its ``ses_...`` id at
  the first prompt) and is ``ready``; at the first prompt its conversation id is the one
  OpenCode's database holds, exactly;
- a shell command (``"permission": {"bash": "ask"}``) puts it in ``permission``, with a
  pending request that, allowed over REST, runs the command with no key pressed; the
  turn's end makes it ``waiting``;
- its usage totals are the tokens the endpoint sent for the turn (OpenCode records its
  title request's usage nowhere, and neither do we);
- after a power loss, restore resumes the same conversation: the next request to the
  endpoint carries the earlier messages;
- its turn events: a prompt, a plan, a shell call allowed over REST, its output and the
  answer, in order (issue 56).

One server, one endpoint, one HOME and one CLI start (plus the restore) serve the
module. Skipped, with the reason, where the CLI is not installed.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_endpoint import (
    ModelEndpoint,
    OpenAIChat,
    Reply,
    ToolCall,
    Usage,
    opencode_env,
    opencode_home,
)
from test_real_cli import _SCRUB, type_into
from turn_rig import RealCli, TurnRig, realcli_marks, rig_fixture
from xterm_probe import shows

from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.agents.opencode import is_conversation_id
from jupyter_agents.pytest_plugin import poll

#: the version .ci/run installs
OPENCODE = RealCli.pinned("OpenCode", "opencode", "JUPYTER_AGENTS_REAL_OPENCODE", "1.18.33")
pytestmark = realcli_marks(OPENCODE.missing(), "real_opencode_turns")

#: what OpenCode's empty input box says
PROMPT = "Ask anything"
#: usage figures to tell apart (the chat API counts no cache writes)
ASKS = Usage(input=2100, output=40, cache_read=512)
DONE = Usage(input=2300, output=12, cache_read=1536)
AGAIN = Usage(input=2500, output=9, cache_read=2048)


@dataclass
class Rig(TurnRig):
    home: Path

    def conversations(self) -> list[str]:
        """The top-level conversations OpenCode's own database holds."""
        db = sqlite3.connect(self.home / ".local" / "share" / "opencode" / "opencode.db")
        try:
            return [r[0] for r in db.execute("SELECT id FROM session WHERE parent_id IS NULL")]
        finally:
            db.close()


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    home = base / "home"
    opencode_home(home, endpoint)
    return opencode_env(home), {"home": home}


_OPENCODE_SCRUB = (*_SCRUB, "OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR", "OPENCODE_DB")
rig = rig_fixture(
    Rig, "opencode-turns", OpenAIChat, _setup, _OPENCODE_SCRUB, [OPENCODE.path.parent]
)


def test_turn_permission_usage_and_resume_after_a_reboot(rig: Rig) -> None:
    made = rig.project / "made-by-opencode"
    rig.endpoint.add(
        Reply(
            "Making-it",
            tool=ToolCall("bash", {"command": f"touch {made}", "description": "Make a file"}),
            usage=ASKS,
        ),
        Reply("Made-the-file", usage=DONE),
        Reply("You-said-amber-fox-7", usage=AGAIN),
    )
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "opencode", "cwd": str(rig.project)}
    )
    assert status == 201, agent
    sid = agent["id"]
    assert agent["conversation_id"] is None  # OpenCode has made none yet
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    ready = rig.attention_becomes(sid, "ready", "a fresh session")
    assert ready["attention_source"] == "hooks" and ready["conversation_id"] is None
    assert rig.conversations() == []

    type_into(client, "make the file and remember amber-fox-7")
    asked = rig.attention_becomes(sid, "permission", "OpenCode's permission dialog")
    (cid,) = rig.conversations()
    assert is_conversation_id(cid) and asked["conversation_id"] == cid  # exact, at once
    assert not made.exists()  # nothing ran: it waits for an answer
    (request,) = poll(
        lambda: rig.server.request("GET", f"/api/agents/requests?session={sid}")[1],
        timeout=60,
        what="a pending permission request",
    )
    assert request["tool"] == "Bash" and request["command"] == f"touch {made}"
    client.wait_for(shows("Permission required"), timeout=60)  # its dialog meanwhile
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == 2, what="the tool's result")
    assert made.exists()
    done = rig.attention_becomes(sid, "waiting", "the turn's end")
    assert done["attention"] in NEEDS_YOU and done["conversation_id"] == cid
    client.wait_for(shows("Made-the-file"), timeout=60)

    # what it spent: the tokens the endpoint sent for the turn's two replies, by kind
    assert rig.endpoint.sent_usage() == ASKS + DONE
    usage = poll(
        lambda: (u := rig.get(sid)["usage"]) and u["tokens"] == (ASKS + DONE).as_tokens() and u,
        timeout=60,
        what=f"usage {(ASKS + DONE).as_tokens()}",
    )
    assert list(usage["models"]) == ["scripted-model"]
    client.close()

    rig.reboot()
    assert rig.get(sid)["status"] == "interrupted"
    status, after = rig.server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert after["argv"][-2:] == ["--session", cid] and after["conversation_id"] == cid
    client = rig.server.ws(after["name"])
    client.wait_for(shows("Made-the-file", after="--- restored opencode session "), timeout=120)
    rig.attention_becomes(sid, "ready", "the resumed session")
    type_into(client, "what did I ask you to remember?")
    rig.attention_becomes(sid, "waiting", "the resumed session's turn")
    third = rig.endpoint.turns()[2]
    told = json.loads(third.text())["messages"]
    assert any("amber-fox-7" in json.dumps(m) for m in told[:-1]), told  # sent again
    assert rig.conversations() == [cid] and rig.get(sid)["conversation_id"] == cid
    total = ASKS + DONE + AGAIN
    poll(
        lambda: (u := rig.get(sid)["usage"]) and u["tokens"] == total.as_tokens(),
        timeout=60,
        what="usage across the restore",
    )
    client.close()


def test_the_turns_of_a_real_conversation_in_order(rig: Rig) -> None:
    """Issue 56 (the server's part of acceptance 1): a prompt, a plan (``todowrite``), a
    bash call that asks permission, allowed over REST, its output, the answer: the
    session's turn events in that order (each text before the tool call that followed
    it, however soon the call ended), with the command and the output exact."""
    marker, command = rig.marker, rig.marker_command
    todo = {"content": "Print the marker", "status": "in_progress", "priority": "high"}
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "opencode", "cwd": str(rig.project)}
    )
    assert status == 201, agent
    sid = agent["id"]
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    rig.attention_becomes(sid, "ready", "a fresh session")
    before = len(rig.endpoint.turns())
    rig.endpoint.add(
        Reply("Planning-it", tool=ToolCall("todowrite", {"todos": [todo]}), usage=ASKS),
        Reply(
            "Printing-it",
            tool=ToolCall("bash", {"command": command, "description": "Print the marker"}),
            usage=ASKS,
        ),
        Reply("Printed-it", usage=DONE),
    )
    rig.send(sid, "print the marker")
    request = rig.pending(sid)
    assert (request["tool"], request["command"]) == ("Bash", command)
    assert not marker.exists()
    rig.allow(request)
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == before + 3, what="the answer")
    rig.attention_becomes(sid, "waiting", "the turn's end")

    shown = rig.turn_events(sid, "Printed-it")
    assert [(e["type"], e.get("tool")) for e in shown] == [
        ("user_message", None),
        ("agent_message", None),
        ("tool_call", "todowrite"),
        ("tool_call_update", None),
        ("plan", None),
        ("agent_message", None),
        ("tool_call", "bash"),
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
    rig.marker_printed(sid, call, output, "bash", "turn-42\n")
    client.close()
