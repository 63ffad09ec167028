"""The real Gemini CLI in ACP mode (``gemini --acp``, issue 58) against the scripted
model endpoint on 127.0.0.1, through a running server: a prompt over REST, the model's
shell call, Gemini's permission request made a pending request with its own options,
answered over REST, the command run, the answer; the turns from the journal in order;
what the turn spent, in the session's usage.

No plan: Gemini CLI 0.61 sends no ACP ``plan`` update (its ACP agent sends message,
thought, tool call and command updates only; its ``write_todos`` call, offered with a
Gemini 2 model, is a tool call like any other, with no content). Skipped, with the
reason, where the CLI is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_endpoint import (
    GeminiGenerateContent,
    ModelEndpoint,
    Usage,
    gemini_env,
    gemini_home,
    gemini_shell,
)
from test_real_gemini_turns import _SCRUB, GEMINI
from turn_rig import AcpRig, realcli_marks, rig_fixture

pytestmark = realcli_marks(GEMINI.missing())
#: usage figures to tell apart (no cache writes: the Gemini API has no count of them)
ASKS = Usage(input=2207, output=31, cache_read=768)
DONE = Usage(input=2409, output=7, cache_read=1536)


def _setup(endpoint: ModelEndpoint, base: Path, project: Path) -> tuple[dict[str, str], Any]:
    home = gemini_home(base / "home", project)
    return gemini_env(endpoint, home), {"home": home}


rig = rig_fixture(AcpRig, "geminiacp", GeminiGenerateContent, _setup, _SCRUB, [GEMINI.path.parent])


def test_a_gemini_acp_turn_with_a_permission_answered_over_rest(rig: AcpRig) -> None:
    made = rig.project / "made-over-acp"
    shell = gemini_shell(f"touch {made}", "Make it")
    turn = rig.acp_turn_with_a_permission("gemini", made, shell, None, [ASKS, DONE])
    assert turn.agent["argv"][-1] == "--acp"
    assert [s["label"] for s in turn.request["suggestions"]] == ["Allow for this session"]

    # what it spent: the turn's replies, read from Gemini's own conversation file (its
    # ACP agent reports no usage_update; its model router's side requests not counted)
    sent = rig.endpoint.sent_usage()
    assert sent == ASKS + DONE
    usage = rig.usage_becomes(turn.agent["id"], sent)
    assert [c["conversation_id"] for c in usage["conversations"]] == [turn.cid]
