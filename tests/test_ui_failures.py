"""What JupyterLab says when something fails (real server, real headless Chromium, the
fake agent CLIs): an agent whose CLI failed at once is not replaced by a shell when its
terminal is opened, and a backend that dies is announced on the open page with
Restore. A server of this module's own (tests/test_ui.py's helpers): these tests break
CLIs and kill the tmux server. Screenshots go to ``tests/artifacts/ui/``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_ui
from test_ui import (
    Lab,
    new_terminal,
    open_lab,
    running_by_name,
    shot,
    show_panel,
    still,
    typed_until,
    wait_notification,
    wait_text,
)

from jupyter_agents.pytest_plugin import kill_backends, poll

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with test_ui.running_lab(tmp_path_factory.mktemp("ui-failures")) as lab:
        yield lab


def test_opening_an_agent_that_failed_says_why_and_starts_no_shell(lab: Lab, page: Any) -> None:
    """An agent whose CLI failed at once (exit 3, an error on stderr): opening its
    terminal starts no unrelated shell under its name (before, JupyterLab's open made
    one); a notification says it is not running and why, in the CLI's words."""
    codex = lab.bin / "codex"
    kept = codex.read_bytes()
    codex.write_text("#!/bin/sh\necho 'codex: error: no model provider configured' >&2\nexit 3\n")
    try:
        open_lab(page, lab, reset=True)
        show_panel(page)
        status, agent = lab.server.request("POST", "/api/agents/sessions", {"kind": "codex"})
        assert status == 201, agent
        poll(lambda: lab.sessions()[agent["id"]]["status"] == "exited", what="codex to fail")
        before = set(lab.sessions())
        page.evaluate(
            "(name) => window.jupyterapp.commands.execute('jupyter-agents:open', {name})",
            agent["name"],
        )
        toast = page.locator(".Toastify__toast", has_text="is not running")
        toast.first.wait_for()
        said = toast.first.inner_text()
        assert f"Terminal {agent['name']} is not running: codex exited" in said, said
        assert "codex: error: no model provider configured" in said, said
        page.wait_for_timeout(1000)
        assert set(lab.sessions()) == before  # no shell started under its name
        assert not any(
            s["name"] == agent["name"] and s["status"] == "running" for s in lab.sessions().values()
        )
        shot(page, "agent-failed-open")
    finally:
        codex.write_bytes(kept)
        codex.chmod(0o755)


def test_losing_the_backend_is_announced_with_restore(lab: Lab, page: Any) -> None:
    """The tmux server dies while a terminal tab is open: the page says which terminal
    was interrupted and why, with Restore, as the event arrives (the latency is
    printed, not asserted); Restore brings it back running."""
    open_lab(page, lab, reset=True)
    new_terminal(page)
    typed_until(page, "echo BEFORE-$((2*21))", r"BEFORE-42")
    name = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.session.name")
    sid = running_by_name(lab, name)["id"]
    killed = time.monotonic()
    kill_backends(lab.state_dir)
    toast = page.locator(".Toastify__toast", has_text="was interrupted")
    toast.first.wait_for(timeout=20000)
    print(f"\nbackend lost -> announced in {time.monotonic() - killed:.2f} s")
    said = toast.first.inner_text()
    assert f"“Terminal {name}” was interrupted: its tmux server ended" in said, said
    still(toast.first)  # it has slid in
    shot(page, "backend-lost")
    toast.first.locator("button", has_text="Restore").click()
    poll(lambda: lab.sessions()[sid]["status"] == "running", what="the session restored")
    toast.first.wait_for(state="detached")  # nothing left to restore: the notice goes
    lab.server.request("DELETE", f"/api/agents/sessions/{sid}")


RESTORED_TWO = "Restored 2 interrupted sessions"


def toasts(page: Any, text: str) -> set[str]:
    """The ids of the notifications on the page that say ``text``."""
    found = page.locator(".Toastify__toast", has_text=text)
    return set(found.evaluate_all("nodes => nodes.map(n => n.id)"))


