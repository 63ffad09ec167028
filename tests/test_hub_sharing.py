"""Read-only sharing through a real JupyterHub (issue 17): system users ja-alice (the
owner), ja-bob (the viewer) and ja-carol (a bystander) behind the hub and
configurable-http-proxy, with the example config (examples/jupyterhub), whose
single-user servers run jupyter_agents' ViewerAuthorizer and ViewerIdentityProvider.

bob takes the accept link that comes with alice's grant (a hub share code her server
made with its own token) after logging in to the hub, lands on the watch page through
the hub's OAuth, and watches over a cookie-authenticated websocket as a browser would.
The same acceptance without a hub is tests/test_sharing.py; the hub, its helpers and
the users' cleanup are tests/test_hub.py's."""

from __future__ import annotations

import http.client
import http.cookiejar
import json
import re
import statistics
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from typing import Any

import pytest
import test_hub
import websocket
from test_hub import Hub, running_hub
from test_sharing import closed

from jupyter_agents.pytest_plugin import TermClient

ALICE, BOB, CAROL = "ja-alice", "ja-bob", "ja-carol"
USERS = (ALICE, BOB, CAROL)
#: seconds between the server's re-validations of each viewer with the hub
REVALIDATE = 2
SHELL = {"kind": "shell"}
MARK = re.compile(r"MARK-(\d+\.\d+)-END")

# test_hub's marks and skip conditions, with a timeout of our own
pytestmark = [m for m in test_hub.pytestmark if m.name != "timeout"] + [pytest.mark.timeout(300)]


class HiddenForm(HTMLParser):
    """The hidden inputs of a page's ``<form method="post" action="">`` (what a browser
    submits from the hub's accept-share and OAuth confirmation pages)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("type") == "hidden" and a.get("name"):
            self.fields.append((str(a["name"]), a.get("value") or ""))


class Browser:
    """A user's browser on the hub: a cookie jar, redirects followed (and recorded)."""

    def __init__(self, hub: Hub, user: str) -> None:
        self.hub = hub
        self.jar = http.cookiejar.CookieJar()
        assert hub.login(user, self.jar) == 302
        self.visited: list[str] = []
        browser = self

        class Recording(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                                 newurl: str) -> Any:  # fmt: skip
                browser.visited.append(urllib.parse.urlsplit(newurl).path)
                return super().redirect_request(req, fp, code, msg, headers, newurl)

        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), Recording()
        )
        self.plain = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), test_hub.NoRedirect()
        )

    def open(self, url: str, form: list[tuple[str, str]] | None = None) -> tuple[int, str, str]:
        """GET (or POST ``form`` to) ``url``, following redirects: (status, final URL,
        body)."""
        data = None if form is None else urllib.parse.urlencode(form).encode()
        try:
            with self.opener.open(url, data=data, timeout=30) as resp:
                return resp.status, resp.geturl(), resp.read().decode()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.geturl(), e.read().decode(errors="replace")

    def submit(self, url: str, page: str) -> tuple[int, str, str]:
        """Submit the page's form (its hidden inputs) to its own URL, as its button does."""
        parser = HiddenForm()
        parser.feed(page)
        assert parser.fields, page[-2000:]
        return self.open(url, parser.fields)

    def status(self, path: str) -> int:
        """The status of a GET of ``path`` with this browser's cookies, no redirect."""
        try:
            with self.plain.open(self.hub.url + path, timeout=30) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            with e:
                return int(e.code)

    def cookie(self, path: str) -> str:
        """The Cookie header this browser sends to ``path``."""
        return "; ".join(f"{c.name}={c.value}" for c in self.jar if path.startswith(c.path))


class CookieViewer(TermClient):
    """A watch socket authenticated as a browser's: by its cookies only."""

    def __init__(self, url: str, cookie: str, origin: str) -> None:
        self.ws = websocket.create_connection(
            url, cookie=cookie, origin=origin, header=["Sec-Fetch-Mode: websocket"], timeout=10
        )
        self.messages: list[list[Any]] = []
        self.text = ""


def view_path(share_id: str) -> str:
    return f"/user/{ALICE}/agents/view/{share_id}"


