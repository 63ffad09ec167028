"""``%agent attach`` in a notebook, in JupyterLab (a real kernel, real headless
Chromium): the output is a button that opens the session's terminal tab.

A module of its own, with a fresh server and browser: in a full run, after the other
browser tests of tests/test_ui.py had used the shared page, the notebook's cell was
left unrun (its kernel idle and connected, no execution) in every try. The server,
browser and helpers are tests/test_ui.py's. Screenshots go to ``tests/artifacts/ui/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import test_ui
from test_ui import Lab, open_lab, shot, wait_current_terminal

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with test_ui.running_lab(tmp_path_factory.mktemp("ui-notebook")) as lab:
        yield lab


def test_agent_attach_in_a_notebook_opens_the_terminal_tab(lab: Lab, page: Any) -> None:
    """``%agent attach`` in a notebook (a real kernel) shows a button; a click opens the
    session's terminal tab in JupyterLab (a saved output opens nothing by itself)."""
    shell = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    try:
        open_lab(page, lab, reset=True)
        page.evaluate(
            "async () => { await window.jupyterapp.commands.execute("
            "'notebook:create-new', {kernelName: 'python3'}); }"
        )
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
        page.evaluate(
            """(code) => { const nb = window.jupyterapp.shell.currentWidget;
                 nb.content.activeCell.model.sharedModel.setSource(code); }""",
            f"%load_ext jupyter_agents\n%agent attach {shell['name']}",
        )
        # run it once its kernel is idle (it starts with the notebook); a run sent while
        # the kernel's connection settles can be lost (seen once in a full suite): run
        # again while the cell shows no run of its own
        button = page.locator(".jp-AgentsTerminalLink button")
        for attempt in range(4):
            page.wait_for_function(
                """() => { const nb = window.jupyterapp.shell.currentWidget;
                     const k = nb && nb.context && nb.context.sessionContext.session
                       && nb.context.sessionContext.session.kernel;
                     return !!k && k.connectionStatus === 'connected'
                       && k.status === 'idle'; }""",
                timeout=90000,  # a kernel's first start
            )
            if attempt == 0:
                page.evaluate(
                    """async () => { const nb = window.jupyterapp.shell.currentWidget;
                         nb.content.activate();
                         await window.jupyterapp.commands.execute('notebook:run-cell'); }"""
                )
            else:  # as a person runs it: the cell, then Shift+Enter
                page.locator(".jp-Notebook .jp-Cell").first.click()
                page.keyboard.press("Shift+Enter")
            try:
                button.wait_for(timeout=20000)
                break
            except Exception:  # playwright's TimeoutError: not run, try again
                state = page.evaluate(
                    """() => { const nb = window.jupyterapp.shell.currentWidget;
                         const cell = nb && nb.content && nb.content.activeCell;
                         const s = nb && nb.context && nb.context.sessionContext.session;
                         const k = s && s.kernel;
                         const dialog = document.querySelector('.jp-Dialog');
                         return {widget: nb && nb.title.label,
                                 ready: nb && nb.context.sessionContext.isReady,
                                 dialog: dialog && dialog.innerText,
                                 count: cell && cell.model.executionCount,
                                 outputs: cell && cell.model.outputs.length,
                                 kernel: k && [k.status, k.connectionStatus]}; }"""
                )
                print("notebook: the run was lost, again:", state)
                continue
        button.wait_for(timeout=1000)
        assert button.inner_text() == f"Open terminal {shell['name']} (Shell, {shell['id']})"
        shot(page, "notebook-attach")
        assert page.locator(".jp-Terminal").count() == 0  # nothing opened by itself
        button.click()
        wait_current_terminal(page, shell["name"], "the terminal tab opened by the button")
    finally:
        lab.server.request("DELETE", f"/api/agents/sessions/{shell['id']}")
        for kernel in lab.server.request("GET", "/api/kernels")[1]:
            lab.server.request("DELETE", f"/api/kernels/{kernel['id']}")