def test_a_loss_notice_goes_when_something_else_restores_the_sessions(lab: Lab, page: Any) -> None:
    """Two terminals lost with their backend, their tabs open: the notice names both;
    restored by the panel's Restore all instead of its own button, it withdraws itself
    and never errs ("is running; only ended sessions can be restored"), the tabs that
    closed open again, and a second loss leaves one notice, not two stacked. The time
    from Restore all to "Restored 2" is printed, not asserted."""
    open_lab(page, lab, reset=True)
    made = [lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1] for _ in "ab"]
    ids = [m["id"] for m in made]
    terminals = sorted(m["name"] for m in made)
    poll(lambda: all(lab.sessions()[i]["status"] == "running" for i in ids))

    def tabs() -> list[str]:
        return sorted(
            page.evaluate(
                "() => [...window.jupyterapp.shell.widgets('main')].filter(w => w.content"
                " && w.content.session && w.content.session.name).map(w => w.content.session.name)"
            )
        )

    for round in (1, 2):
        for name in terminals:  # each in a tab
            page.evaluate(
                "(name) => window.jupyterapp.commands.execute('jupyter-agents:open', {name})",
                name,
            )
        poll(lambda: tabs() == terminals, what="their tabs")
        kill_backends(lab.state_dir)
        notice = page.locator(".Toastify__toast", has_text="were interrupted")
        notice.first.wait_for(timeout=20000)
        said = notice.first.inner_text()
        names = " and ".join(f"“Terminal {m['name']}”" for m in made)
        assert f"{names} were interrupted" in said, said
        assert notice.count() == 1  # one notice, not one per loss
        if round == 1:
            still(notice.first)  # it has slid in
            shot(page, "backend-lost-two")
        poll(lambda: tabs() == [], what="their tabs to close")
        before = toasts(page, RESTORED_TWO)  # the last round's may still show
        clicked = time.monotonic()
        page.evaluate(
            "async () => {"
            " await window.jupyterapp.commands.execute('jupyter-agents:restore-all'); }"
        )
        poll(lambda before=before: toasts(page, RESTORED_TWO) - before, what=RESTORED_TWO)
        print(f"\nRestore all -> 'Restored 2' in {time.monotonic() - clicked:.2f} s")
        poll(
            lambda: all(lab.sessions()[i]["status"] == "running" for i in ids),
            what="both restored",
        )
        notice.first.wait_for(state="detached", timeout=10000)
        poll(lambda: tabs() == terminals, what="their tabs open again, as the notice's does")
        page.wait_for_timeout(500)  # an error toast would have come by now
        errors = page.locator(".Toastify__toast", has_text="Could not restore")
        assert errors.count() == 0, errors.first.inner_text()
    # tabs first, and saved so: a page that opens the workspace later would start a
    # new terminal for each of its terminal tabs
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('application:close-all'); }"
    )
    poll(lambda: tabs() == [], what="the tabs closed")
    workspaces = list((lab.root / "workspaces").glob("*.jupyterlab-workspace"))
    poll(
        lambda: (
            lab._workspaces_whole() and not any('"terminal:' in w.read_text() for w in workspaces)
        ),
        what="the workspace saved without the terminal tabs",
    )
    for sid in ids:
        lab.server.request("DELETE", f"/api/agents/sessions/{sid}")
    running = [s["name"] for s in lab.sessions().values() if s["status"] == "running"]
    assert running == [], running


def test_the_restart_notification_says_what_this_restart_did(lab: Lab, page: Any) -> None:
    """A restart that interrupts a session says so ("by this restart"); the next one,
    which only reattaches, says that, and mentions the session interrupted before apart,
    as a reminder, never as news of this restart."""
    lost = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    lab.restart(kill_backend=True, restore_on_open=False)  # as a reboot: lost is gone
    assert lab.sessions()[lost["id"]]["status"] == "interrupted"
    open_lab(page, lab)
    wait_notification(page, "1 session interrupted by this restart")
    kept = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    try:
        page.close()
        lab.restart()  # a clean restart: kept is reattached, nothing else changes
        page = page.context.new_page()
        open_lab(page, lab)
        toast = page.locator(".Toastify__toast", has_text="Jupyter server restarted")
        toast.first.wait_for()
        said = toast.first.inner_text()
        page.wait_for_timeout(800)  # the toast has slid in
        shot(page, "restart-toast-reminder")
        assert "1 terminal reattached (still running)." in said, said
        assert "1 session interrupted earlier can still be restored." in said, said
        assert "by this restart" not in said, said
    finally:
        for made in (lost, kept):
            lab.server.request("DELETE", f"/api/agents/sessions/{made['id']}")


