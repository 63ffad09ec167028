"""Worktree sessions in JupyterLab (real server, real git, real headless Chromium, the
fake Claude, which edits a file with ``/write`` and commits with ``/commit``).

From the Agents panel with "In a new worktree" ticked, a Claude session starts in a new
worktree of the repository the file browser shows (and in a folder outside any
repository, the person reads why it cannot); the agent edits a notebook's cell and its
output and commits; the session's row shows its branch, its commits ahead and files
changed (read again when its turn ends), a click away from its review, which lists
the notebook, and nbdime's rendered diff shows the changed cell's source and output; a
text file shows side by side; Merge (after a confirmation that says the session will be
ended) puts the commit on the base branch, removes the worktree and the branch, and the
row says how it ended. Screenshots at 1400x900 and 360x740 go to
``tests/artifacts/ui/`` (the docs embed copies kept in ``docs/ui/``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_ui import Lab, open_lab, row, running_lab, shot, show_panel, wait_notification
from test_worktrees import IDENTITY, git, make_repo

from jupyter_agents.pytest_plugin import poll

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(300)]


def notebook(source: str, output: str) -> dict[str, Any]:
    """A one-cell notebook: ``source`` and its printed ``output``."""
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "first-cell",
                "metadata": {},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": [output]}],
                "source": [source],
            }
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def prepare(lab: Lab) -> None:
        lab.server.extra_env.update(IDENTITY)  # the agent's commits and the merge
        repo = make_repo(lab.work / "project")
        (repo / "analysis.ipynb").write_text(json.dumps(notebook("print(6 * 7)", "42\n")))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "the analysis")

    with running_lab(tmp_path_factory.mktemp("ui-worktrees"), prepare) as lab:
        yield lab


def go_to(page: Any, folder: str) -> None:
    """The file browser shows ``folder`` (where a new session starts)."""
    page.evaluate(
        "path => window.jupyterapp.commands.execute('filebrowser:go-to-path', {path})",
        folder,
    )
    poll(
        lambda: (
            page.evaluate(
                "() => window.jupyterapp.shell.widgets('left')"
                "  && [...window.jupyterapp.shell.widgets('left')]"
                "    .find(w => w.id === 'filebrowser').model.path"
            )
            == folder.strip("/")
        ),
        what=f"the file browser in {folder}",
    )


def start_in_worktree(lab: Lab, page: Any) -> dict[str, Any]:
    """Tick "In a new worktree", click New Claude; the new session's model."""
    panel = show_panel(page)
    toggle = panel.locator("input[data-action='worktree-toggle']")
    if not toggle.is_checked():
        toggle.check()
    before = set(lab.sessions())
    panel.locator("button[data-action='new'][data-kind='claude']").click()
    return poll(  # type: ignore[no-any-return]
        lambda: next((s for i, s in lab.sessions().items() if i not in before), None),
        what="the new session",
    )


