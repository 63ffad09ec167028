"""Transcript search and replay in JupyterLab (real server, real headless Chromium):
the Agents panel's search box finds a line a shell printed, a click on the hit opens
the session (an ended one as a Replay tab in the asciinema player, paused at the line;
a running one as its terminal), and the replay plays to the end of the recording.

The server, browser and helpers are tests/test_ui.py's (imported; this module gets a
server of its own). Screenshots go to ``tests/artifacts/ui/``; the docs embed copies
kept in ``docs/ui/``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import test_ui
from test_ui import Lab, act, open_lab, shot, show_panel, wait_current_terminal, wait_status

from jupyter_agents.pytest_plugin import poll

# test_ui's fixtures: a server and a browser of this module's own
lab = test_ui.lab
page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(180)]

SCREEN_TEXT = """(id) => {
  const view = document.querySelector(`.jp-AgentsReplay[data-session-id='${id}']`);
  const text = view && view.querySelector('.ap-term-text');
  return text ? text.textContent.replace(/\\u00a0/g, ' ') : '';
}"""


def marker() -> tuple[str, str]:
    """A unique word, and a shell word that prints it without containing it (so the
    echoed command line is no match)."""
    tail = uuid.uuid4().hex[:10]
    return f"ZQX-{tail}", f'"ZQ""X-{tail}"'


def shell_printing(lab: Lab, script: str, expect: bytes) -> dict[str, Any]:
    """A shell session (through REST) that ran ``script``; returns once ``expect`` is
    in its transcript."""
    status, session = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, session
    client = lab.server.ws(session["name"])
    try:
        client.stdin(script + "\r")
        log = f"/api/agents/sessions/{session['id']}/log"
        poll(
            lambda: expect in (lab.server.request("GET", log)[1] or b""),
            timeout=20,
            what=f"{expect!r} in the transcript",
        )
    finally:
        client.close()
    return session  # type: ignore[no-any-return]


def search(page: Any, query: str) -> Any:
    """Search from the panel's box (Enter); the result list."""
    box = page.locator("#jupyter-agents-panel .jp-AgentsSearch-input")
    box.fill(query)
    box.press("Enter")
    return page.locator("#jupyter-agents-panel .jp-AgentsSearch-hit")


def screen(page: Any, session_id: str) -> str:
    return str(page.evaluate(SCREEN_TEXT, session_id))


def test_search_hit_replays_an_ended_session(lab: Lab, page: Any) -> None:
    """An ended shell's line is found; its hit opens a Replay tab paused at that line
    (what follows is not on screen yet); at another speed it plays to the end."""
    word, printed = marker()
    session = shell_printing(
        lab,
        f'echo before; sleep 1; echo {printed}; sleep 1; echo "AF""TER-$((6*7))"',
        b"AFTER-42",
    )
    sid = session["id"]
    assert lab.server.request("DELETE", f"/api/agents/sessions/{sid}")[0] == 204

    open_lab(page, lab, reset=True)
    panel = show_panel(page)
    wait_status(page, sid, "killed")
    message = panel.locator(".jp-AgentsSearch-message")

    # a bad regular expression: the server's message, in place
    panel.locator(".jp-AgentsSearch-toggle[data-option='regex']").click()
    search(page, "ZQX-(")
    error = panel.locator(".jp-AgentsSearch-message.jp-mod-error")
    error.wait_for()
    assert error.inner_text().strip()
    # regex off searches again, as plain text: nothing
    panel.locator(".jp-AgentsSearch-toggle[data-option='regex']").click()
    poll(lambda: message.inner_text() == "No line matches.", what="no match for 'ZQX-('")

    hits = search(page, word)
    hit = hits.first
    hit.wait_for()
    assert hits.count() == 1, [h.inner_text() for h in hits.all()]
    assert hit.get_attribute("data-session-id") == sid
    assert hit.get_attribute("data-source") == "transcript"
    assert hit.locator("mark").inner_text() == word
    assert hit.locator(".jp-AgentsSearch-name").inner_text() == session["name"]
    assert hit.locator(".jp-AgentsSearch-source").count() == 0  # not a conversation
    assert float(hit.get_attribute("data-at") or 0) >= 0.5  # printed after "sleep 1"
    assert message.inner_text() == "1 matching line"
    shot(page, "search-ended-hit")

    hit.click()
    view = page.locator(f".jp-AgentsReplay[data-session-id='{sid}']")
    page.locator(f".jp-AgentsReplay[data-session-id='{sid}'][data-state='paused']").wait_for()
    poll(lambda: word in screen(page, sid), what="the hit's line on the replay's screen")
    assert "AFTER-42" not in screen(page, sid)  # paused at the hit
    tab = page.evaluate("() => window.jupyterapp.shell.currentWidget.title.label")
    assert tab == f"Replay {session['name']}"

    page.locator("select[data-option='speed']").select_option("4")
    poll(lambda: word in screen(page, sid), what="the hit's line at the new speed")
    assert "AFTER-42" not in screen(page, sid)  # it kept the place
    view.locator(".ap-playback-button").click()
    page.locator(f".jp-AgentsReplay[data-session-id='{sid}'][data-state='ended']").wait_for(
        timeout=30000
    )
    text = screen(page, sid)
    assert word in text
    assert "AFTER-42" in text
    shot(page, "replay")

    # the panel's Replay button shows the same tab (one per session)
    page.locator(
        "#jupyter-agents-panel .jp-AgentsPanel-group[data-group='ended'] > summary"
    ).click()
    act(page, sid, "replay")
    assert page.locator(".jp-AgentsReplay").count() == 1


