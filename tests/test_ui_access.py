"""The panel, its row menu, a Review tab and the phone page as a screen reader and a
keyboard meet them (real server, real git, real headless Chromium, the fake Claude).

axe-core (pinned in ``tests/axe``, injected into each page it checks) runs on our DOM
only: the Agents panel with running, needing and ended sessions and the fold of kinds
that are not installed, the row menu, a Review tab, and ``/agents/requests`` on a phone
(the whole page: it is ours). JupyterLab's own violations are not ours to fix, and are
not counted. The keyboard test reaches *+ Claude Code*, a row's Open and its menu,
a permission's Allow and Deny with keys alone, and checks after each menu, dialog and
answer that the focus is somewhere a person can go on from, never ``<body>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_ui import Lab, open_lab, row, running_lab, shot, show_panel, watch_console
from test_ui_worktrees import go_to, start_in_worktree
from test_worktrees import IDENTITY, make_repo

from jupyter_agents.pytest_plugin import poll

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(300)]

AXE = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"

RUN_AXE = """async (include) => {
  const context = include.length ? {include: include.map(s => [s])} : document;
  const result = await window.axe.run(context, {resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 200),
                              why: n.failureSummary}))
  }));
}"""


def axe(page: Any, *include: str) -> list[dict[str, Any]]:
    """axe-core's violations in the elements ``include`` selects (the whole page when
    none), each with the nodes it found them on."""
    assert AXE.exists(), f"{AXE} is missing: run (cd tests/axe && npm ci)"
    if not page.evaluate("() => !!window.axe"):
        # evaluated through the DevTools protocol, which the phone page's
        # Content-Security-Policy (script-src 'self') does not govern
        page.evaluate(AXE.read_text() + "\n;true")
    return page.evaluate(RUN_AXE, list(include))  # type: ignore[no-any-return]


def readable(violations: list[dict[str, Any]]) -> str:
    return json.dumps(violations, indent=1)


def signature(rule: str, html: str) -> tuple[str, str, str]:
    """A violation's rule and the tag and classes of the element it is on."""
    tag = re.match(r"<([\w-]+)", html)
    classes = re.search(r'class="([^"]*)"', html)
    return (rule, tag[1] if tag else "", " ".join(sorted(classes[1].split())) if classes else "")


def jupyterlabs_own(page: Any) -> set[tuple[str, str, str]]:
    """What axe finds in JupyterLab's own widgets of the kinds we use (a toolbar of
    ``ToolbarButton``s, a lumino ``Menu`` with a separator): the file browser and its
    File menu, as signatures."""
    found = axe(page, "#filebrowser")
    page.locator(".lm-MenuBar-item", has_text="File").first.click()
    page.locator(".lm-Menu").first.wait_for()
    found += axe(page, ".lm-Menu")
    page.keyboard.press("Escape")
    return {signature(v["id"], n["html"]) for v in found for n in v["nodes"]}


def ours(violations: list[dict[str, Any]], theirs: set[tuple[str, str, str]]) -> list[Any]:
    """``violations`` but for those on elements JupyterLab's own widgets have too."""
    kept = []
    for v in violations:
        nodes = [n for n in v["nodes"] if signature(v["id"], n["html"]) not in theirs]
        if nodes:
            kept.append({**v, "nodes": nodes})
    return kept


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def prepare(lab: Lab) -> None:
        lab.server.extra_env.update(IDENTITY)
        make_repo(lab.work / "project")

    with running_lab(tmp_path_factory.mktemp("ui-access"), prepare) as lab:
        yield lab


def focused(page: Any) -> str:
    """Where the focus is: the element's tag, classes and text, or ``body``."""
    return str(
        page.evaluate(
            """() => { const e = document.activeElement;
                 if (!e || e === document.body) { return 'body'; }
                 return `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`
                   + ` ${(e.getAttribute('aria-label') || e.textContent || '').slice(0, 60)}`; }"""
        )
    )