def test_review_a_worktree_session_and_merge_it(lab: Lab, page: Any) -> None:
    repo = lab.work / "project"
    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})

    # 1. outside a repository: the person reads why, and nothing starts
    go_to(page, "")
    before = set(lab.sessions())
    show_panel(page).locator("input[data-action='worktree-toggle']").check()
    page.locator("#jupyter-agents-panel button[data-action='new'][data-kind='claude']").click()
    toast = page.locator(".Toastify__toast", has_text="in a worktree")
    toast.wait_for()  # shown for 10 s
    page.wait_for_timeout(500)  # slid in, for the screenshot
    said = toast.inner_text()
    # the toast cuts a long message: the reason comes before the folder
    assert said.startswith(
        "Could not start a Claude Code session in a worktree: no git repository: "
        f"{str(lab.work)[:40]}"
    ), said
    shot(page, "worktree-not-a-repository")
    assert set(lab.sessions()) == before

    # 2. in the repository: a session in a new worktree, beside it
    go_to(page, "project")
    agent = start_in_worktree(lab, page)
    tree = agent["worktree"]
    assert tree and tree["base"] == "main" and tree["repo"] == str(repo)
    path = Path(tree["path"])
    assert path.parent == lab.work / "project.worktrees" and agent["cwd"] == str(path)

    # 3. it edits the notebook's cell and output, and commits
    edited = json.dumps(notebook("print(6 * 9)", "54\n"))
    lab.server.type_line(agent["name"], f"/write analysis.ipynb {edited}", "wrote analysis.ipynb")
    lab.server.type_line(agent["name"], "/write notes.md the answer is 54", "wrote notes.md")
    lab.server.type_line(agent["name"], "/commit the answer", "committed")
    assert (repo / "analysis.ipynb").read_text().count("6 * 7") == 1  # the base: untouched

    # 4. its row: the branch, what it changed (read again when its turn ends), Review
    line = row(page, agent["id"]).locator(".jp-AgentsPanel-worktree")
    line.wait_for()
    assert line.locator(".jp-AgentsPanel-branch").inner_text() == tree["branch"]
    lab.server.type_line(agent["name"], "all-done", "claude heard: all-done")  # a turn
    summary_of_row = line.locator(".jp-AgentsPanel-worktreeSummary")
    poll(lambda: summary_of_row.inner_text() == "1 ahead · 2 files", what="the row's summary")
    shot(page, "worktree-panel")
    assert line.get_attribute("data-action") == "review"  # the line is the way in
    line.click()
    review = page.locator(f".jp-AgentsWorktree[data-session-id='{agent['id']}']")
    summary = review.locator(".jp-AgentsWorktree-summary")
    poll(lambda: "1 commit ahead of main" in summary.inner_text(), what="the review summary")
    assert "0 behind" in summary.inner_text() and "2 files changed" in summary.inner_text()
    files = review.locator(".jp-AgentsWorktree-fileButton")
    assert sorted(files.evaluate_all("bs => bs.map(b => b.dataset.path)")) == [
        "analysis.ipynb",
        "notes.md",
    ]

    # 5. the notebook through nbdime: the changed cell, its source and its output
    review.locator(".jp-AgentsWorktree-fileButton[data-path='analysis.ipynb']").click()
    diff = review.locator(".jp-AgentsWorktree-fileDiff[data-kind='notebook']")
    cell = diff.locator(".jp-Cell-diff").first
    cell.wait_for()
    assert diff.locator(".jp-Cell-diff").count() == 1
    source = cell.locator(".jp-Cellrow-source")
    poll(lambda: "6 * 9" in source.inner_text(), what="the new source in nbdime's diff")
    assert "6 * 7" in source.inner_text()  # before and after, side by side
    outputs = cell.locator(".jp-Cellrow-outputs")
    assert "54" in outputs.inner_text() and "42" in outputs.inner_text()
    assert cell.locator(".jp-Diff-twoway, .jp-Diff-added, .jp-Diff-deleted").count() >= 1
    shot(page, "worktree-review-notebook")

    # 6. a text file side by side (it is new: nothing before)
    review.locator(".jp-AgentsWorktree-fileButton[data-path='notes.md']").click()
    text = review.locator(".jp-AgentsWorktree-fileDiff[data-kind='text']")
    text.locator(".cm-mergeView").wait_for()
    assert "the answer is 54" in text.locator(".cm-merge-b").inner_text()
    assert "added" in text.locator(".jp-AgentsWorktree-diffStatus").inner_text()

    # 7. the same review on a phone
    phone = page.context.new_page()
    try:
        phone.set_viewport_size({"width": 360, "height": 740})
        open_lab(phone, lab, reset=True)
        phone.evaluate(
            "id => window.jupyterapp.commands.execute('jupyter-agents:review', {id})",
            agent["id"],
        )
        small = phone.locator(f".jp-AgentsWorktree[data-session-id='{agent['id']}']")
        small.locator(".jp-AgentsWorktree-fileButton[data-path='analysis.ipynb']").click()
        small.locator(".jp-Cell-diff").first.wait_for()
        box = small.locator(".jp-AgentsWorktree-fileButton").first.bounding_box()
        assert box and box["height"] >= 32 and box["x"] + box["width"] <= 360, box
        assert phone.evaluate("() => document.documentElement.scrollWidth") <= 360
        shot(phone, "phone-worktree-review")
    finally:
        phone.close()

    # 8. merge: asked first (the session runs: it is ended), then on main, all removed
    page.locator(".jp-AgentsWorktreeDocument .jp-Toolbar [data-action='merge'] button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for()
    words = dialog.inner_text()
    assert f"Merge {tree['branch']} into main?" in words, words
    assert "still running: it will be ended first" in words, words
    shot(page, "worktree-merge-confirm")
    dialog.locator("button.jp-mod-accept").click()
    wait_notification(page, f"{tree['branch']}: merged into main at ")
    poll(lambda: review.get_attribute("data-ended") or "", what="the review to say it ended")
    assert "finished: merged" in summary.inner_text()
    # a finished review offers nothing that cannot act (issue 54, item 5)
    toolbar = page.locator(".jp-AgentsWorktreeDocument .jp-Toolbar")
    for action in ("merge", "discard"):
        toolbar.locator(f"[data-action='{action}']").wait_for(state="hidden")
    shot(page, "worktree-review-finished")
    assert "6 * 9" in (repo / "analysis.ipynb").read_text()
    assert git(repo, "log", "-1", "--format=%s").strip() == "the answer"
    assert not path.exists()
    assert tree["branch"] not in git(repo, "branch", "--list")
    ended = row(page, agent["id"]).locator(".jp-AgentsPanel-worktreeEnded")
    ended.wait_for(state="attached")  # in the Ended group, folded
    assert ended.text_content().startswith("merged into main at "), ended.text_content()
    badge = row(page, agent["id"]).locator(".jp-AgentsPanel-badge")
    assert badge.text_content() == "merged", badge.text_content()  # not "killed" (item 9)
    assert row(page, agent["id"]).locator("button[data-action='review']").count() == 0


def test_a_merge_that_would_conflict_says_which_files_in_the_tab(lab: Lab, page: Any) -> None:
    """Two agents commit different text to the same file; the first is merged; the
    second's Merge… says in the review tab (and a notification) that it conflicts in
    that file and nothing was merged; the worktree and the session are still there."""
    repo = lab.work / "project"
    agents = []
    for text in ("from-a", "from-b"):
        status, agent = lab.server.request(
            "POST",
            "/api/agents/sessions",
            {"kind": "claude", "cwd": str(repo), "worktree": True},
        )
        assert status == 201, agent
        lab.server.type_line(agent["name"], f"/write shared.txt {text}", "wrote shared.txt")
        lab.server.type_line(agent["name"], f"/commit {text}", "committed")
        agents.append(agent)
    first, second = agents
    body = {"action": "merge", "confirm": True}
    status, done = lab.server.request("POST", f"/api/agents/sessions/{first['id']}/worktree", body)
    assert status == 200 and done["worktree"]["ended"].startswith("merged"), done

    open_lab(page, lab, reset=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.evaluate(
        "id => window.jupyterapp.commands.execute('jupyter-agents:review', {id})", second["id"]
    )
    review = page.locator(f".jp-AgentsWorktree[data-session-id='{second['id']}']")
    poll(lambda: "1 behind" in review.locator(".jp-AgentsWorktree-summary").inner_text())
    page.locator(".jp-AgentsWorktreeDocument .jp-Toolbar [data-action='merge'] button").click()
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    error = review.locator(".jp-AgentsWorktree-error")
    error.wait_for()
    words = error.inner_text()
    branch = second["worktree"]["branch"]
    assert words.startswith(f"Could not merge {branch}: merging {branch} into main "), words
    assert "conflicts in shared.txt: nothing was merged" in words, words
    wait_notification(page, f"Could not merge {branch}")
    shot(page, "worktree-merge-conflict")
    assert Path(second["worktree"]["path"]).is_dir()
    assert lab.sessions()[second["id"]]["worktree"]["ended"] is None
    assert lab.sessions()[second["id"]]["status"] == "running"  # not ended for nothing
    assert (repo / "shared.txt").read_text() == "from-a\n"


ROW_BOXES = """(sid) => {
  const row = document.querySelector(
    `#jupyter-agents-panel .jp-AgentsPanel-row[data-session-id='${sid}']`);
  const box = n => { const r = n.getBoundingClientRect();
    return {x: r.x, y: r.y, w: r.width, h: r.height, what: n.className || n.tagName}; };
  const name = row.querySelector('.jp-AgentsPanel-name');
  const parts = [name, ...row.querySelectorAll(
    '.jp-AgentsPanel-badge, .jp-AgentsPanel-started, .jp-AgentsPanel-actions button,'
    + ' .jp-AgentsPanel-meta > *')].filter(n => n.getBoundingClientRect().width > 0);
  const text = name.textContent;
  return {
    text,
    // characters shown: the name's width over the width of one of its characters
    shown: name.clientWidth / (name.scrollWidth / text.length),
    parts: parts.map(box),
    row: box(row),
  };
}"""


def test_rows_read_at_the_panels_default_width(lab: Lab, page: Any) -> None:
    """The panel at its default width (about 250 px at 1400x900): a row titled with 60
    characters, an interrupted one, an agent that spent (its cost in the row) and one
    whose worktree was discarded each show at
    least 20 characters of their name, and nothing in a row overlaps anything else or
    leaves it (issue 54, item 2)."""
    from jupyter_agents.pytest_plugin import kill_backends

    repo = lab.work / "project"
    call = lab.server.request
    status, tree = call(
        "POST", "/api/agents/sessions", {"kind": "shell", "cwd": str(repo), "worktree": True}
    )
    assert status == 201, tree
    status, ended = call(
        "POST",
        f"/api/agents/sessions/{tree['id']}/worktree",
        {"action": "discard", "confirm": True},
    )
    assert status == 200, ended
    titled = call("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    title = "Refactor the data loader and check every notebook still runs"
    assert len(title) == 60
    status, _ = call("PATCH", f"/api/agents/sessions/{titled['id']}", {"title": title})
    assert status == 200
    lost = call("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    spender = call("POST", "/api/agents/sessions", {"kind": "claude"})[1]
    lab.server.type_line(spender["name"], "hello", "claude heard: hello")
    poll(lambda: lab.sessions()[spender["id"]].get("usage"), what="what it spent")
    kill_backends(lab.state_dir)  # all interrupted; the titled one comes back
    poll(lambda: lab.sessions()[lost["id"]]["status"] == "interrupted", what="interrupted")
    status, back = call("POST", f"/api/agents/sessions/{titled['id']}/restore", {})
    assert status == 200 and back["status"] == "running", back
    try:
        page.set_viewport_size({"width": 1400, "height": 900})
        open_lab(page, lab, reset=True)
        panel = show_panel(page)
        for sid in (titled["id"], lost["id"], tree["id"], spender["id"]):
            row(page, sid).wait_for(state="attached")
        folded = panel.locator("details.jp-AgentsPanel-group:not([open]) > summary")
        while folded.count():  # the Ended group is folded until opened
            folded.first.click()
        width = panel.bounding_box()["width"]
        print(f"\npanel width {width:.0f} px")
        shot(page, "panel-rows-250")
        page.set_viewport_size({"width": 360, "height": 740})
        page.wait_for_timeout(300)  # laid out again
        shot(page, "phone-panel-rows")
        page.set_viewport_size({"width": 1400, "height": 900})
        for sid in (titled["id"], lost["id"], tree["id"], spender["id"]):
            got = page.evaluate(ROW_BOXES, sid)
            assert got["shown"] >= min(20, len(got["text"])) - 0.5, got
            parts, edge = got["parts"], got["row"]
            for i, a in enumerate(parts):
                assert (
                    edge["x"] - 0.5 <= a["x"] and a["x"] + a["w"] <= edge["x"] + edge["w"] + 0.5
                ), (
                    a,
                    edge,
                )
                for b in parts[i + 1 :]:
                    apart = (
                        a["x"] + a["w"] <= b["x"] + 0.5
                        or b["x"] + b["w"] <= a["x"] + 0.5
                        or a["y"] + a["h"] <= b["y"] + 0.5
                        or b["y"] + b["h"] <= a["y"] + 0.5
                    )
                    assert apart, (a, b)
    finally:
        for sid in (titled["id"], lost["id"]):
            call("DELETE", f"/api/agents/sessions/{sid}")