def test_search_hit_of_a_running_session_opens_its_terminal(lab: Lab, page: Any) -> None:
    """A running shell's hit opens its terminal; its "Replay from here" opens a replay,
    paused at the hit though the hit is the last thing the session printed (so playing
    from it ends at once: the replay used to end there, not pause)."""
    word, printed = marker()
    session = shell_printing(lab, f"echo {printed}; exec sleep 1000", word.encode())
    try:
        open_lab(page, lab, reset=True)
        show_panel(page)
        wait_status(page, session["id"], "running")
        hit = search(page, word).first
        hit.wait_for()
        hit.click()
        wait_current_terminal(page, session["name"], "its terminal opened by the hit")
        show_panel(page)
        hit.locator("button[data-action='replay']").click()
        page.locator(
            f".jp-AgentsReplay[data-session-id='{session['id']}'][data-state='paused']"
        ).wait_for()
        poll(lambda: word in screen(page, session["id"]), what="the line on the replay's screen")
    finally:
        lab.server.request("DELETE", f"/api/agents/sessions/{session['id']}")


def test_conversation_hit_is_labelled(lab: Lab, page: Any) -> None:
    """A prompt typed to an agent is in its terminal transcript and in the agent's own
    conversation log (the fake Claude Code writes one): the latter's hit says so."""
    status, agent = lab.server.request("POST", "/api/agents/sessions", {"kind": "claude"})
    assert status == 201, agent
    word = f"ZQX-{uuid.uuid4().hex[:10]}"
    client = lab.server.ws(agent["name"])
    try:
        client.wait_for("FAKE CLAUDE")
        client.stdin(word + "\r")
        client.wait_for(f"claude heard: {word}")
    finally:
        client.close()
    try:
        open_lab(page, lab, reset=True)
        show_panel(page)
        hits = search(page, word)
        conversation = page.locator(".jp-AgentsSearch-hit[data-source='conversation']")
        conversation.first.wait_for()
        # two records hold it: the prompt, and the reply that quotes it ("claude heard")
        assert conversation.count() == 2
        assert conversation.first.get_attribute("data-session-id") == agent["id"]
        assert conversation.first.locator(".jp-AgentsSearch-source").inner_text() == "conversation"
        assert conversation.first.locator("mark").inner_text() == word
        transcript = page.locator(".jp-AgentsSearch-hit[data-source='transcript']")
        assert transcript.count() >= 1  # what the terminal showed
        assert hits.count() == conversation.count() + transcript.count()
        shot(page, "panel-search")
    finally:
        lab.server.request("DELETE", f"/api/agents/sessions/{agent['id']}")
