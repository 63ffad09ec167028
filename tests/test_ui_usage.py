"""What agents spend, in JupyterLab (real server, real headless Chromium, the fake agent
CLIs): the Agents panel shows each agent session's estimated cost and the total,
updated as they spend; a session's own unattended limit is set from its row; the
limit's interrupt is a notification.

The server, browser and helpers are tests/test_ui.py's (this module gets a server of its
own that refreshes quickly, with an unattended limit). Screenshots go to
``tests/artifacts/ui/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import test_ui
from test_ui import Lab, open_lab, row, running_lab, shot, show_panel, wait_notification

from jupyter_agents.pytest_plugin import poll

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]

SONNET = "claude-sonnet-4-5-20250929"
LIMIT = 150_000


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def prepare(lab: Lab) -> None:
        lab.server.extra_args += [
            "--AgentsApp.refresh_interval=0.3",
            f"--AgentsApp.unattended_limit={json.dumps({'tokens': LIMIT})}",
        ]

    with running_lab(tmp_path_factory.mktemp("ui-usage"), prepare) as lab:
        yield lab


def agent(lab: Lab, model: str = SONNET) -> dict[str, Any]:
    status, body = lab.server.request(
        "POST",
        "/api/agents/sessions",
        {"kind": "claude", "cwd": str(lab.work), "args": ["--model", model]},
    )
    assert status == 201, body
    return dict(body)


def usage(lab: Lab, sid: str) -> dict[str, Any]:
    return dict(lab.sessions()[sid]["usage"])


def dollars(cost: float) -> str:
    return f"${cost:.2f}" if cost >= 0.01 else f"${cost:.4f}"


def widen_sidebar(page: Any, width: int) -> None:
    """Drag the left sidebar's edge to ``width`` pixels (for the screenshot)."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(width, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()


def costs(page: Any) -> dict[str, str]:
    """Each row's cost cell, by session id."""
    return dict(
        page.evaluate(
            """() => Object.fromEntries([...document.querySelectorAll(
                 '#jupyter-agents-panel .jp-AgentsPanel-row')].map(r => [
                   r.dataset.sessionId,
                   r.querySelector('.jp-AgentsPanel-cost')?.textContent ?? null]))"""
        )
    )


def test_the_panel_shows_each_sessions_cost_and_the_total(lab: Lab, page: Any) -> None:
    shell_status, shell = lab.server.request(
        "POST", "/api/agents/sessions", {"kind": "shell", "cwd": str(lab.work)}
    )
    assert shell_status == 201, shell
    first, second = agent(lab), agent(lab)
    other = agent(lab, "claude-unpriced-9")  # tokens only
    for session, turns in ((first, 1), (second, 2), (other, 1)):
        for n in range(turns):
            lab.server.type_line(session["name"], f"task {n}", f"claude heard: task {n}")
    poll(lambda: usage(lab, second["id"])["tokens"]["total"] > 50_000, what="second's usage")
    poll(lambda: usage(lab, other["id"])["tokens"]["total"] > 0, what="other's usage")
    open_lab(page, lab, reset=True)
    panel = show_panel(page)
    spent = {s["id"]: usage(lab, s["id"]) for s in (first, second, other)}
    expected = {
        first["id"]: dollars(spent[first["id"]]["cost"]),
        second["id"]: dollars(spent[second["id"]]["cost"]),
        other["id"]: f"{spent[other['id']]['tokens']['total'] / 1000:.1f}k tok",
        shell["id"]: None,  # a shell reports no usage
    }
    poll(lambda: {k: costs(page).get(k) for k in expected} == expected, what="costs per row")
    # the header: the priced total of the sessions listed; "+": some tokens unpriced
    total = spent[first["id"]]["cost"] + spent[second["id"]]["cost"]
    header = panel.locator(".jp-AgentsPanel-total")
    assert header.text_content() == f"Total {dollars(total)}+"
    assert "while nobody watched" in (header.get_attribute("title") or "")
    tip = row(page, second["id"]).locator(".jp-AgentsPanel-cost").get_attribute("title")
    assert "Tokens:" in tip and "cache reads" in tip
    assert f"Unattended limit: {LIMIT // 1000}.0k tokens (the server's)" in tip
    widen_sidebar(page, 470)
    shot(page, "panel-cost")

    # it spends more: the row and the total follow (usage events, no reload)
    before = costs(page)[first["id"]]
    lab.server.type_line(first["name"], "more", "claude heard: more")
    poll(lambda: costs(page)[first["id"]] != before, what="the row to follow")
    assert costs(page)[first["id"]] == dollars(usage(lab, first["id"])["cost"])
    total = sum(usage(lab, s["id"])["cost"] for s in (first, second))
    poll(lambda: header.text_content() == f"Total {dollars(total)}+", what="the total")


