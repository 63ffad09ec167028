"""Claude Code in ACP mode (issue 58) through the real adapter
(``claude-agent-acp``, npm ``@agentclientprotocol/claude-agent-acp``, which runs the
Claude Code its SDK bundles) against the scripted model endpoint on 127.0.0.1, through a
running server:

- the conversation id is the ACP session id, and it is Claude's own session id: the
  one the CLI names in its requests and its transcript's file name;
- a prompt over REST; the model's TodoWrite becomes the ACP plan; its Bash call asks
  permission, made a pending request with the adapter's own options, answered over
  REST; the command runs; the answer; the turns from the journal in order;
- what the turn spent is the session's usage, by kind, exactly what the endpoint sent
  (read from Claude's transcript, as for a terminal session);
- after a reboot, restore resumes the same conversation (``session/resume``, which the
  adapter offers): the next request carries the earlier turn.

Skipped, with the reason, where the adapter is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model_endpoint import (
    AnthropicMessages,
    ModelEndpoint,
    ToolCall,
    bash,
)
from test_real_cli import _SCRUB, conversation_path
from test_real_turns import ASKS, DONE, HELLO, claude_setup
from turn_rig import PLANNED, AcpRig, RealCli, realcli_marks, rig_fixture

from jupyter_agents.agents.base import is_uuid

#: the version .ci/run installs
ADAPTER = RealCli.pinned(
    "claude-agent-acp", "claude-agent-acp", "JUPYTER_AGENTS_REAL_CLAUDE_ACP", "0.101.0"
)
pytestmark = realcli_marks(ADAPTER.missing(), "real_claude_acp")

#: besides the credentials: the adapter lets a root process run Claude in bypass mode
#: when ``IS_SANDBOX`` is set at all, Claude Code only when it is ``1``, so any other
#: value fails every new ACP session ("cannot be used with root/sudo privileges")
SCRUB = (*_SCRUB, "IS_SANDBOX")


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    env, fields = claude_setup(endpoint, base, project)
    # the adapter's own default is Claude's "auto" mode, which (against an endpoint that
    # is not Anthropic's) ran the command without asking; "default" asks, as the
    # terminal does
    settings = {"permissions": {"defaultMode": "default"}}
    (fields["home"] / ".claude" / "settings.json").write_text(json.dumps(settings))
    return env, fields


rig = rig_fixture(AcpRig, "claudeacp", AnthropicMessages, _setup, SCRUB, [ADAPTER.path.parent])


def test_a_claude_acp_turn_with_a_plan_and_a_permission_answered_over_rest(rig: AcpRig) -> None:
    made = rig.project / "made-over-acp"
    # the adapter makes the ACP plan of the model's TodoWrite call as it streams; the
    # Claude Code it bundles has that tool off (its task tools instead, found through
    # ToolSearch) and answers the call with an error, which the model takes in stride
    todos = [{"content": c, "status": s, "activeForm": c} for c, s in PLANNED]
    plan = ToolCall("TodoWrite", {"todos": todos})
    shell = bash(f"touch {made}", "Make it")
    turn = rig.acp_turn_with_a_permission("claude", made, shell, plan, [HELLO, ASKS, DONE])
    assert turn.agent["argv"][-1] == "claude-agent-acp"
    assert is_uuid(turn.cid)
    assert turn.request["suggestions"] == []  # the adapter offers "Yes" and "No" only

    # the ACP session id is Claude's own: its requests name it, its transcript is it
    turns = rig.endpoint.turns()
    assert turns and {t.conversation for t in turns} == {turn.cid}
    assert conversation_path(rig.home, rig.project, turn.cid).is_file()
    # what it spent: the turn's replies, by kind, read from that transcript (the prompt
    # suggestion the adapter asks for after the turn is not written there)
    sent = rig.endpoint.sent_usage(turn.cid)
    assert sent == HELLO + ASKS + DONE and rig.endpoint.overrun == 0
    rig.usage_becomes(rig.sid, sent)


def test_after_a_reboot_restore_resumes_the_claude_conversation(rig: AcpRig) -> None:
    rig.acp_resumed_after_a_reboot()
    assert rig.endpoint.turns()[-1].conversation == rig.cid
