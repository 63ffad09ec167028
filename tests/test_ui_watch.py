"""The watch page in a real browser (headless Chromium) across a restart of the owner's
server: it says the server is away, connects again by itself with the same grant, and
shows what the owner prints after; a revoke then ends it for good.

The server shares as tests/test_sharing.py's does (the token users of
tests/fakes/users.py, no hub; bob's page gets his cookie from ``?token=``), and is
stopped (SIGTERM: sessions detach) and started again on the same port.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_hub import typed
from test_sharing import BOB, FAKES, SHARING_ARGS, env, new_shell, share, users
from test_ui import CHROMIUM, CHROMIUM_ARGS, playwright
from test_ui_sharing import viewer_text

from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll

ROOT = Path(__file__).resolve().parent.parent
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup
__all__ = ["users"]  # a fixture of test_sharing

pytestmark = [pytest.mark.ui, pytest.mark.timeout(180)]


def state(page: Any) -> str:
    """The page's ``body[data-state]`` (read over the debugger: the page's CSP forbids
    the eval that ``wait_for_function`` needs)."""
    return str(page.evaluate("document.body.dataset.state"))


def status(page: Any) -> str:
    return str(page.evaluate("document.getElementById('status').textContent"))


def test_the_watch_page_comes_back_after_the_owners_server_restarts(
    tmp_path: Path, users: Path
) -> None:
    sync_api = playwright()
    variables = {**env(users), "PYTHONPATH": os.pathsep.join([str(FAKES), str(ROOT)])}
    server = ServerProcess(tmp_path / "state", tmp_path, env=variables, args=SHARING_ARGS)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            server.start()
            name, sid = new_shell(server)
            grant = share(server, sid)
            owner = server.ws(name)
            typed(owner, "echo BEFORE-$((6*7))", "BEFORE-42")
            page = browser.new_page()
            page.goto(f"{server.base}/agents/view/{grant['id']}?token={BOB}")
            poll(lambda: state(page) == "watching", what="watching")
            poll(lambda: "BEFORE-42" in viewer_text(page), what="the owner's output")
            owner.close()

            server.stop()  # SIGTERM: the shell detaches, the page loses its socket
            poll(lambda: state(page) == "away", what="away")
            assert status(page).startswith("the owner's server is away; trying again in ")
            server.start()
            poll(lambda: state(page) == "watching", timeout=60, what="watching again")
            owner = server.ws(name)
            typed(owner, "echo AFTER-$((6*7))", "AFTER-42")
            poll(lambda: "AFTER-42" in viewer_text(page), what="output after the restart")
            assert viewer_text(page).count("BEFORE-42") == 1  # the screen redrawn, not doubled

            status_, _ = server.request("DELETE", f"/api/agents/shares/{grant['id']}")
            assert status_ == 204
            poll(lambda: state(page) == "ended", what="ended")
            assert "revoked" in status(page), status(page)
            time.sleep(2)  # longer than the first pause before a reconnect
            assert state(page) == "ended"  # no attempt after a revoke
            owner.close()
        finally:
            server.stop(signal.SIGKILL)
            kill_backends(tmp_path / "state")
            browser.close()
