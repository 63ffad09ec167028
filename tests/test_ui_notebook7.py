"""Notebook 7 (``/tree``) in a real headless Chromium against a real ``jupyter server``
with our labextension: the restart notice is said once per server start, not on every
page load (Notebook 7 keeps no workspace between loads, so only the browser's storage
remembers it). Screenshots go to ``tests/artifacts/ui/``."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
import test_ui
from test_ui import Lab, running_lab, shot

page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def prepare(lab: Lab) -> None:
        # Notebook 7 finds our labextension where JupyterLab does, and shows its app
        lab.server.extra_args += [
            arg.replace("--LabApp.", "--JupyterNotebookApp.")
            for arg in lab.args
            if arg.startswith("--LabApp.")
        ]

    with running_lab(tmp_path_factory.mktemp("ui-notebook7"), prepare) as lab:
        yield lab


def open_tree(page: Any, lab: Lab) -> None:
    """Notebook 7's file browser page, its plugins (ours among them) started."""
    page.goto(lab.url("/tree"))
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell")
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")


def test_notebook7_says_the_restart_notice_once_per_restart(lab: Lab, page: Any) -> None:
    """One restart, ``/tree`` loaded three times: the notice on the first load, none on
    the two after (absence read 4 s after the page's plugins started, as in
    tests/test_ui.py); a second restart is said again."""
    page.set_viewport_size({"width": 1400, "height": 900})
    shell = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    try:
        for restart in range(2):
            # no page of the last server open meanwhile: one that sees the new server
            # start says the notice itself (once, as it should), and the loads below then
            # rightly say nothing
            page.goto("about:blank")
            lab.restart(signal.SIGTERM)
            for load in range(3):
                open_tree(page, lab)
                notice = page.locator(".Toastify__toast", has_text="Jupyter server restarted")
                if load == 0:
                    notice.first.wait_for()
                    said = notice.first.inner_text()
                    assert "1 terminal reattached (still running)" in said, said
                    if restart == 0:
                        page.wait_for_timeout(500)  # slid in
                        shot(page, "notebook7-restart-notice")
                        # what it offers works here: Show agents shows the panel
                        test_ui.still(notice.first)
                        notice.first.locator("button", has_text="Show agents").click()
                        page.locator("#jupyter-agents-panel").wait_for()
                        shot(page, "notebook7-panel")
                else:
                    page.wait_for_timeout(4000)
                    assert notice.count() == 0, (
                        f"restart {restart + 1}, load {load + 1}: {notice.first.inner_text()}"
                    )
    finally:
        lab.server.request("DELETE", f"/api/agents/sessions/{shell['id']}")
