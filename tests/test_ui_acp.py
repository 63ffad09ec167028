"""ACP sessions in JupyterLab (issue 58; real server, real headless Chromium, the fake ACP
agent of tests/fakes/fake_acp_agent.py): an ACP session has no terminal to type into, so
its panel row's Open shows its turns with a prompt box under them. A prompt typed there
streams back as one row that grows; the agent's permission request is answered in the
view; Stop cancels a long turn; a prompt too long for the server's body limit is
refused in the box before it is sent, saying by how much; a prompt the server refuses
stays in the box with the server's words. A terminal session's turns have no box. The
panel's ACP button and the Launcher's "(ACP)" card start one and open its turns; a
notification's Open names and opens them.

The server, browser and helpers are tests/test_ui.py's (this module gets a server of its
own, with the ``fakeacp`` and ``mute`` kinds). Screenshots go to ``tests/artifacts/ui/``
(the docs embed copies kept in ``docs/ui/``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_ui import NEW_LAUNCHER, Lab, act, open_lab, running_lab, shot, show_panel, still

from jupyter_agents.acp import journal_folder
from jupyter_agents.acp.journal import Journal
from jupyter_agents.pytest_plugin import poll
from jupyter_agents.server.params import MAX_BODY

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]

pytest.importorskip("acp", reason="the ACP SDK is a test dependency (pip install -e .[test])")

FAKE_ACP = Path(__file__).parent / "fakes" / "fake_acp_agent.py"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def prepare(lab: Lab) -> None:
        # the fakeacp kind: the fake ACP agent, which speaks ACP as it is
        # and mute: an ACP agent that never answers, whose ACP session is never ready
        kinds = {
            "fakeacp": {"command": [sys.executable, str(FAKE_ACP)], "acp": []},
            "mute": {"command": ["sleep", "600"], "acp": []},
        }
        config = lab.work / "config"
        config.mkdir(exist_ok=True)
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"AgentsApp": {"agents": kinds}})
        )
        lab.server.extra_args.append("--AgentsApp.refresh_interval=0.3")

    with running_lab(tmp_path_factory.mktemp("ui-acp"), prepare) as lab:
        yield lab


def acp_session(lab: Lab) -> dict[str, Any]:
    """A fakeacp session in ACP mode, once its ACP session is ready (its id known)."""
    status, made = lab.server.request(
        "POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp", "cwd": str(lab.work)}
    )
    assert status == 201, made
    assert made["mode"] == "acp"
    poll(
        lambda: lab.sessions()[made["id"]]["conversation_id"],
        timeout=30,
        what="the ACP session ready",
    )
    return lab.sessions()[made["id"]]


def open_from_panel(lab: Lab, page: Any, session: dict[str, Any]) -> tuple[Any, Any]:
    """Open ``session`` with its panel row's Open on a fresh Lab page: its turns view
    and its prompt box, once both show."""
    open_lab(page, lab, reset=True)
    show_panel(page)
    act(page, session["id"], "open")
    sid = session["id"]
    view = page.locator(f".jp-AgentsTurns[data-session-id='{sid}']")
    box = page.locator(f".jp-AgentsPrompt[data-session-id='{sid}']")
    view.wait_for()
    box.locator("textarea").wait_for()
    poll(lambda: box.get_attribute("data-state") == "ready", what="the box ready")
    return view, box


def agent_rows(view: Any) -> Any:
    return view.locator(".jp-AgentsTurns-row[data-type='agent_message']")


def test_a_prompt_streams_back_as_one_row_and_its_request_is_answered_in_place(
    lab: Lab, page: Any
) -> None:
    """The row's Open shows the turns with a box under them (no terminal opens); Enter
    sends what the box holds, Shift+Enter makes a new line; the streamed reply is one
    row that grows with the whole text in order; while the turn runs Send waits and
    Stop shows; the agent's permission request is answered in the view; the turn's
    last words come after it."""
    session = acp_session(lab)
    sid = session["id"]
    page.set_viewport_size({"width": 1400, "height": 900})
    view, box = open_from_panel(lab, page, session)
    current = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    assert current == f"jupyter-agents-turns-{sid}"
    assert page.locator(".jp-Terminal").count() == 0  # no terminal: nothing to type into
    text = box.locator("textarea")
    assert text.evaluate("t => t === document.activeElement")  # where one types next
    send = box.locator("button[data-action='send']")
    stop = box.locator("button[data-action='cancel']")
    assert send.is_disabled() and not stop.is_visible()

    # Shift+Enter: a new line, nothing sent
    text.type("first line")
    text.press("Shift+Enter")
    text.type("second line")
    assert text.input_value() == "first line\nsecond line"
    assert view.locator(".jp-AgentsTurns-row[data-type='user_message']").count() == 0
    text.fill("")

    # Enter sends; the reply streams into one row
    text.type("stream 20")
    text.press("Enter")
    view.locator(".jp-AgentsTurns-row[data-type='user_message']", has_text="stream 20").wait_for()
    assert text.input_value() == ""
    poll(lambda: box.get_attribute("data-state") == "turn", what="the box in a turn")
    assert stop.is_visible() and send.is_disabled()
    assert "working" in box.locator(".jp-AgentsPrompt-note").inner_text()
    agent_rows(view).filter(has_text="part-2 ").wait_for()
    assert agent_rows(view).count() == 1  # growing, not a row per chunk
    whole = " ".join(f"part-{i}" for i in range(20)) + " fake acp heard: stream 20"
    agent_rows(view).filter(has_text="fake acp heard: stream 20").wait_for()
    assert agent_rows(view).count() == 1
    body = agent_rows(view).first.locator(".jp-AgentsTurns-body")
    poll(lambda: body.inner_text().strip() == whole, what="the whole text in one row")
    assert body.locator("p").count() == 1  # rendered as Markdown

    # the permission request, answered in the view
    ask = view.locator(".jp-AgentsTurns-ask")
    ask.wait_for()
    assert ask.locator(".jp-AgentsPanel-requestWhat").inner_text() == "echo fake"
    poll(lambda: "answer" in box.locator(".jp-AgentsPrompt-note").inner_text(), what="why")
    shot(page, "acp-turns-permission-1400x900")
    ask.locator("button[data-action='allow']").click()
    ask.wait_for(state="detached")
    agent_rows(view).filter(has_text="done: stream 20").wait_for()
    assert agent_rows(view).count() == 2  # the last words: a row of their own
    call = view.locator(".jp-AgentsTurns-row[data-type='tool_call'] details").first
    poll(lambda: call.get_attribute("data-status") == "completed", what="the call done")
    view.locator(".jp-AgentsTurns-row[data-type='turn_end']").wait_for()
    poll(lambda: box.get_attribute("data-state") == "ready", what="the box ready again")
    assert not stop.is_visible()
    text.type("and the next one")
    assert send.is_enabled()
    shot(page, "acp-turns-1400x900")
    text.fill("")

    # a call named only by a later update (Claude's adapter: "Terminal", no input):
    # its row takes the name and the input, one row for the call
    text.fill("/named")
    text.press("Enter")
    named = view.locator(".jp-AgentsTurns-row[data-type='tool_call']", has_text="printf named")
    named.wait_for()
    assert view.locator(".jp-AgentsTurns-row[data-type='tool_call']").count() == 2
    assert named.locator(".jp-AgentsTurns-title").inner_text() == "printf named"
    assert named.locator("details").get_attribute("data-tool-kind") == "execute"
    named.locator("summary").click()
    assert '"command": "printf named"' in named.locator(".jp-AgentsTurns-input").inner_text()
    poll(lambda: named.locator("details").get_attribute("data-status") == "completed",
         what="the named call done")  # fmt: skip
    assert named.locator(".jp-AgentsTurns-output").inner_text() == "named"


def test_stop_cancels_a_long_turn(lab: Lab, page: Any) -> None:
    """Stop, while the agent streams a long reply, ends its turn (cancelled): the
    stream stops short, the view marks the turn cancelled, and the box takes the next
    prompt."""
    session = acp_session(lab)
    page.set_viewport_size({"width": 1400, "height": 900})
    view, box = open_from_panel(lab, page, session)
    text = box.locator("textarea")
    text.fill("stream 300")
    box.locator("button[data-action='send']").click()
    agent_rows(view).filter(has_text="part-5 ").wait_for()
    box.locator("button[data-action='cancel']").click()
    mark = view.locator(".jp-AgentsTurns-row[data-type='turn_end']")
    mark.wait_for()
    assert "cancelled" in mark.inner_text()
    poll(lambda: box.get_attribute("data-state") == "ready", what="the box ready again")
    said = agent_rows(view).first.inner_text()
    assert "part-299" not in said and "fake acp heard" not in said, said
    assert agent_rows(view).count() == 1
    shot(page, "acp-turns-cancelled-1400x900")


def body_bytes(text: str) -> int:
    """The UTF-8 bytes of the body the box sends for ``text`` (``JSON.stringify``'s)."""
    return len(json.dumps({"text": text}, ensure_ascii=False, separators=(",", ":")).encode())


TOO_LONG = "Too long to send: {} byte{} over the 65536 bytes (64 KiB) the server takes."


def test_the_box_says_a_prompt_is_too_long_before_sending_it(lab: Lab, page: Any) -> None:
    """A prompt whose request would be over the server's body limit (MAX_BODY, counted
    as the UTF-8 bytes of the JSON body: "é" two bytes, a quote escaped) is not sent:
    the line under the box says by how many bytes, Send waits, Enter sends nothing and
    the text stays as typed; one character fewer, at the limit exactly, the server
    takes it. A prompt the server refuses stays in the box with the server's words."""
    session = acp_session(lab)
    page.set_viewport_size({"width": 1400, "height": 900})
    view, box = open_from_panel(lab, page, session)
    text = box.locator("textarea")
    send = box.locator("button[data-action='send']")
    note = box.locator(".jp-AgentsPrompt-note")
    head = 'é "quoted"\n'
    exact = head + "x" * (MAX_BODY - body_bytes(head))
    assert body_bytes(exact) == MAX_BODY
    text.fill(exact)
    assert send.is_enabled() and note.inner_text() == "Enter sends; Shift+Enter: a new line"
    text.press("End")
    text.type("ü")  # two bytes more
    assert note.inner_text().startswith(TOO_LONG.format(2, "s")), note.inner_text()
    assert "jp-mod-error" in (note.get_attribute("class") or "")
    assert send.is_disabled()
    shot(page, "acp-prompt-too-long-1400x900")
    text.press("Enter")  # sends nothing, adds no line
    assert text.input_value() == exact + "ü"
    text.press("Backspace")
    text.type("y")  # one byte more
    assert note.inner_text().startswith(TOO_LONG.format(1, "")), note.inner_text()
    text.press("Enter")
    assert text.input_value() == exact + "y"
    assert view.locator(".jp-AgentsTurns-row[data-type='user_message']").count() == 0
    assert prompts(lab, session["id"]) == []

    # at the limit exactly: sent, and the server takes it
    text.press("Backspace")
    assert send.is_enabled() and "Too long" not in note.inner_text()
    text.press("Enter")
    view.locator(".jp-AgentsTurns-row[data-type='user_message']").wait_for()
    poll(lambda: text.input_value() == "", what="the sent prompt leaves the box")
    assert prompts(lab, session["id"]) == [exact]
    view.locator(".jp-AgentsTurns-ask").wait_for()
    view.locator(".jp-AgentsTurns-ask button[data-action='allow']").click()
    poll(lambda: box.get_attribute("data-state") == "ready", what="the box ready again")

    # a prompt the server refuses (an agent whose ACP session is never ready)
    status, mute = lab.server.request(
        "POST", "/api/agents/sessions", {"kind": "mute", "mode": "acp", "cwd": str(lab.work)}
    )
    assert status == 201, mute
    view, box = open_from_panel(lab, page, mute)
    text = box.locator("textarea")
    text.fill("hello?")
    text.press("Enter")
    refused = box.locator(".jp-AgentsPrompt-note.jp-mod-error")
    refused.wait_for()
    assert refused.inner_text() == (
        f"Not sent: session {mute['id']}'s agent has no ACP session yet (it is starting)"
    )
    assert text.input_value() == "hello?"  # nothing lost
    shot(page, "acp-prompt-refused-1400x900")
    lab.server.request("DELETE", f"/api/agents/sessions/{mute['id']}")


def prompts(lab: Lab, session_id: str) -> list[str]:
    """The text of every prompt the session's agent was sent (its ACP journal's
    ``session/prompt`` requests), in order."""
    folder = journal_folder(lab.state_dir, session_id)
    sent = []
    for line in Journal(folder).after(0):
        record = json.loads(line)
        message = record.get("msg") or {}
        if record["from"] == "client" and message.get("method") == "session/prompt":
            sent.append(message["params"]["prompt"][0]["text"])
    return sent


def test_a_phone_can_use_the_box_and_a_terminal_sessions_turns_have_none(
    lab: Lab, page: Any
) -> None:
    """On a phone the box fits the screen and takes a prompt, whose request is answered
    there; a terminal session's turns have no box."""
    session = acp_session(lab)
    # on a phone: the turns alone, the box under them, within the screen
    phone = page.context.new_page()
    try:
        phone.set_viewport_size({"width": 360, "height": 740})
        small_view, small = open_from_panel(lab, phone, session)
        area = small.locator("textarea")
        area.fill("from the phone")
        small.locator("button[data-action='send']").click()
        ask = small_view.locator(".jp-AgentsTurns-ask")
        ask.wait_for()
        assert phone.evaluate("() => document.documentElement.scrollWidth") <= 360
        for part in (small, area, small.locator("button[data-action='cancel']")):
            edge = part.bounding_box()
            assert edge and edge["x"] >= 0 and edge["x"] + edge["width"] <= 360, edge
            assert edge["y"] + edge["height"] <= 740, edge
        shot(phone, "acp-turns-permission-360x740")
        ask.locator("button[data-action='allow']").click()
        agent_rows(small_view).filter(has_text="done: from the phone").wait_for()
        poll(lambda: small.get_attribute("data-state") == "ready", what="the box ready")
        area.fill("what next?")
        shot(phone, "acp-turns-360x740")
    finally:
        phone.close()

    # a terminal session's turns: as they were, no box
    status, shell = lab.server.request("POST", "/api/agents/sessions", {"kind": "claude"})
    assert status == 201, shell
    page.set_viewport_size({"width": 1400, "height": 900})
    open_lab(page, lab)
    page.evaluate(
        "id => window.jupyterapp.commands.execute('jupyter-agents:turns', {id})", shell["id"]
    )
    page.locator(f".jp-AgentsTurns[data-session-id='{shell['id']}']").wait_for()
    assert page.locator(f".jp-AgentsPrompt[data-session-id='{shell['id']}']").count() == 0


def new_acp_session(lab: Lab, before: set[str]) -> dict[str, Any]:
    """The fakeacp session started since the sessions ``before`` (ids) were listed."""
    made = poll(
        lambda: [s for i, s in lab.sessions().items() if i not in before],
        what="a new session",
    )
    assert len(made) == 1, made
    assert (made[0]["kind"], made[0]["mode"]) == ("fakeacp", "acp"), made[0]
    return made[0]


def shows_its_turns(page: Any, session: dict[str, Any]) -> Any:
    """Assert the current tab is ``session``'s turns, with its prompt box ready and no
    terminal on screen; the box."""
    sid = session["id"]
    box = page.locator(f".jp-AgentsPrompt[data-session-id='{sid}']")
    box.locator("textarea").wait_for()
    poll(
        lambda: (
            page.evaluate("() => window.jupyterapp.shell.currentWidget?.id")
            == f"jupyter-agents-turns-{sid}"
        ),
        what="its turns, the current tab",
    )
    poll(lambda: box.get_attribute("data-state") == "ready", what="the box ready")
    assert page.locator(".jp-Terminal:visible").count() == 0
    return box


def test_an_acp_session_starts_from_the_panel_and_the_launcher(lab: Lab, page: Any) -> None:
    """A kind that speaks ACP has, joined to its "+" button in the panel, an "ACP" one
    that starts it in ACP mode and opens its turns with the prompt box (no terminal),
    on a desktop and on a phone; the Launcher has a "(ACP)" card that does the same. A
    kind with no ACP mode has neither; one whose ACP agent is not installed lists it
    with the kinds that cannot start, saying what to install."""
    for (width, height), size in (((1400, 900), "1400x900"), ((360, 740), "360x740")):
        page.set_viewport_size({"width": width, "height": height})
        open_lab(page, lab, reset=True)
        panel = show_panel(page)
        acp = panel.locator("button[data-action='new-acp'][data-kind='fakeacp']")
        assert acp.inner_text() == "ACP"
        assert acp.get_attribute("aria-label") == "New fakeacp session in ACP mode"
        assert acp.get_attribute("title") == (
            "New fakeacp in ACP mode: its turns and a prompt box instead of a terminal"
        )
        terminal = panel.locator("button[data-action='new'][data-kind='fakeacp']")
        joined, beside = terminal.bounding_box(), acp.bounding_box()
        assert joined and beside and abs(joined["y"] - beside["y"]) < 1  # one pair
        assert beside["x"] + beside["width"] <= width and beside["height"] >= 24
        if width < 600:
            assert beside["height"] >= 32  # a finger's
        assert panel.locator("button[data-action='new-acp'][data-kind='shell']").count() == 0
        # Claude Code speaks ACP through an adapter, not installed here
        panel.locator(".jp-AgentsPanel-missing > summary").click()
        claude = panel.locator("button[data-action='new-acp'][data-kind='claude']")
        assert claude.is_visible() and claude.is_disabled()
        assert claude.locator("span").last.inner_text() == "Claude Code (ACP)"
        why = panel.locator(
            "button[data-action='new-acp'][data-kind='claude'] + .jp-AgentsPanel-unavailable"
        )
        assert why.inner_text() == (
            "not installed: claude-agent-acp was not found on PATH; install it: "
            "npm install -g @agentclientprotocol/claude-agent-acp"
        )
        panel.locator(".jp-AgentsPanel-missing > summary").click()  # folded again
        shot(page, f"acp-new-panel-{size}")
        before = set(lab.sessions())
        acp.click()
        session = new_acp_session(lab, before)
        box = shows_its_turns(page, session)
        edge = box.bounding_box()
        assert edge and edge["x"] >= 0 and edge["x"] + edge["width"] <= width, edge
        shot(page, f"acp-new-turns-{size}")

    # the Launcher: a card for the kind in ACP mode, none for a kind without
    page.set_viewport_size({"width": 1400, "height": 900})
    open_lab(page, lab, reset=True)
    page.evaluate(NEW_LAUNCHER)
    card = page.locator(".jp-LauncherCard:visible", has_text="fakeacp (ACP)")
    card.first.wait_for()
    cards = page.locator(".jp-LauncherCard:visible .jp-LauncherCard-label")
    labels = [t.strip() for t in cards.all_inner_texts()]
    assert "fakeacp" in labels and "fakeacp (ACP)" in labels, labels
    # (mute speaks ACP too; shell has no ACP mode, Claude's and Codex's adapters are
    # not installed)
    assert {t for t in labels if "ACP" in t} == {"fakeacp (ACP)", "mute (ACP)"}, labels
    shot(page, "acp-new-launcher-1400x900")
    enabled = page.evaluate(
        "() => [['fakeacp', 'acp'], ['shell', 'acp'], ['claude', 'acp'], ['claude', undefined]]"
        ".map(([kind, mode]) => window.jupyterapp.commands.isEnabled("
        "'jupyter-agents:new', {kind, mode}))"
    )
    assert enabled == [True, False, False, True]
    before = set(lab.sessions())
    card.first.click()
    shows_its_turns(page, new_acp_session(lab, before))


def test_a_notifications_open_names_and_opens_an_acp_sessions_turns(lab: Lab, page: Any) -> None:
    """An ACP session's permission request, while its turns are not on screen, makes a
    notification whose Open names the session's turns and prompt box (not a terminal)
    and opens them, where the request is answered."""
    session = acp_session(lab)
    sid = session["id"]
    page.set_viewport_size({"width": 1400, "height": 900})
    open_lab(page, lab, reset=True)
    panel = show_panel(page)
    panel.locator(".jp-AgentsPanel-filter").focus()  # working elsewhere
    status, sent = lab.server.request(
        "POST", f"/api/agents/sessions/{sid}/prompt", {"text": "from afar"}
    )
    assert status == 202, sent
    toast = page.locator(".Toastify__toast", has_text="echo fake")
    toast.first.wait_for()
    open_button = toast.first.locator("button", has_text="Open")
    assert open_button.get_attribute("title") == (
        f"Open the turns and prompt box of fakeacp {session['name']}"
    )
    still(toast.first)
    shot(page, "acp-notification-1400x900")
    open_button.click()
    view = page.locator(f".jp-AgentsTurns[data-session-id='{sid}']")
    view.wait_for()
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.id") == (
        f"jupyter-agents-turns-{sid}"
    )
    assert page.locator(".jp-Terminal:visible").count() == 0
    ask = view.locator(".jp-AgentsTurns-ask")
    ask.wait_for()
    ask.locator("button[data-action='allow']").click()
    agent_rows(view).filter(has_text="done: from afar").wait_for()