def watch(hub: Hub, browser: Browser, share_id: str) -> CookieViewer:
    path = view_path(share_id) + "/socket"
    client = CookieViewer(f"ws://127.0.0.1:{hub.port}{path}", browser.cookie(path), hub.url)
    client.wait_for(lambda c: len(c.messages) >= 2)  # setup, then the screen
    return client


def make_grant(hub: Hub, token: str, session_id: str, viewer: str, expires_in: int) -> Any:
    """alice's ``POST /api/agents/shares``: (status, model)."""
    body = {"session": session_id, "viewer": viewer, "expires_in": expires_in}
    return hub.user_api(ALICE, token, "POST", "/api/agents/shares", body)


def http_status(hub: Hub, method: str, path: str, token: str) -> int:
    """The status of one request to alice's server through the hub as ``token``."""
    data = b"{}" if method in ("POST", "PUT", "PATCH") else None
    req = urllib.request.Request(f"{hub.url}/user/{ALICE}{path}", data=data, method=method)
    req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code)


def handshake(hub: Hub, path: str, token: str = "", cookie: str = "") -> int:
    """The status of a websocket handshake to alice's server through the hub (101 when
    it was accepted)."""
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-Fetch-Mode": "websocket",
        "Origin": hub.url,
    }
    if token:
        headers["Authorization"] = f"token {token}"
    if cookie:
        headers["Cookie"] = cookie
    conn = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    try:
        conn.request("GET", f"/user/{ALICE}{path}", headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def marker_latencies(client: TermClient, count: int, timeout: float = 20) -> list[float]:
    """Seconds from each ``MARK-<time>-END`` being printed (``date +%s.%N`` in alice's
    shell) to its frame reaching ``client``, for the first ``count`` markers."""
    latencies: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(latencies) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"saw {len(latencies)} of {count} markers: ...{client.text[-800:]!r}"
        client.ws.settimeout(left)
        message = json.loads(client.ws.recv())
        arrived = time.time()
        if message[0] == "stdout":
            client.text += message[1]
            for printed in MARK.findall(client.text):
                latencies.setdefault(printed, arrived - float(printed))
    return list(latencies.values())[:count]


def time_to_close(client: TermClient, timeout: float) -> float | None:
    """Seconds until the server closes ``client`` (None: still open after ``timeout``)."""
    start = time.monotonic()
    return time.monotonic() - start if closed(client, timeout) else None


def test_bob_watches_alice_through_the_hub() -> None:
    config = (
        "c.Spawner.args = [*c.Spawner.args, "
        f"'--AgentsApp.share_revalidate_interval={REVALIDATE}']\n"
    )
    with running_hub(USERS, config) as hub:
        run(hub)


def run(hub: Hub) -> None:
    hub.start_server(ALICE)
    tokens = {user: hub.token(user) for user in USERS}
    alice_token = tokens[ALICE]

    # alice: a shell to share, another she keeps to herself
    status_, shell = hub.user_api(ALICE, alice_token, "POST", "/api/agents/sessions", SHELL)
    assert status_ == 201, shell
    other = hub.user_api(ALICE, alice_token, "POST", "/api/agents/sessions", SHELL)[1]
    alice = hub.ws(ALICE, alice_token, shell["name"])
    alice.wait_for(lambda c: len(c.messages) >= 2)

    # the grant, with its accept link: a share code made by alice's server (its token)
    status_, grant = make_grant(hub, alice_token, shell["id"], BOB, 900)
    assert status_ == 201, grant  # 409 unless both of our classes are active
    assert "hub_error" not in grant, grant["hub_error"]
    accept = urllib.parse.urlsplit(grant["accept_url"])
    assert accept.path == "/hub/accept-share"
    assert urllib.parse.parse_qs(accept.query)["next"] == [view_path(grant["id"])]
    log = hub.log_path.read_text()
    assert "jupyter_agents: read-only sharing available" in log

    # before accepting it, the hub itself refuses bob (and always carol); a token of his
    # own for this: the server caches the hub's answer for a token (HubAuth, 300 s)
    for token in (hub.token(BOB), tokens[CAROL]):
        assert http_status(hub, "GET", f"/agents/view/{grant['id']}", token) == 403
        assert handshake(hub, f"/agents/view/{grant['id']}/socket", token) == 403

    # bob logs in to the hub, opens the link, accepts, authorizes: the watch page
    bob = Browser(hub, BOB)
    code, url, page = bob.open(hub.url + grant["accept_url"])
    assert code == 200 and "Accept invitation" in page, page[-2000:]
    code, url, page = bob.submit(url, page)
    if urllib.parse.urlsplit(url).path == "/hub/api/oauth2/authorize":
        assert code == 200 and "Authorize" in page, page[-2000:]  # first visit: consent
        code, url, page = bob.submit(url, page)
    assert (code, urllib.parse.urlsplit(url).path) == (200, view_path(grant["id"])), page[-2000:]
    assert "Read-only view of session" in page and 'data-socket="' in page
    print("bob's way to the watch page:", " -> ".join(bob.visited))
    shared = hub.api("GET", f"/hub/api/shares/{ALICE}/", token=alice_token)[1]
    assert [s["user"]["name"] for s in shared["items"]] == [BOB]  # the hub share
    # his browser's cookie and his API tokens reach alice's server now (so the 403s below
    # are ours, not the hub's)
    assert bob.status(view_path(grant["id"])) == 200
    assert http_status(hub, "GET", f"/agents/view/{grant['id']}", tokens[BOB]) == 200

    # 1. what alice's shell prints reaches bob's (cookie-authenticated) socket
    viewer = watch(hub, bob, grant["id"])
    alice.stdin('for i in 1 2 3 4 5 6 7 8; do echo "MARK-$(date +%s.%N)-END"; sleep 0.25; done\r')
    latencies = marker_latencies(viewer, 8)
    print(
        "marker printed in alice's shell -> bob's socket through the hub: "
        f"median {1000 * statistics.median(latencies):.0f} ms, max {1000 * max(latencies):.0f} ms"
        f" over {len(latencies)}: {[round(1000 * s) for s in latencies]}"
    )
    assert max(latencies) < 5  # the acceptance is 1 s; this only catches a stuck stream
    alice.drain(0.2)

    # 3. nothing else of alice's server for bob, with the live grant and the hub share;
    # carol (no hub share) is refused by the hub everywhere
    routes = [
        ("GET", "/api/agents/sessions"),
        ("POST", "/api/agents/sessions"),
        ("GET", f"/api/agents/sessions/{shell['id']}"),
        ("DELETE", f"/api/agents/sessions/{shell['id']}"),
        ("GET", f"/api/agents/sessions/{other['id']}"),
        ("GET", f"/api/agents/sessions/{other['id']}/log"),
        ("GET", f"/api/agents/sessions/{shell['id']}/export"),
        ("POST", f"/api/agents/sessions/{other['id']}/restore"),
        ("GET", "/api/agents/search?q=MARK"),
        ("GET", "/api/agents/shares"),
        ("POST", "/api/agents/shares"),
        ("DELETE", f"/api/agents/shares/{grant['id']}"),
        ("GET", "/api/agents/kinds"),
        ("POST", "/api/agents/reconcile"),
        ("GET", "/api/terminals"),
        ("POST", "/api/terminals"),
        ("GET", f"/api/terminals/{shell['name']}"),
        ("DELETE", f"/api/terminals/{shell['name']}"),
        ("GET", f"/api/terminals/{other['name']}"),
        ("DELETE", f"/api/terminals/{other['name']}"),
        ("GET", "/api/kernels"),
        ("POST", "/api/kernels"),
        ("GET", "/api/kernelspecs"),
        ("GET", "/api/sessions"),
        ("GET", "/api/contents"),
        ("PUT", "/api/contents/x.txt"),
        ("POST", "/api/events"),
        ("GET", "/api/status"),
        ("GET", "/api/me"),  # @web.authenticated only: the identity provider refuses
    ]
    for method, path in routes:
        for user in (BOB, CAROL):
            assert http_status(hub, method, path, tokens[user]) == 403, (user, method, path)
    sockets = [
        f"/terminals/websocket/{shell['name']}",
        f"/terminals/websocket/{other['name']}",
        "/api/events/subscribe",
        "/api/kernels/00000000-0000-0000-0000-000000000000/channels",
    ]
    for path in sockets:
        for user in (BOB, CAROL):
            assert handshake(hub, path, tokens[user]) == 403, (user, path)
        assert handshake(hub, path, cookie=bob.cookie(f"/user/{ALICE}{path}")) == 403, path
    # bob's browser (the OAuth cookie of alice's server) too, on /api/me as well: a
    # handler that only uses @web.authenticated, never asking the authorizer (the hub
    # venv has no JupyterLab for /lab)
    for path in ("/api/me", "/api/contents", "/api/terminals", "/api/agents/sessions"):
        assert bob.status(f"/user/{ALICE}{path}") == 403, path
    assert http_status(hub, "GET", "/api/me", alice_token) == 200  # the owner: everything
    # carol: not even the watch page
    assert http_status(hub, "GET", f"/agents/view/{grant['id']}", tokens[CAROL]) == 403
    assert handshake(hub, f"/agents/view/{grant['id']}/socket", tokens[CAROL]) == 403

    # bob without a grant: 403 on the viewer routes (an unknown id, carol's grant, his
    # revoked one; the revoke closes his socket at once)
    carols = make_grant(hub, alice_token, shell["id"], CAROL, 600)[1]
    assert hub.user_api(ALICE, alice_token, "DELETE", f"/api/agents/shares/{grant['id']}")[0] == 204
    took = time_to_close(viewer, 5)
    assert took is not None
    print(f"alice's revoke closed bob's socket in {1000 * took:.0f} ms")
    for share_id in ("0123456789abcdef01234567", carols["id"], grant["id"]):
        assert http_status(hub, "GET", f"/agents/view/{share_id}", tokens[BOB]) == 403, share_id
        assert bob.status(view_path(share_id)) == 403, share_id
        path = f"/agents/view/{share_id}/socket"
        assert handshake(hub, path, tokens[BOB]) == 403, share_id
        assert handshake(hub, path, cookie=bob.cookie(view_path(share_id) + "/socket")) == 403

    # 4. a hub-side revoke (alice deletes her server's hub shares) ends bob's watch within
    # the re-validation interval, for his browser's socket and his token's
    status_, again = make_grant(hub, alice_token, shell["id"], BOB, 600)
    assert status_ == 201, again
    by_cookie = watch(hub, bob, again["id"])
    by_token = TermClient(
        f"ws://127.0.0.1:{hub.port}{view_path(again['id'])}/socket", token=tokens[BOB]
    )
    by_token.wait_for(lambda c: len(c.messages) >= 2)
    assert hub.api("DELETE", f"/hub/api/shares/{ALICE}/", token=alice_token)[0] == 204
    revoked = time.monotonic()
    assert closed(by_cookie, 5 * REVALIDATE + 5)
    cookie_took = time.monotonic() - revoked
    assert closed(by_token, 5)
    token_took = time.monotonic() - revoked
    print(
        f"hub-side revoke ended bob's watch after {1000 * cookie_took:.0f} ms (cookie) and "
        f"{1000 * token_took:.0f} ms (token); re-validation interval {REVALIDATE} s"
    )
    assert cookie_took < REVALIDATE + 5 and token_took < REVALIDATE + 5
    # and he cannot come back, though the hub's answer for his tokens is cached for minutes
    path = f"/agents/view/{again['id']}"
    assert handshake(hub, path + "/socket", tokens[BOB]) == 403
    assert handshake(hub, path + "/socket", cookie=bob.cookie(view_path(again["id"]))) == 403
    assert http_status(hub, "GET", path, tokens[BOB]) == 403
    assert bob.status(view_path(again["id"])) == 403
    # alice's own session went on all along
    alice.stdin("echo STILL-$((6*7))\r")
    alice.wait_for("STILL-42")
    alice.close()

    log = hub.log_path.read_text()
    for line in (
        f"share {grant['id']} created by {ALICE}: session {shell['id']}, viewer {BOB}",
        f"viewer {BOB} connected to share {grant['id']}",
        f"share {grant['id']} revoked by {ALICE}",
        f"viewer {BOB} of share {again['id']}: no longer let in by the hub",
    ):
        assert line in log, line
    code = urllib.parse.parse_qs(accept.query)["code"][0]
    ours = re.compile(rf"\b(share [0-9a-f]{{24}}|viewer {BOB})\b")
    audit = "\n".join(line for line in log.splitlines() if ours.search(line))
    assert audit and all(secret not in audit for secret in (code, *tokens.values()))
