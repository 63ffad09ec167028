"""Read-only sharing in JupyterLab (real server, real headless Chromium): alice, the
server's owner, shares a running shell with bob from the Agents panel; bob watches it
in a browser of his own, types into it in vain, and is disconnected when alice revokes.
A server that cannot share says why in the dialog.

The users are the token users of tests/fakes/users.py (no hub), behind the authorizer
and the narrowing identity mixin a hub server is configured with, as in
tests/test_sharing.py. JupyterLab takes its API token from its page config
(``PageConfig.getToken()``), which the server fills from ``IdentityProvider.token``:
the ServerProcess's TOKEN, alice's in the users file, so Lab's REST requests are
alice's. Lab's websockets (terminals, events) carry no token: the fake's cookie, set
when ``/lab?token=...`` is opened, identifies them; bob's page gets his cookie the same
way. A fake hub API answers the share-code request, so the dialog's hub link shows too.

The browser and helpers are tests/test_ui.py's (imported); the servers are this
module's own. Screenshots go to ``tests/artifacts/ui/``; the docs embed copies kept in
``docs/ui/``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import test_ui
from test_sharing import FAKES, SHARING_ARGS
from test_ui import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Lab,
    act,
    open_lab,
    playwright,
    row,
    shot,
    show_panel,
    terminal_text,
    typed_until,
    wait_status,
)

from jupyter_agents.pytest_plugin import TOKEN, kill_backends, poll

# test_ui's fixtures: a browser page of this module's server
page = test_ui.page
jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(180)]

BOB = "bob-token-5d2e"
#: the share code's link the fake hub answers with (relative, as the hub's `accept_url`)
ACCEPT = "/hub/accept-share?code=fake-code"

VIEWER_TEXT = """() => [...document.querySelectorAll('#terminal .xterm-rows > div')]
  .map(r => r.textContent.replace(/\\u00a0/g, ' ')).join('\\n')"""


class FakeHub(BaseHTTPRequestHandler):
    """The hub API's share-code route: records the request, answers a relative link."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append((self.path, json.loads(body)))  # type: ignore[attr-defined]
        answer = json.dumps({"accept_url": ACCEPT}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hub() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, hub: ThreadingHTTPServer) -> Iterator[Lab]:
    """test_ui's Lab, its server configured to share: alice owns it, bob is a user."""
    sync_api = playwright()
    root = tmp_path_factory.mktemp("ui-sharing")
    users = root / "users.json"
    users.write_text(json.dumps({TOKEN: "alice", BOB: "bob"}))
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        lab = Lab(root, browser)
        server = lab.server
        server.extra_env.update(
            {
                "JUPYTERHUB_USER": "alice",
                "JUPYTER_AGENTS_TEST_USERS": str(users),
                "PYTHONPATH": os.pathsep.join([str(FAKES), server.extra_env["PYTHONPATH"]]),
                "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub.server_address[1]}/hub/api",
                "JUPYTERHUB_API_TOKEN": "fake-server-token",
            }
        )
        server.extra_args += SHARING_ARGS
        # the panel is refreshed by events only: an hour between fallback polls
        settings = lab.settings / "jupyter-agents" / "sessions.jupyterlab-settings"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"pollInterval": 3600}))
        try:
            server.start()
            yield lab
        finally:
            server.stop(signal.SIGKILL)
            kill_backends(lab.state_dir)
            browser.close()


def viewer_text(page: Any) -> str:
    return str(page.evaluate(VIEWER_TEXT))


def share_from_panel(page: Any, session_id: str, viewer: str, expiry: str) -> Any:
    """Fill the row's share dialog and press Enter in the viewer box; the next dialog."""
    act(page, session_id, "share")
    dialog = page.locator(".jp-Dialog")
    dialog.locator("select[name='expires']").select_option(label=expiry)
    box = dialog.locator("input[name='viewer']")
    box.fill(viewer)
    shot(page, "share-dialog")
    box.press("Enter")
    dialog.locator(".jp-Dialog-header", has_text="shared read-only").or_(
        dialog.locator(".jp-AgentsShare-error")
    ).wait_for()
    return dialog


