"""The real Gemini CLI completing turns against a scripted model endpoint on 127.0.0.1
(tests/model_endpoint.py, the Gemini API; docs/development.md), through a running
server.

- The conversation id is exact from the launch (``--session-id``); a fresh session is
  ``ready``.
- A shell command that writes shows Gemini's dialog: the session is ``permission``
  (its ``Notification`` hook); allowed in the terminal, the command runs and the turn's
  end (``AfterAgent``) makes it ``waiting``. Gemini's hooks cannot answer a request, so
  none is pending elsewhere.
- The usage totals are the tokens the endpoint sent for the turns (its model router's
  side requests are not in the conversation file, and not counted).
- After a reboot, restore resumes the same conversation (``--resume``): the next request
  carries the earlier messages.
- Its turn events: a prompt, a plan, a shell call allowed in its dialog, its output and
  the answer, in order (issue 56).

Gemini reads our hooks only from a file root owns, in folders only root may write
(``jupyter_agents.agents.gemini``): the state dir is made in the HOME of the user
running the tests when that holds, and the attention checks are skipped, with the
reason, where it cannot. Skipped, with the reason, where the CLI is not installed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from model_endpoint import (
    GeminiGenerateContent,
    ModelEndpoint,
    Reply,
    ToolCall,
    Usage,
    gemini_env,
    gemini_home,
    gemini_shell,
)
from test_real_cli import type_into
from turn_rig import RealCli, TurnRig, realcli_marks, serving
from xterm_probe import shows

from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.agents.base import is_uuid
from jupyter_agents.agents.gemini import accepted_as_system_file
from jupyter_agents.pytest_plugin import TermClient

#: the version .ci/run installs
GEMINI = RealCli.pinned("Gemini CLI", "gemini", "JUPYTER_AGENTS_REAL_GEMINI", "0.61.0")


def hooks_missing() -> str | None:
    """Why Gemini would not read our hooks file in a state dir made here, or None."""
    home = Path(os.path.expanduser("~"))
    if os.geteuid() != 0 or not accepted_as_system_file(home / "state" / "hooks.json"):
        return (
            "Gemini CLI reads a hooks file only where root owns it and every folder above "
            f"it (uid {os.geteuid()}, {home}): no attention from its hooks here"
        )
    return None


_NO_HOOKS = hooks_missing()
needs_hooks = pytest.mark.skipif(_NO_HOOKS is not None, reason=_NO_HOOKS or "")

pytestmark = realcli_marks(GEMINI.missing(), "real_gemini_turns")

#: the placeholder of Gemini's input box, shown while it waits for a prompt
PROMPT = "Type your message"
#: usage figures to tell apart (no cache writes: the Gemini API has no count of them)
ASKS = Usage(input=2311, output=41, cache_read=1024)
DONE = Usage(input=2417, output=12, cache_read=2048)
AGAIN = Usage(input=2533, output=9, cache_read=3072)
#: what the machine may set that would change what the CLI does offline
_SCRUB = (
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT",
    "GEMINI_MODEL",
    "GEMINI_CLI_HOME",
    "GEMINI_CLI_TRUST_WORKSPACE",
    "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
    "GEMINI_CLI_SYSTEM_DEFAULTS_PATH",
    # Gemini runs headless, even in a terminal, when either says "true" (isHeadlessMode);
    # .ci/run runs with CI=true
    "CI",
    "GITHUB_ACTIONS",
)


@dataclass
class Rig(TurnRig):
    #: the session the tests share (made by the first), and its conversation
    sid: str = ""
    cid: str = ""


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    return gemini_env(endpoint, gemini_home(base / "home", project)), {}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    base = tmp_path_factory.mktemp("gemini-turns")
    # where Gemini reads our hooks file (see hooks_missing), else where it would not
    here = Path(os.path.expanduser("~"))
    owned = None if _NO_HOOKS else Path(tempfile.mkdtemp(prefix=".jupyter-agents-", dir=here))
    try:
        state = (owned or base) / "state"
        provider = GeminiGenerateContent()
        yield from serving(Rig, base, provider, _setup, _SCRUB, [GEMINI.path.parent], state)
    finally:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)


def start(rig: Rig) -> tuple[dict[str, Any], TermClient]:
    status, agent = rig.server.request(
        "POST", "/api/agents/sessions", {"kind": "gemini", "cwd": str(rig.project)}
    )
    assert status == 201, agent
    rig.sid, rig.cid = agent["id"], agent["conversation_id"]
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    client.drain(1)
    return agent, client


def test_the_id_is_exact_and_a_tool_turn_is_counted(rig: Rig) -> None:
    made = rig.project / "made-by-gemini"
    rig.endpoint.add(
        Reply("Writing-the-file", tool=gemini_shell(f"touch {made}", "Make it"), usage=ASKS),
        Reply("Made-it", usage=DONE),
    )
    agent, client = start(rig)
    sid, cid = rig.sid, rig.cid
    assert is_uuid(cid) and agent["argv"][-2:] == ["--session-id", cid]

    type_into(client, "make the file")
    client.wait_for(shows("Allow execution"), timeout=120)  # its dialog, nothing ran yet
    assert not made.exists()
    (asked,) = rig.endpoint.turns()
    assert asked.reply is not None and asked.reply.tool is not None
    assert "make the file" in asked.text()
    if _NO_HOOKS is None:
        shown = rig.attention_becomes(sid, "permission", "Gemini's dialog")
        assert shown["attention"] in NEEDS_YOU and shown["attention_source"] == "hooks"
        status, pending = rig.server.request("GET", f"/api/agents/requests?session={sid}")
        assert (status, pending) == (200, [])  # its hooks cannot answer: nothing waits here
    client.drain(1)
    client.stdin("\r")  # "1. Allow once"
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == 2, what="the tool's result")
    client.wait_for(shows("Made-it"), timeout=60)
    assert made.exists()
    assert "functionResponse" in rig.endpoint.turns()[1].text()

    # what it spent: the turns' usage, the reply with the tool call counted once
    sent = rig.endpoint.sent_usage()
    assert sent == ASKS + DONE
    usage = rig.usage_becomes(sid, sent)
    (model,) = usage["models"]
    assert model == asked.path.split("/")[-1].split(":")[0]  # the model the CLI asked for
    assert rig.get(sid)["conversation_id"] == cid
    client.close()


@needs_hooks
def test_attention_follows_the_hooks(rig: Rig) -> None:
    """The events of the turn above, in order, and where they left the session."""
    assert rig.sid, "runs after the turn above"
    done = rig.attention_becomes(rig.sid, "waiting", "the turn's end")
    assert done["attention_reason"] is None
    order = ["SessionStart", "UserPromptSubmit", "PreToolUse", "Notification", "PostToolUse"]
    events = iter(rig.spooled(rig.sid))
    assert all(event in events for event in [*order, "Stop"]), rig.spooled(rig.sid)


def test_restore_after_a_reboot_resumes_the_conversation(rig: Rig) -> None:
    assert rig.sid, "runs after the turn above"
    sid, cid = rig.sid, rig.cid
    rig.endpoint.add(Reply("You-asked-for-a-file", usage=AGAIN))
    rig.reboot()
    assert rig.get(sid)["status"] == "interrupted"
    status, after = rig.server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert after["argv"][-2:] == ["--resume", cid] and after["conversation_id"] == cid
    client = rig.server.ws(after["name"])
    # Gemini resets the terminal and clears its scrollback (ESC c, ESC [3J) once it
    # starts: the old screen and the restore's marker go; it shows the resumed
    # conversation. Until then the old screen's replay shows the same words (and what
    # is typed meanwhile is lost): the marker gone tells Gemini's screen from it
    marker = "--- restored gemini session "
    client.wait_for(shows("Made-it", PROMPT, absent=marker), timeout=120)
    client.drain(1)
    if _NO_HOOKS is None:
        rig.attention_becomes(sid, "ready", "the resumed session")
    type_into(client, "which file was made")
    client.wait_for(shows("You-asked-for-a-file"), timeout=120)
    last = rig.endpoint.turns()[-1]
    assert "which file was made" in last.text() and "make the file" in last.text()
    assert "Made-it" in last.text()  # the earlier messages, sent again
    if _NO_HOOKS is None:
        rig.attention_becomes(sid, "waiting", "the resumed session's turn")
    rig.usage_becomes(sid, ASKS + DONE + AGAIN)  # one conversation file, across the restore
    client.close()


def test_the_turns_of_a_real_conversation_in_order(rig: Rig) -> None:
    """Issue 56 (the server's part of acceptance 1): a prompt, a plan (``write_todos``), a
    shell call that asks permission, allowed, its output, the answer: the session's turn
    events in that order, with the command and the output exact (the output as the
    command printed it: the model is sent it framed by ``Output:`` and its process
    group). Gemini's hooks cannot answer a request, so both of its dialogs (it asks
    before ``write_todos`` too) are answered in the terminal; and it offers
    ``write_todos`` with a Gemini 2 model only (``-m``)."""
    marker, command = rig.marker, rig.marker_command
    todos = {"todos": [{"description": "Print the marker", "status": "in_progress"}]}
    before = len(rig.endpoint.turns())
    rig.endpoint.add(
        Reply("Planning-it", tool=ToolCall("write_todos", todos), usage=ASKS),
        Reply("Printing-it", tool=gemini_shell(command, "Print the marker"), usage=ASKS),
        Reply("Printed-it", usage=DONE),
    )
    status, agent = rig.server.request(
        "POST",
        "/api/agents/sessions",
        {"kind": "gemini", "cwd": str(rig.project), "args": ["-m", "gemini-2.5-flash"]},
    )
    assert status == 201, agent
    sid = agent["id"]
    client = rig.server.ws(agent["name"])
    client.wait_for(shows(PROMPT), timeout=120)
    client.drain(1)
    type_into(client, "print the marker")
    client.wait_for(shows("Set 1 todo(s)", "Allow once"), timeout=120)  # its plan asks too
    client.drain(1)
    client.stdin("\r")  # "1. Allow once"
    client.wait_for(shows("Allow execution"), timeout=120)
    assert not marker.exists()
    client.drain(1)
    client.stdin("\r")  # "1. Allow once"
    rig.endpoint.wait_for(lambda _: len(rig.endpoint.turns()) == before + 3, what="the answer")

    shown = rig.turn_events(sid, "Printed-it")
    assert [(e["type"], e.get("tool")) for e in shown] == [
        ("user_message", None),
        ("agent_message", None),
        ("tool_call", "write_todos"),
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