def test_a_snapshot_older_than_a_usage_event_does_not_undo_it(lab: Lab, page: Any) -> None:
    """The panel takes a snapshot after most events; a ``usage`` event is shown at once
    and takes none. A snapshot the panel asked for before a usage event came, which
    the server answered with the older usage, arrives after the event: the row keeps
    the event's cost (no later event may come to correct it)."""
    spender, renamed = agent(lab), agent(lab)
    lab.server.type_line(spender["name"], "task 0", "claude heard: task 0")
    poll(lambda: usage(lab, spender["id"])["tokens"]["total"] > 0, what="its usage")
    open_lab(page, lab)
    show_panel(page)
    old = dollars(usage(lab, spender["id"])["cost"])
    poll(lambda: costs(page).get(spender["id"]) == old, what="its cost")

    # the snapshots of the sessions the panel asks for from now on wait here; those
    # asked for before the new turn get the server's answer at once (the old usage)
    held: list[tuple[Any, Any]] = []
    turn = [False]

    def hold(route: Any) -> None:
        if route.request.method != "GET":
            route.continue_()
        else:
            held.append((route, None if turn[0] else route.fetch()))

    listing = lambda url: urlparse(url).path.endswith("/api/agents/sessions")  # noqa: E731
    page.route(listing, hold)
    try:
        # an event that takes a snapshot: another session renamed
        status, body = lab.server.request(
            "PATCH", f"/api/agents/sessions/{renamed['id']}", {"title": "moved"}
        )
        assert status == 200, body
        since = len(held)
        poll(lambda: page.evaluate("() => true") and len(held) > since, what="a snapshot")
        turn[0] = True
        lab.server.type_line(spender["name"], "more", "claude heard: more")
        new = poll(
            lambda: (c := dollars(usage(lab, spender["id"])["cost"])) != old and c,
            what="the new turn's usage",
        )
        poll(lambda: costs(page)[spender["id"]] == new, what="the usage event")
        # the old answers come now: the rename is shown, the cost stays
        for route, answer in held:
            if answer is not None:
                route.fulfill(response=answer)
        poll(
            lambda: "moved" in (row(page, renamed["id"]).text_content() or ""),
            what="the old snapshots applied",
        )
        assert costs(page)[spender["id"]] == new
    finally:
        for route, answer in held:
            if answer is None:
                route.continue_()
        page.unroute(listing, hold)


def test_a_sessions_own_limit_is_set_from_its_row(lab: Lab, page: Any) -> None:
    session = agent(lab)
    open_lab(page, lab)
    show_panel(page)
    button = row(page, session["id"]).locator(".jp-AgentsPanel-cost[data-action='limit']")
    button.wait_for(state="visible")
    button.click()
    dialog = page.locator(".jp-Dialog .jp-AgentsLimit")
    dialog.wait_for(state="visible")
    dialog.locator("select").select_option("own")
    dialog.locator("input[data-limit='cost']").fill("2.5")
    dialog.locator("input[data-limit='minutes']").fill("10")
    # the choice in a sentence, in the person's words (no setting names, no seconds)
    assert dialog.locator(".jp-AgentsLimit-summary").text_content() == (
        "Stop this agent after $2.50 or 10 minutes of work while nobody is watching."
    )
    assert "AgentsApp" not in dialog.text_content()
    shot(page, "panel-limit-dialog")
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    poll(
        lambda: usage(lab, session["id"])["limit"] == {"cost": 2.5, "seconds": 600.0},
        what="its own limit",
    )
    assert usage(lab, session["id"])["limit_source"] == "session"
    wait_notification(page, "Spending limit of")