def test_alice_shares_a_shell_with_bob_who_watches_read_only(
    lab: Lab, page: Any, hub: ThreadingHTTPServer
) -> None:
    status, shell = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, shell
    sid = shell["id"]
    open_lab(page, lab, reset=True)
    show_panel(page)
    wait_status(page, sid, "running")

    # alice shares it with bob for 15 minutes: the dialog shows both links
    dialog = share_from_panel(page, sid, "bob", "15 minutes")
    shares = lab.server.request("GET", "/api/agents/shares")[1]
    assert [(s["session_id"], s["viewer"]) for s in shares] == [(sid, "bob")]
    grant = shares[0]
    watch = dialog.locator("input[data-link='watch']").input_value()
    assert watch == f"{lab.server.base}/agents/view/{grant['id']}"
    link = dialog.locator("input[data-link='hub']").input_value()
    assert link.startswith(f"{lab.server.base}{ACCEPT}&")  # made absolute
    assert parse_qs(urlsplit(link).query)["next"] == [f"/agents/view/{grant['id']}"]
    assert hub.requests == [  # type: ignore[attr-defined]
        ("/hub/api/share-codes/alice/", {"expires_in": 900})
    ]
    assert "bob can watch it, read-only, until" in dialog.inner_text()
    copy = dialog.locator("input[data-link='watch'] + button[data-action='copy']")
    copy.click()
    assert copy.inner_text() == "Copied"
    shot(page, "share-links")
    dialog.locator("button.jp-mod-accept", has_text="Done").click()
    badge = row(page, sid).locator(f".jp-AgentsPanel-shared[data-share-id='{grant['id']}']")
    poll(lambda: badge.count() == 1 and badge.inner_text().startswith("shared"), what="the badge")

    # bob opens the watch page in a browser of his own
    context = lab.browser.new_context(viewport={"width": 1000, "height": 600})
    try:
        bob = context.new_page()
        bob.set_default_timeout(20000)
        bob.goto(f"{watch}?token={BOB}")
        status_line = bob.locator("#status")
        poll(lambda: status_line.inner_text() == "watching (read-only)", what="bob connected")
        assert "Read-only view of session" in bob.locator("header").inner_text()

        # alice's shell prints a marker: bob sees it
        act(page, sid, "open")
        page.wait_for_selector(".jp-Terminal .xterm-accessibility-tree")
        typed_until(page, 'echo "SHA""RED-$((6*7))"', r"SHARED-42")
        poll(lambda: "SHARED-42" in viewer_text(bob), what="the marker on bob's page")

        # bob types a command into his page: nothing reaches alice's shell
        pwned = lab.work / "typed-by-bob"
        bob.locator("#terminal").click()
        bob.keyboard.type(f"touch {pwned}")
        bob.keyboard.press("Enter")
        typed_until(page, 'echo "AF""TER-$((7*7))"', r"AFTER-49")
        assert not pwned.exists()
        assert "typed-by-bob" not in terminal_text(page)
        poll(lambda: "AFTER-49" in viewer_text(bob), what="alice's later output on bob's page")
        assert "typed-by-bob" not in viewer_text(bob)

        # alice's row says bob is watching (the fallback poll is hourly: the event did it)
        show_panel(page)
        poll(
            lambda: badge.inner_text().startswith("watched by bob"),
            timeout=5,
            what="watched by bob",
        )
        assert badge.get_attribute("data-watchers") == "bob"
        shot(page, "panel-share")
        shot(bob, "viewer")

        # alice revokes in the panel: bob is disconnected at once, the badge goes
        badge.locator("button[data-action='revoke']").click()
        poll(
            lambda: status_line.inner_text() == "disconnected: share revoked",
            timeout=5,
            what="bob's page disconnected",
        )
        poll(lambda: badge.count() == 0, what="the badge gone")
        # bob's page never sent a thing (the server counts what a viewer sends)
        gone = rf"viewer bob disconnected from share {grant['id']}: \d+ bytes sent, (\d+) input"
        dropped = poll(lambda: re.findall(gone, lab.server.log_path.read_text()), what="audit")
        assert dropped == ["0"]
        assert lab.server.request("GET", "/api/agents/shares")[1] == []
        assert "SHARED-42" in viewer_text(bob)  # what he saw stays on his screen
        shot(bob, "viewer-revoked")
    finally:
        context.close()
        lab.server.request("DELETE", f"/api/agents/sessions/{sid}")


@pytest.fixture
def plain_lab(lab: Lab, tmp_path: Path) -> Iterator[Lab]:
    """A server without an owner or our authorizer (a plain `jupyter lab`)."""
    plain = Lab(tmp_path, lab.browser)
    try:
        plain.server.start()
        yield plain
    finally:
        plain.server.stop(signal.SIGKILL)
        kill_backends(plain.state_dir)


def test_a_server_that_cannot_share_says_why(plain_lab: Lab, page: Any) -> None:
    """Share is not offered where it cannot work; asked for anyway (the command, from the
    palette), the reason comes at once, in the server's words, before any form."""
    status, shell = plain_lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, shell
    open_lab(page, plain_lab, reset=True)
    show_panel(page)
    wait_status(page, shell["id"], "running")
    row(page, shell["id"]).locator("button[data-action='menu']").click()
    items = page.locator(".jp-AgentsPanel-menu li[data-type='command']")
    items.first.wait_for()
    assert page.locator(".jp-AgentsPanel-menu li[data-command='agents-row:share']").count() == 0
    assert "Rename…" in items.all_inner_texts()[0]
    page.keyboard.press("Escape")
    page.evaluate(
        "(id) => { void window.jupyterapp.commands.execute('jupyter-agents:share', {id}); }",
        shell["id"],
    )
    dialog = page.locator(".jp-Dialog")
    error = dialog.locator(".jp-AgentsShare-error")
    assert error.inner_text() == (
        "read-only sharing needs JupyterHub ($JUPYTERHUB_USER names the owner)"
    )
    # the header is a ReactWidget: React renders it a tick after the body is attached
    dialog.locator(".jp-Dialog-header", has_text="Could not share Shell session").wait_for()
    assert dialog.locator("input[name='viewer']").count() == 0  # no form first
    shot(page, "share-refused")
    dialog.locator("button.jp-mod-accept", has_text="Close").click()
    assert row(page, shell["id"]).locator(".jp-AgentsPanel-shared").count() == 0