def test_axe_finds_nothing_of_ours(lab: Lab, page: Any) -> None:
    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    go_to(page, "project")
    theirs = jupyterlabs_own(page)
    # a session in a worktree (its Review tab), one asking permission, one ended
    tree = start_in_worktree(lab, page)
    lab.server.type_line(tree["name"], "/write notes.md the answer is 54", "wrote notes.md")
    lab.server.type_line(tree["name"], "/commit the answer", "committed")
    panel = show_panel(page)
    panel.locator("input[data-action='worktree-toggle']").uncheck()
    asking = lab.server.request("POST", "/api/agents/sessions", {"kind": "claude"})[1]
    ended = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    lab.server.request("DELETE", f"/api/agents/sessions/{ended['id']}")
    agent = lab.server.ws(asking["name"])
    agent.wait_for("FAKE CLAUDE conversation")
    agent.stdin("/perm\r")
    row(page, asking["id"]).locator(".jp-AgentsPanel-request").wait_for()
    panel.locator(".jp-AgentsPanel-group[data-group='ended'] > summary").click()
    panel.locator("summary[data-action='show-missing']").click()
    row(page, tree["id"]).locator(".jp-AgentsPanel-worktree").wait_for()
    shot(page, "access-panel")
    found = {"panel": axe(page, "#jupyter-agents-panel")}

    row(page, asking["id"]).locator("button[data-action='menu']").click()
    page.locator(".jp-AgentsPanel-menu").wait_for()
    found["menu"] = axe(page, ".jp-AgentsPanel-menu")
    page.keyboard.press("Escape")

    row(page, tree["id"]).locator(".jp-AgentsPanel-worktree").click()
    review = page.locator(".jp-AgentsWorktree:visible")
    review.locator(".jp-AgentsWorktree-fileButton[data-path='notes.md']").click()
    review.locator(".cm-mergeView").wait_for()
    found["review"] = axe(page, ".jp-AgentsWorktreeDocument:not(.lm-mod-hidden)")
    shot(page, "access-review")

    phone = page.context.new_page()
    watch_console(phone)
    phone.set_viewport_size({"width": 360, "height": 740})
    phone.goto(lab.url("/agents/requests"))
    phone.locator("li.request").wait_for()
    found["phone"] = axe(phone)
    shot(phone, "access-phone")
    phone.close()
    agent.close()
    found = {where: ours(violations, theirs) for where, violations in found.items()}
    assert not any(found.values()), readable([{k: v} for k, v in found.items() if v])
    # JupyterLab's own, for the record: a ToolbarButton's aria-pressed on a jp-button, a
    # separator's tabindex in a lumino Menu
    assert theirs, "axe found nothing in JupyterLab's own widgets: was it run at all?"


def tab_to(page: Any, selector: str, back: bool = False, most: int = 30) -> None:
    """Press Tab (Shift+Tab: ``back``) until the focus is on ``selector``."""
    for _ in range(most):
        if page.evaluate("s => !!document.activeElement?.matches(s)", selector):
            return
        page.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"{most} Tabs did not reach {selector}; the focus is on {focused(page)}")