def test_the_limit_interrupting_an_agent_is_a_notification(lab: Lab, page: Any) -> None:
    open_lab(page, lab)
    show_panel(page)
    session = agent(lab)
    client = lab.server.ws(session["name"])
    client.wait_for("FAKE CLAUDE conversation")
    client.stdin("/spend 100 0.1\r")
    client.wait_for("spending")
    client.close()  # nobody watches: past the limit, it is stopped
    wait_notification(page, "unattended limit", timeout=30)
    cell = row(page, session["id"]).locator(".jp-AgentsPanel-cost.jp-mod-limited")
    cell.wait_for(state="attached")
    assert lab.sessions()[session["id"]]["status"] == "running"  # nothing killed
    shot(page, "panel-limit-reached")


#: what each row must show whole (the folder may be shortened: its end must show)
WHOLE = (
    ".jp-AgentsPanel-kind",
    ".jp-AgentsPanel-name",
    ".jp-AgentsPanel-started",
    ".jp-AgentsPanel-badge",
    ".jp-AgentsPanel-primary",
    ".jp-AgentsPanel-more",
    ".jp-AgentsPanel-cost",
    ".jp-AgentsPanel-time",
)


def clipped(page: Any) -> list[str]:
    """What the panel's rows do not show whole: a part outside its row's box, a part
    whose text is cut, or a folder whose end is hidden. Empty when all is legible."""
    return list(
        page.evaluate(
            """(whole) => {
              const bad = [];
              const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5
                && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
              for (const row of document.querySelectorAll(
                  '#jupyter-agents-panel details[open] .jp-AgentsPanel-row')) {
                const box = row.getBoundingClientRect();
                const id = row.dataset.sessionId;
                if (box.right > row.closest('#jupyter-agents-panel')
                    .getBoundingClientRect().right + 0.5) {
                  bad.push(`${id}: row wider than the panel`);
                }
                for (const sel of whole) {
                  for (const part of row.querySelectorAll(sel)) {
                    if (!inside(part.getBoundingClientRect(), box)) {
                      bad.push(`${id}: ${sel} outside its row`);
                    } else if (part.scrollWidth > part.clientWidth + 1) {
                      bad.push(`${id}: ${sel} cut (${part.scrollWidth} > ${part.clientWidth})`);
                    }
                  }
                }
                const cwd = row.querySelector('.jp-AgentsPanel-cwd bdi');
                if (cwd && cwd.textContent) {
                  const range = document.createRange();
                  const text = cwd.firstChild;
                  range.setStart(text, text.length - 1);
                  range.setEnd(text, text.length);
                  const last = range.getBoundingClientRect();
                  const shown = cwd.parentElement.getBoundingClientRect();
                  if (!(last.width > 0 && inside(last, shown))) {
                    bad.push(`${id}: the end of its folder is hidden`);
                  }
                }
              }
              return bad;
            }""",
            list(WHOLE),
        )
    )


def menu_items(page: Any) -> list[str]:
    return [
        str(t).strip()
        for t in page.locator(".jp-AgentsPanel-menu .lm-Menu-itemLabel").all_text_contents()
        if str(t).strip()  # not a separator
    ]


