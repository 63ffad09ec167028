"""``%agent attach`` in a notebook, in JupyterLab (a real kernel, real headless
Chromium): the output is a button that opens the session's terminal tab.

The server, browser and helpers are tests/test_ui.py's. Screenshots go to ``tests/artifacts/ui/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import nbformat
import pytest
import test_ui
from nbclient import NotebookClient
from test_ui import Lab, open_lab, shot, wait_current_terminal

from jupyter_agents.clients.magics import TERMINAL_MIME

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with test_ui.running_lab(tmp_path_factory.mktemp("ui-notebook")) as lab:
        yield lab


def test_agent_attach_in_a_notebook_opens_the_terminal_tab(
    lab: Lab, page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%agent attach`` run by a real kernel gives an output that JupyterLab shows as a
    button; a click opens the session's terminal tab (a saved output opens nothing by
    itself).

    The cell runs through nbclient, and JupyterLab opens the notebook as saved.
    JupyterLab's own run path is stock code, not ours. Driven from the page under a full
    suite's load, it left the cell unrun in every try, with the kernel idle and
    connected."""
    shell = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(lab.state_dir))
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(f"%load_ext jupyter_agents\n%agent attach {shell['name']}")
        ]
    )
    try:
        NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(lab.work)}}
        ).execute()
        (output,) = nb.cells[0].outputs
        assert TERMINAL_MIME in output["data"], output  # the bundle JupyterLab renders
        nbformat.write(nb, lab.work / "attach.ipynb")

        open_lab(page, lab, reset=True)
        page.evaluate(
            "async () => { await window.jupyterapp.commands.execute("
            "'docmanager:open', {path: 'attach.ipynb', factory: 'Notebook'}); }"
        )
        button = page.locator(".jp-AgentsTerminalLink button")
        button.wait_for(timeout=60000)
        assert button.inner_text() == f"Open terminal {shell['name']} (Shell, {shell['id']})"
        shot(page, "notebook-attach")
        assert page.locator(".jp-Terminal").count() == 0  # nothing opened by itself
        button.click()
        wait_current_terminal(page, shell["name"], "the terminal tab opened by the button")
    finally:
        lab.server.request("DELETE", f"/api/agents/sessions/{shell['id']}")
        for kernel in lab.server.request("GET", "/api/kernels")[1]:
            lab.server.request("DELETE", f"/api/kernels/{kernel['id']}")
