"""The watch page through a real JupyterHub, in a real browser (headless Chromium),
while the owner's server restarts: ja-bob watches ja-alice's shell; the hub stops her
server (the page says it is away and keeps trying) and starts it again. JupyterHub
deleted the server's OAuth client, and bob's token with it, when it stopped, so the page
then asks bob to open it again; the hub asks him to authorize the server once more, and
he watches again, the same grant, with what alice printed after.

bob's login, the accept link and the first authorization are test_hub_sharing's
:func:`accept` (urllib); its cookies are handed to the browser.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import test_hub
from test_hub import Hub, running_hub, typed
from test_hub_sharing import ALICE, BOB, accept, make_grant, new_session, view_path
from test_ui import CHROMIUM, CHROMIUM_ARGS, playwright
from test_ui_sharing import viewer_text

from jupyter_agents.pytest_plugin import poll

pytestmark = [m for m in test_hub.pytestmark if m.name != "timeout"] + [pytest.mark.timeout(300)]


@pytest.fixture
def hub() -> Iterator[Hub]:
    with running_hub((ALICE, BOB)) as running:
        running.start_server(ALICE)
        yield running


def state(page: Any) -> str:
    return str(page.evaluate("document.body.dataset.state"))


def status(page: Any) -> str:
    return str(page.evaluate("document.getElementById('status').textContent"))


def test_the_watch_page_through_a_restart_of_alices_server(hub: Hub) -> None:
    sync_api = playwright()
    token = hub.token(ALICE)
    shell = new_session(hub, token)
    alice = hub.ws(ALICE, token, shell["name"])
    typed(alice, "echo BEFORE-$((6*7))", "BEFORE-42")
    alice.close()
    status_, grant = make_grant(hub, token, shell["id"], BOB, 900)
    assert status_ == 201, grant
    bob = accept(hub, grant)  # logged in to the hub, share accepted, server authorized
    watch_url = hub.url + view_path(grant["id"])

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.add_cookies(
                [
                    {"name": c.name, "value": c.value, "domain": "127.0.0.1", "path": c.path}
                    for c in bob.jar
                ]
            )
            page = context.new_page()
            page.goto(watch_url)
            poll(lambda: state(page) == "watching", what="watching")
            poll(lambda: "BEFORE-42" in viewer_text(page), what="alice's output")

            hub.stop_server(ALICE)
            poll(lambda: state(page) == "away", what="away")
            assert status(page).startswith("the owner's server is away; trying again in ")
            hub.start_server(ALICE)
            # bob's token went with the server's OAuth client: the page says to sign in
            seen = []
            deadline = time.monotonic() + 60
            while state(page) != "signin":
                seen.append((state(page), status(page)))
                assert time.monotonic() < deadline, sorted(set(seen))
                time.sleep(0.5)
            link = page.locator("#status a")
            assert link.get_attribute("href") == watch_url
            link.click()
            page.wait_for_load_state()
            assert urllib.parse.urlsplit(page.url).path == "/hub/api/oauth2/authorize"
            page.locator("form [type=submit]").first.click()  # the hub's Authorize
            page.wait_for_load_state()
            assert page.url == watch_url
            poll(lambda: state(page) == "watching", what="watching again")
            token = hub.token(ALICE)
            alice = hub.ws(ALICE, token, shell["name"])
            typed(alice, "echo AFTER-$((6*7))", "AFTER-42")
            alice.close()
            poll(lambda: "AFTER-42" in viewer_text(page), what="output after the restart")
        finally:
            browser.close()