def test_rows_are_legible_at_250_px_and_on_a_phone(lab: Lab, page: Any) -> None:
    """At the default 250 px sidebar and on a 360 px phone, every row shows its kind,
    name, state, cost and time whole and its folder's end; the likely action is a
    labelled button and the others are words in a menu; rows of a reused name say when
    each started; Share is not offered where sharing cannot work; an ended session
    offers no spending limit."""
    deep = lab.work / "a-long-project-folder-name" / "src" / "deeply-nested-package"
    deep.mkdir(parents=True, exist_ok=True)
    first = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell", "cwd": str(deep)})[
        1
    ]
    lab.server.request("DELETE", f"/api/agents/sessions/{first['id']}")
    again = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell", "cwd": str(deep)})[
        1
    ]
    assert again["name"] == first["name"]  # the name is reused: two rows share it
    spender = agent(lab)
    lab.server.type_line(spender["name"], "task", "claude heard: task")
    poll(lambda: usage(lab, spender["id"])["tokens"]["total"] > 0, what="its usage")
    ended = agent(lab)
    lab.server.type_line(ended["name"], "task", "claude heard: task")
    poll(lambda: usage(lab, ended["id"])["tokens"]["total"] > 0, what="its usage")
    lab.server.request("DELETE", f"/api/agents/sessions/{ended['id']}")
    try:
        page.set_viewport_size({"width": 1400, "height": 900})
        open_lab(page, lab, reset=True)
        panel = show_panel(page)
        assert panel.bounding_box()["width"] <= 260  # JupyterLab's default sidebar
        panel.locator(".jp-AgentsPanel-group[data-group='ended'] > summary").click()
        for sid in (first["id"], again["id"], spender["id"], ended["id"]):
            row(page, sid).wait_for()
        poll(lambda: not clipped(page), what=f"every row legible at 250 px: {clipped(page)}")
        shot(page, "panel-250px")

        # a reused name: each row says when it started
        started = {
            sid: row(page, sid).locator(".jp-AgentsPanel-started").text_content()
            for sid in (first["id"], again["id"])
        }
        for made in (first, again):  # HH:MM:SS of its start, today (the browser is in UTC)
            assert started[made["id"]] == made["created"][11:19], started
        assert row(page, spender["id"]).locator(".jp-AgentsPanel-started").count() == 0
        # the likely action in words; the others, in words, in a menu
        assert row(page, spender["id"]).locator(".jp-AgentsPanel-primary").text_content() == (
            "Open"
        )
        assert row(page, ended["id"]).locator(".jp-AgentsPanel-primary").text_content() == (
            "Replay"
        )
        row(page, spender["id"]).locator("button[data-action='menu']").click()
        assert menu_items(page) == [
            "Rename…",
            "Spending limit…",
            "Watch turns",
            "Conversation",
            "Kill…",
        ]
        shot(page, "panel-row-menu")
        page.keyboard.press("Escape")
        row(page, ended["id"]).locator("button[data-action='menu']").click()
        assert menu_items(page) == ["Restore", "Rename…", "Conversation"]  # no limit
        page.keyboard.press("Escape")
        # an ended session's cost is shown, not a way to set a limit
        cost = row(page, ended["id"]).locator(".jp-AgentsPanel-cost")
        assert cost.evaluate("e => e.tagName") == "SPAN"
        assert cost.get_attribute("data-action") is None

        page.set_viewport_size({"width": 360, "height": 740})
        open_lab(page, lab)
        panel = show_panel(page)
        panel.locator(".jp-AgentsPanel-group[data-group='ended'] > summary").click()
        row(page, ended["id"]).wait_for()
        poll(lambda: not clipped(page), what=f"every row legible on a phone: {clipped(page)}")
        row(page, spender["id"]).locator("button[data-action='menu']").click()
        heights = page.locator(
            ".jp-AgentsPanel-menu .lm-Menu-item[data-type='command']"
        ).evaluate_all("items => items.map(i => i.getBoundingClientRect().height)")
        assert heights and min(heights) >= 32, heights  # a finger's target
        shot(page, "phone-row-menu")
        page.keyboard.press("Escape")
    finally:
        page.set_viewport_size({"width": 1400, "height": 900})
        for made in (again, spender):
            lab.server.request("DELETE", f"/api/agents/sessions/{made['id']}")