def test_a_keyboard_reaches_every_action_and_keeps_its_place(lab: Lab, page: Any) -> None:
    """Keys only: + Claude Code, a row's Open and its menu (Escape, and a dialog from it,
    return to the row), Allow and Deny under an asking row, Allow on the phone page;
    after each, the focus is on something a person goes on from, never ``<body>``."""
    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    show_panel(page)
    assert focused(page) != "body", "showing the panel left the focus nowhere"
    panel = "#jupyter-agents-panel"

    # + Claude Code, from the panel's list by Shift+Tab
    before = set(lab.sessions())
    tab_to(page, f"{panel} button[data-action='new'][data-kind='claude']", back=True)
    page.keyboard.press("Enter")
    agent = poll(
        lambda: next((s for i, s in lab.sessions().items() if i not in before), None),
        what="the session Enter started",
    )
    sid = agent["id"]
    page.locator(f"{panel} .jp-AgentsPanel-row[data-session-id='{sid}']").wait_for()
    # its terminal opens and takes the focus: only then back to the panel (a tab that
    # opens later, on a loaded machine, would take the focus from the keys below)
    test_ui.wait_current_terminal(page, agent["name"], "its terminal opened by + Claude Code")
    poll(
        lambda: "xterm-helper-textarea" in focused(page),
        what=f"the new terminal to take the focus, not {focused(page)}",
    )
    show_panel(page)

    # its row, its Open and its menu, by Tab
    selected_row = f"{panel} .jp-AgentsPanel-row[data-session-id='{sid}']"
    filter_box = page.locator(f"{panel} .jp-AgentsPanel-filter")
    filter_box.focus()
    page.keyboard.press("ArrowDown")  # into the list, then row by row
    for _ in range(10):
        if page.evaluate("s => document.activeElement.matches(s)", selected_row):
            break
        page.keyboard.press("ArrowDown")
    assert page.evaluate("s => document.activeElement.matches(s)", selected_row), focused(page)
    # from the filter again, Tab: the list's one stop is the selected row, past the
    # answers of the row that asks above it (the first test's), which Tab reaches too
    asking = page.locator(f"{panel} .jp-AgentsPanel-row.jp-mod-asking")
    assert asking.count() == 1 and asking.get_attribute("data-session-id") != sid
    filter_box.focus()
    tab_to(page, selected_row)
    page.keyboard.press("Tab")
    open_button = f"{selected_row} button[data-action='open']"
    assert page.evaluate("s => document.activeElement.matches(s)", open_button), focused(page)
    # the panel draws its rows again on every event (here a rename, from elsewhere):
    # the focus stays on the button a person was on, not back on its row
    for title in ("renamed-elsewhere", None):
        status, _ = lab.server.request("PATCH", f"/api/agents/sessions/{sid}", {"title": title})
        assert status == 200
        page.wait_for_function(  # drawn again
            "([s, t, shown]) => document.querySelector(s).textContent.includes(t) === shown",
            arg=[selected_row, "renamed-elsewhere", title is not None],
        )
        assert page.evaluate("s => document.activeElement.matches(s)", open_button), focused(page)
    page.keyboard.press("Tab")
    assert page.evaluate(
        "s => document.activeElement.matches(s)", f"{selected_row} button[data-action='menu']"
    ), focused(page)
    page.keyboard.press("Enter")
    menu = page.locator(".jp-AgentsPanel-menu")
    menu.wait_for()
    page.keyboard.press("Escape")
    menu.wait_for(state="detached")
    assert page.evaluate("s => document.activeElement.matches(s)", selected_row), focused(page)

    # Shift+F10 on the row: its menu; Rename… by arrows, its dialog by Enter, Escape
    page.keyboard.press("Shift+F10")
    menu.wait_for()
    rename = menu.locator("li[data-command='agents-row:rename']")
    for _ in range(10):
        if "lm-mod-active" in (rename.get_attribute("class") or ""):
            break
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for()
    page.keyboard.type("keyboard only")
    page.keyboard.press("Enter")
    dialog.wait_for(state="detached")
    poll(lambda: lab.sessions()[sid]["title"] == "keyboard only", what="the title given")
    poll(
        lambda: page.evaluate("s => !!document.activeElement?.matches(s)", selected_row),
        what=f"the focus back on the renamed row, not on {focused(page)}",
    )

    # an asking row: Allow by Tab and Enter, then Deny with a message
    ws = lab.server.ws(agent["name"])
    ws.wait_for("FAKE CLAUDE conversation")
    ws.stdin("/perm\r")
    allow = f"{selected_row} .jp-AgentsPanel-request button[data-action='allow']"
    page.locator(allow).wait_for()
    # said to a screen reader too, in the page's polite live region
    live = page.locator(".jp-AgentsAttention-live[aria-live='polite']")
    poll(
        lambda: "keyboard only asks for your permission" in live.inner_text(),
        what="the permission said in the live region",
    )
    tab_to(page, allow)
    page.keyboard.press("Enter")
    ws.wait_for("claude heard: /perm")
    page.locator(allow).wait_for(state="detached")
    poll(lambda: focused(page) != "body", what="the focus after Allow somewhere but <body>")
    assert page.evaluate("s => document.activeElement.matches(s)", selected_row), focused(page)
    ws.stdin("/perm\r")
    deny = f"{selected_row} .jp-AgentsPanel-request button[data-action='deny']"
    page.locator(deny).wait_for()
    tab_to(page, deny)
    page.keyboard.press("Enter")
    dialog.wait_for()
    page.keyboard.type("not now")
    page.keyboard.press("Enter")
    ws.wait_for("claude heard: denied: not now")
    page.locator(deny).wait_for(state="detached")
    poll(
        lambda: page.evaluate("s => !!document.activeElement?.matches(s)", selected_row),
        what=f"the focus back on the row after Deny, not on {focused(page)}",
    )

    # Open by Enter on the row's button: its terminal, current
    tab_to(page, f"{selected_row} button[data-action='open']")
    page.keyboard.press("Enter")
    test_ui.wait_current_terminal(page, agent["name"], "its terminal opened by Enter on Open")

    # the phone page: Allow by Tab and Enter; the focus on the line saying it was allowed
    ws.stdin("/perm\r")
    phone = page.context.new_page()
    watch_console(phone)
    phone.set_viewport_size({"width": 360, "height": 740})
    asked = poll(
        lambda: lab.server.request("GET", f"/api/agents/requests?session={sid}")[1],
        what="its request listed",
    )
    # its card (the first test's agent may still ask too, above or below it)
    card = f"li.request[data-request-id='{asked[0]['id']}']"
    phone.goto(lab.url("/agents/requests"))
    phone.locator(f"{card} button[data-action='allow']").wait_for()
    tab_to(phone, f"{card} button[data-action='allow']")
    phone.keyboard.press("Enter")
    ws.wait_for("Allowed by PermissionRequest hook")
    phone.locator(card).wait_for(state="detached")
    assert phone.evaluate("() => document.activeElement.id") == "state", focused(phone)
    assert "Allowed: Bash" in phone.locator("#state").inner_text()
    phone.close()
    ws.close()
    lab.server.request("DELETE", f"/api/agents/sessions/{sid}")