def test_a_reopened_tab_of_an_ended_agent_says_so_and_resumes_it(lab: Lab, page: Any) -> None:
    """JupyterLab reopens the tab of an agent killed meanwhile: the server starts a
    shell for the name (as for any name that does not run), and the tab says which
    agent ended and how, and offers to resume it there; Resume brings the same session
    back, with its conversation id, under the tab's name. A new terminal that gets a
    free name is not mistaken for such a tab."""
    open_lab(page, lab, reset=True)
    show_panel(page)
    status, agent = lab.server.request("POST", "/api/agents/sessions", {"kind": "claude"})
    assert status == 201, agent
    page.evaluate(
        "(name) => window.jupyterapp.commands.execute('jupyter-agents:open', {name})",
        agent["name"],
    )
    wait_text(page, r"FAKE CLAUDE")
    poll(  # the workspace has saved the open tab (what the reload restores)
        lambda: (
            f"terminal:{agent['name']}"
            in json.dumps(lab.server.request("GET", "/lab/api/workspaces/default")[1])
        ),
        what="the workspace to hold the tab",
    )
    assert lab.server.request("DELETE", f"/api/agents/sessions/{agent['id']}")[0] == 204
    poll(lambda: lab.sessions()[agent["id"]]["status"] == "killed", what="the kill")
    page.reload()  # JupyterLab reopens the tab by name: a new shell takes it
    banner = page.locator(f".jp-AgentsEnded[data-session-id='{agent['id']}']")
    banner.wait_for(timeout=60000)
    said = banner.inner_text()
    shot(page, "ended-agent-tab")
    assert f"Terminal {agent['name']} ran a Claude Code session" in said, said
    assert "was killed before this tab was reopened" in said, said
    assert "new shell" in said, said
    banner.locator("button[data-action='restore']").click()
    poll(lambda: lab.sessions()[agent["id"]]["status"] == "running", what="the resume")
    resumed = lab.sessions()[agent["id"]]
    assert resumed["name"] == agent["name"]
    # its conversation id kept (resumed, or reused when it never wrote a turn)
    assert resumed["conversation_id"] == agent["conversation_id"]
    assert agent["conversation_id"] in resumed["argv"], resumed["argv"]
    # a terminal made now with a free name (perhaps an ended agent's) gets no banner
    lab.server.request("DELETE", f"/api/agents/sessions/{agent['id']}")
    poll(lambda: lab.sessions()[agent["id"]]["status"] == "killed", what="the second kill")
    new_terminal(page)
    page.wait_for_timeout(3000)
    assert page.locator(".jp-AgentsEnded").count() == 0


def test_a_tab_restored_after_a_backend_lost_in_an_earlier_run_says_so(lab: Lab, page: Any) -> None:
    """The tmux server dies while Jupyter runs (the session is interrupted then, not at
    the next start), and Jupyter is restarted before the page comes back: the reopened
    tab shows its session restored in place, and says so, as after a reboot."""
    open_lab(page, lab, reset=True)
    new_terminal(page)
    typed_until(page, "echo LOST-$((3*5))", r"LOST-15")
    name = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.session.name")
    sid = running_by_name(lab, name)["id"]
    poll(  # the workspace has saved the open tab (what the next page restores)
        lambda: (
            f"terminal:{name}"
            in json.dumps(lab.server.request("GET", "/lab/api/workspaces/default")[1])
        ),
        what="the workspace to hold the tab",
    )
    context = page.context
    page.close()
    kill_backends(lab.state_dir)
    poll(lambda: lab.sessions()[sid]["status"] == "interrupted", what="the loss noticed")
    lab.restart()
    # the boot found nothing to interrupt: it was interrupted by the run before
    boot = lab.server.request("GET", "/api/agents/reconcile")[1]["boot"]
    assert sid not in [a["session_id"] for a in boot["actions"] if a["kind"] == "interrupt"]
    page = context.new_page()
    test_ui.watch_console(page)
    open_lab(page, lab)
    banner = page.locator(f".jp-AgentsRestored[data-session-id='{sid}']")
    banner.wait_for(state="attached", timeout=30000)
    assert lab.sessions()[sid]["status"] == "running"  # the tab's POST restored it
    page.evaluate(  # its tab in front
        "(id) => window.jupyterapp.shell.activateById(document"
        ".querySelector(`.jp-AgentsRestored[data-session-id='${id}']`)"
        ".closest('.jp-MainAreaWidget').id)",
        sid,
    )
    banner.wait_for()
    said = banner.inner_text()
    assert f"Terminal {name} was interrupted when its tmux server ended" in said, said
    assert "is restored" in said, said
    assert sid in lab.server.request("GET", "/api/agents/reconcile")[1]["restored_on_open"]
    shot(page, "restored-after-earlier-loss")
    # on a phone (the tab alone, as Open shows it there), the banner within its width
    page.set_viewport_size({"width": 360, "height": 740})
    page.evaluate(
        "() => { window.jupyterapp.shell.collapseLeft();"
        " window.jupyterapp.shell.mode = 'single-document'; }"
    )
    poll(
        lambda: (b := banner.bounding_box()) is not None and b["x"] + b["width"] <= 360,
        what="the banner laid out within 360 px",
    )
    # its words and buttons inside it, not cut by the tab's layout
    parts = [banner.locator(".jp-AgentsInterrupted-text"), *banner.locator("button").all()]

    def cut() -> list[Any]:
        outer = banner.bounding_box()
        boxes = [part.bounding_box() for part in parts]
        return [
            b
            for b in boxes
            if not (outer and b and b["y"] + b["height"] <= outer["y"] + outer["height"] + 1)
        ]

    try:
        poll(lambda: not cut(), what="the banner as tall as its words and buttons")
    except AssertionError:
        raise AssertionError(f"cut by the banner {banner.bounding_box()}: {cut()}") from None
    shot(page, "restored-after-earlier-loss-phone")
    page.evaluate("() => { window.jupyterapp.shell.mode = 'multiple-document'; }")
    lab.server.request("DELETE", f"/api/agents/sessions/{sid}")
