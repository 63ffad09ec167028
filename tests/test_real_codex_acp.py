"""Codex in ACP mode (issue 58) through the real adapter (``codex-acp``, npm
``@agentclientprotocol/codex-acp``, on ``codex app-server`` of the Codex it bundles)
against the scripted model endpoint on 127.0.0.1, through a running server:

- the conversation id is the ACP session id, and it is Codex's own thread id: the one
  its rollout file is named by;
- a prompt over REST; the model's ``update_plan`` becomes the ACP plan; its shell call
  asks approval, made a pending request with the adapter's own options (its "don't ask
  again" one a suggestion), answered over REST; the command runs; the answer; the turns
  from the journal in order;
- what the turn spent is the session's usage, by kind, exactly what the endpoint sent
  (read from Codex's rollout, as for a terminal session);
- after a reboot, restore resumes the same thread (``session/resume``, which the adapter
  offers): the next request carries the earlier turn.

The adapter starts in its "Auto review" mode, where a model request (Codex's guardian)
decides approvals; ``INITIAL_AGENT_MODE=workspace-write`` (its "Workspace access": ask
the user) is set as a person would set it. Skipped, with the reason, where the adapter
is not installed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from model_endpoint import (
    ModelEndpoint,
    OpenAIResponses,
    ToolCall,
    Usage,
    codex_shell,
)
from test_real_cli import _SCRUB
from test_real_codex_turns import codex_setup
from turn_rig import PLANNED, AcpRig, RealCli, realcli_marks, rig_fixture

#: the version .ci/run installs (it has no ``--version``: its package says its version)
ADAPTER = RealCli.pinned("codex-acp", "codex-acp", "JUPYTER_AGENTS_REAL_CODEX_ACP", "2.6.0")
_PACKAGE = ADAPTER.path.parent.parent / "lib/node_modules/@agentclientprotocol/codex-acp"
ADAPTER = replace(
    ADAPTER, version_argv=["node", "-p", f"require({str(_PACKAGE / 'package.json')!r}).version"]
)
pytestmark = realcli_marks(ADAPTER.missing(), "real_codex_acp")
#: usage figures to tell apart: each reply its own
PLANS = Usage(input=1717, output=23, cache_read=512, cache_creation=32)
ASKS = Usage(input=2100, output=40, cache_read=1024, cache_creation=16)
DONE = Usage(input=2300, output=12, cache_read=2048)


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    env, fields = codex_setup(endpoint, base, project)
    return {**env, "INITIAL_AGENT_MODE": "workspace-write"}, fields


rig = rig_fixture(AcpRig, "codexacp", OpenAIResponses, _setup, _SCRUB, [ADAPTER.path.parent])


def test_a_codex_acp_turn_with_a_plan_and_an_approval_answered_over_rest(rig: AcpRig) -> None:
    made = rig.base / "made-over-acp"  # outside the workspace: the sandbox asks
    plan = ToolCall("update_plan", {"plan": [{"step": c, "status": s} for c, s in PLANNED]})
    shell = codex_shell(f"touch {made}", "Make it?")
    turn = rig.acp_turn_with_a_permission("codex", made, shell, plan, [PLANS, ASKS, DONE])
    assert turn.agent["argv"][-1] == "codex-acp"
    (always,) = turn.request["suggestions"]
    assert "don't ask again" in always["label"]
    calls = [e for e in turn.events if e["type"] == "tool_call"]
    assert calls[0]["title"] == f"touch {made}"

    # the ACP session id is Codex's thread id: its rollout is named by it
    rollouts = list((rig.home / ".codex" / "sessions").rglob(f"rollout-*-{turn.cid}.jsonl"))
    assert len(rollouts) == 1, rollouts
    # what it spent: the turn's replies, by kind, read from that rollout (the title
    # thread's requests are not the session's)
    sent = rig.endpoint.sent_usage(turn.cid)
    assert sent == PLANS + ASKS + DONE
    rig.usage_becomes(rig.sid, sent)


def test_after_a_reboot_restore_resumes_the_codex_thread(rig: AcpRig) -> None:
    rig.acp_resumed_after_a_reboot()
