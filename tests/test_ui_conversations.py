"""Conversations in JupyterLab (real server, real headless Chromium, the fake agent CLIs):
a resume that cannot work is shown with the CLI's reason and an offer of a fresh session
in the same folder (which opens with the old transcript's end), and an agent's
conversation opens as a rendered Markdown document.

The server, browser and helpers are tests/test_ui.py's (this module gets a server of its
own, whose archive follows quickly). Screenshots go to ``tests/artifacts/ui/``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_ui import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Lab,
    open_lab,
    row,
    shot,
    show_panel,
    wait_notification,
    wait_status,
    wait_text,
)

from jupyter_agents.archive import ConversationArchive
from jupyter_agents.pytest_plugin import kill_backends, poll

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    sync_api = test_ui.playwright()
    root = tmp_path_factory.mktemp("ui-conversations")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        lab = Lab(root, browser)
        lab.server.extra_args.append("--AgentsApp.refresh_interval=0.3")
        try:
            lab.server.start()
            yield lab
        finally:
            lab.server.stop(signal.SIGKILL)
            kill_backends(lab.state_dir)
            browser.close()


def talked(lab: Lab, words: str) -> tuple[dict[str, Any], Path]:
    """A claude session (through REST) that got ``words``; returns once the archive
    holds its conversation file (and that file)."""
    status, agent = lab.server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(lab.work)}
    )
    assert status == 201, agent
    lab.server.type_line(agent["name"], words, f"claude heard: {words}")
    archive = ConversationArchive(lab.state_dir)

    def whole() -> Path | None:
        kept = archive.index(agent["id"]).kept()
        if not kept:
            return None
        source, copy = Path(kept[0].source), archive.folder(agent["id"]) / kept[0].name
        same = source.exists() and copy.exists() and copy.read_bytes() == source.read_bytes()
        return source if same else None

    return agent, poll(whole, timeout=30, what="the archive to hold the conversation")


def test_a_conversation_opens_as_a_document(lab: Lab, page: Any) -> None:
    agent, _ = talked(lab, "show-me-as-markdown")
    open_lab(page, lab, reset=True)
    show_panel(page)
    row(page, agent["id"]).locator("button[data-action='conversation']").click()
    doc = page.locator(
        f".jp-AgentsConversationDocument .jp-AgentsConversation[data-session-id='{agent['id']}']"
    )
    doc.locator("h1").wait_for()
    assert f"claude session {agent['name']}" in doc.locator("h1").inner_text()
    assert "show-me-as-markdown" in doc.locator("blockquote").first.inner_text()
    tool = doc.locator("li", has_text="Tool call")
    assert "Bash" in tool.first.inner_text() and "echo fake" in tool.first.inner_text()
    assert doc.locator("li code", has_text="echo fake").count() >= 1  # rendered, not raw
    assert "claude heard: show-me-as-markdown" in doc.inner_text()
    tab = page.locator(".lm-TabBar-tab", has_text="Conversation:")
    assert tab.count() == 1
    shot(page, "conversation-document")


def test_a_resume_that_cannot_work_says_why_and_offers_a_fresh_session(lab: Lab, page: Any) -> None:
    agent, source = talked(lab, "words-that-cannot-come-back")
    # the machine reboots; the CLI's file and the archived copy are both gone
    lab.restart(signal.SIGKILL, kill_backend=True)
    source.unlink()
    archive = ConversationArchive(lab.state_dir)
    (archive.folder(agent["id"]) / archive.index(agent["id"]).kept()[0].name).unlink()

    open_lab(page, lab, reset=True)
    show_panel(page)
    wait_status(page, agent["id"], "interrupted")
    row(page, agent["id"]).locator("button[data-action='restore']").click()
    cid = agent["conversation_id"]
    reason = row(page, agent["id"]).locator(".jp-AgentsPanel-reason")
    reason.wait_for()
    assert f"No conversation found with session ID: {cid}" in reason.inner_text()
    wait_status(page, agent["id"], "interrupted")
    wait_notification(page, "could not be resumed")
    shot(page, "resume-failed-panel")
    model = lab.sessions()[agent["id"]]
    assert model["status"] == "interrupted" and model["conversation_id"] == cid

    before = set(lab.sessions())
    reason.locator("button[data-action='fresh']").click()
    fresh = poll(
        lambda: [s for sid, s in lab.sessions().items() if sid not in before],
        what="the fresh session",
    )[0]
    assert (fresh["kind"], fresh["cwd"], fresh["status"]) == ("claude", str(lab.work), "running")
    # its terminal opens: the old session's end, the marker line, then the new claude
    wait_text(page, rf"FAKE CLAUDE conversation {fresh['conversation_id']}")
    wait_text(page, "words-that-cannot-come-back")
    wait_text(page, rf"above: the end of session {agent['id']}")
    shot(page, "resume-failed-fresh")
    assert lab.sessions()[agent["id"]]["status"] == "interrupted"  # the old record stays
