"""Read-only sharing through a real JupyterHub (issue 17): system users ja-alice (the
owner), ja-bob (the viewer) and ja-carol (a bystander) behind the hub and
configurable-http-proxy, with the example config (examples/jupyterhub), whose
single-user servers run jupyter_agents' ViewerAuthorizer and ViewerIdentityProvider.

bob takes the accept link that comes with alice's grant (a hub share code her server
made with its own token) after logging in to the hub, lands on the watch page through
the hub's OAuth, and watches over a cookie-authenticated websocket as a browser would.
One hub serves the module; its tests, in order: what bob sees and what he cannot do or
send (acceptances 1 to 3, the hub-side revoke of 4); expiry and restarts of alice's server
(the rest of 4); a viewer that stops reading while alice prints 100 MB (5); bob's hub
share ending with the grants that covered him; alice's server started without our
classes (6; the config below strips them when the hub is asked to start it with
``{"plain": true}``). The same acceptance without a hub is
tests/test_sharing.py; the hub, its helpers and the users' cleanup are
tests/test_hub.py's."""

from __future__ import annotations

import http.client
import http.cookiejar
import json
import pwd
import re
import statistics
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import test_hub
import websocket
from test_hub import Hub, running_hub, singleuser_pid, state_dir, typed
from test_sharing import (
    FLOOD_RSS_BOUND,
    LEAKS,
    OVERSIZED,
    PROBES,
    closed,
    flood,
    intrude,
    time_to_close,
)

from jupyter_agents.pytest_plugin import TermClient, transcript_bytes

ALICE, BOB, CAROL = "ja-alice", "ja-bob", "ja-carol"
USERS = (ALICE, BOB, CAROL)
#: seconds between the server's re-validations of each viewer with the hub
REVALIDATE = 2
#: seconds a grant lasts that is to expire after a restart of alice's server, made
#: some 4 s before it (the restart took ~6 s here: room for a machine twice as slow)
LATER = 20
SHELL = {"kind": "shell"}
MARK = re.compile(r"MARK-(\d+\.\d+)-END")
#: the hub's config for this module: a re-validation every REVALIDATE s, and alice's
#: server without our authorizer and identity provider when started ``{"plain": true}``
CONFIG = f"""
c.Spawner.args = [*c.Spawner.args, '--AgentsApp.share_revalidate_interval={REVALIDATE}']
def apply_user_options(spawner, options):
    full = list(spawner.config.Spawner.args)
    plain = bool(options.get("plain"))
    spawner.args = [a for a in full if not (plain and ".auth.Viewer" in a)]
c.Spawner.apply_user_options = apply_user_options
"""

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

    def consent(self, reply: tuple[int, str, str]) -> tuple[int, str, str]:
        """Where ``reply`` is the hub's OAuth consent page (a first visit to a server),
        authorize, as a user clicking its button; the reply after that."""
        code, url, page = reply
        if urllib.parse.urlsplit(url).path != "/hub/api/oauth2/authorize":
            return reply
        assert code == 200 and "Authorize" in page, page[-2000:]
        return self.submit(url, page)

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


def socket_url(hub: Hub, share_id: str) -> str:
    return f"ws://127.0.0.1:{hub.port}{view_path(share_id)}/socket"


def accept(hub: Hub, grant: dict[str, Any]) -> Browser:
    """bob's browser after he logged in to the hub and took ``grant``'s accept link:
    the hub's accept page, its OAuth (consent on a first visit), the watch page."""
    bob = Browser(hub, BOB)
    code, url, page = bob.open(hub.url + grant["accept_url"])
    assert code == 200 and "Accept invitation" in page, page[-2000:]
    code, url, page = bob.consent(bob.submit(url, page))
    assert (code, urllib.parse.urlsplit(url).path) == (200, view_path(grant["id"])), page[-2000:]
    assert "Read-only view of session" in page and 'data-socket="' in page
    return bob


def new_session(hub: Hub, token: str) -> dict[str, Any]:
    status, model = hub.user_api(ALICE, token, "POST", "/api/agents/sessions", SHELL)
    assert status == 201, model
    return dict(model)


def hub_sharers(hub: Hub, token: str) -> list[str]:
    """The users alice's server is shared with on the hub (its hub shares)."""
    status_, shared = hub.api("GET", f"/hub/api/shares/{ALICE}/", token=token)
    assert status_ == 200, shared
    return sorted(s["user"]["name"] for s in shared["items"] if s["user"])


def hub_codes(hub: Hub, token: str) -> set[str]:
    """The ids of the share codes of alice's server the hub holds."""
    status_, codes = hub.api("GET", f"/hub/api/share-codes/{ALICE}/", token=token)
    assert status_ == 200, codes
    return {c["id"] for c in codes["items"]}


def hub_share_ended(hub: Hub, token: str, user: str, timeout: float = 10) -> float:
    """Wait until ``user`` no longer has a hub share of alice's server: when (a
    ``time.monotonic()``); fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while user in hub_sharers(hub, token):
        assert time.monotonic() < deadline, f"{user} still has a hub share"
        time.sleep(0.1)
    return time.monotonic()


def restart(hub: Hub, plain: bool = False) -> None:
    """Stop alice's server through the hub API and start it again (``plain``: without
    our authorizer and identity provider)."""
    hub.stop_server(ALICE)
    hub.start_server(ALICE, {"plain": plain})


def expires_at(grant: dict[str, Any]) -> float:
    """The grant's expiry, as a ``time.time()``."""
    return datetime.fromisoformat(grant["expires"].replace("Z", "+00:00")).timestamp()


def stty_size(alice: TermClient) -> str:
    """``rows cols`` of alice's pty, as her shell's ``stty size`` says."""
    out = typed(alice, "stty size; echo SIZE-$((6*7))", "SIZE-42")
    found = re.findall(r"\b(\d+ \d+)\r\nSIZE-42", out)
    assert len(found) == 1, out
    return str(found[0])


def pester(hub: Hub, bob: Browser, share_id: str, pwned: Path) -> int:
    """bob's browser opens another socket on the share and sends everything but output
    into it (:func:`test_sharing.intrude`), then an oversized frame, which the server
    answers by closing the socket: so every frame was handled before this returns.
    Returns how many frames were dropped."""
    client = watch(hub, bob, share_id)
    sent = intrude(client, pwned)
    client.ws.send(OVERSIZED)
    assert closed(client, 5)
    return sent


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    """The module's hub, alice's server running with our classes."""
    with running_hub(USERS, CONFIG) as running:
        running.start_server(ALICE, {"plain": False})
        yield running


def test_bob_watches_alice_through_the_hub(hub: Hub) -> None:
    tokens = {user: hub.token(user) for user in USERS}
    alice_token = tokens[ALICE]

    # alice: a shell to share, another she keeps to herself
    shell, other = new_session(hub, alice_token), new_session(hub, alice_token)
    alice = hub.ws(ALICE, alice_token, shell["name"])
    alice.wait_for(lambda c: len(c.messages) >= 2)

    # the grant, with its accept link: a share code made by alice's server (its token)
    status_, grant = make_grant(hub, alice_token, shell["id"], BOB, 900)
    assert status_ == 201, grant  # 409 unless both of our classes are active
    assert "hub_error" not in grant, grant["hub_error"]
    link = urllib.parse.urlsplit(grant["accept_url"])
    assert link.path == "/hub/accept-share"
    assert urllib.parse.parse_qs(link.query)["next"] == [view_path(grant["id"])]
    log = hub.log_path.read_text()
    assert "jupyter_agents: read-only sharing available" in log

    # before accepting it, the hub itself refuses bob (and always carol); a token of his
    # own for this: the server caches the hub's answer for a token (HubAuth, 300 s)
    for token in (hub.token(BOB), tokens[CAROL]):
        assert http_status(hub, "GET", f"/agents/view/{grant['id']}", token) == 403
        assert handshake(hub, f"/agents/view/{grant['id']}/socket", token) == 403

    # bob logs in to the hub, opens the link, accepts, authorizes: the watch page
    bob = accept(hub, grant)
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
    alice.drain(0.2)

    # 2. nothing bob sends reaches alice's pty: keys that would create a file, a resize,
    # binary and malformed frames, his terminal's answers to probes, an oversized frame;
    # first at her shell's prompt, then while a program of hers prints the probes an
    # agent TUI sends and records its input until she types ALICE-END
    home = Path(pwd.getpwnam(ALICE).pw_dir)
    pwned, recorded = home / "pwned", home / "recorded"
    before = hub.user_api(ALICE, alice_token, "GET", f"/api/agents/sessions/{shell['id']}")[1]
    size = stty_size(alice)
    dropped = [pester(hub, bob, grant["id"], pwned)]
    recorder = f"echo REC-$((1+2)); printf {PROBES}; sed /ALICE-END/q > {recorded}"
    typed(alice, recorder + "; echo REC-$((2+2))", "REC-3")
    viewer.wait_for("REC-3")  # bob's terminal got the probes, and answers them:
    dropped.append(pester(hub, bob, grant["id"], pwned))
    typed(alice, "ALICE-TYPED ALICE-END", "REC-4")
    record = recorded.read_bytes()
    assert b"ALICE-TYPED" in record, record  # the recorder records what reaches the pty
    assert not [leak for leak in LEAKS if leak in record], record
    assert not pwned.exists()
    assert stty_size(alice) == size
    status_, now = hub.user_api(ALICE, alice_token, "GET", f"/api/agents/sessions/{shell['id']}")
    assert (now["rows"], now["cols"]) == (before["rows"], before["cols"])
    transcript = transcript_bytes(state_dir(ALICE), shell["id"])
    assert b"ALICE-TYPED" in transcript and not [leak for leak in LEAKS if leak in transcript]
    print(f"bob's {sum(dropped)} frames dropped; alice's pty stayed {size} (rows cols)")
    viewer.drain(0.2)

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
        ("GET", "/api/agents/sharing"),
        ("POST", "/api/agents/shares"),
        ("DELETE", f"/api/agents/shares/{grant['id']}"),
        ("GET", "/api/agents/kinds"),
        ("POST", "/api/agents/reconcile"),
        # alice's notifications: no device, presence or set-up of theirs (issue 57)
        ("GET", "/api/agents/push/key"),
        ("GET", "/api/agents/push/subscriptions"),
        ("POST", "/api/agents/push/subscriptions"),
        ("POST", "/api/agents/presence"),
        ("GET", "/api/agents/notify"),
        ("GET", "/api/agents/requests"),
        # an ACP session's prompt and cancel (issue 58: no watcher reaches its agent)
        ("POST", f"/api/agents/sessions/{shell['id']}/prompt"),
        ("POST", f"/api/agents/sessions/{other['id']}/cancel"),
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
    revoked = time.monotonic()
    assert hub.user_api(ALICE, alice_token, "DELETE", f"/api/agents/shares/{grant['id']}")[0] == 204
    took = time_to_close(viewer, revoked, 5)
    assert took is not None  # the acceptance is 1 s: the figure is printed, not asserted
    print(f"alice's revoke (DELETE sent) closed bob's socket {1000 * took:.0f} ms later")
    for share_id in ("0123456789abcdef01234567", carols["id"], grant["id"]):
        assert http_status(hub, "GET", f"/agents/view/{share_id}", tokens[BOB]) == 403, share_id
        assert bob.status(view_path(share_id)) == 403, share_id
        path = f"/agents/view/{share_id}/socket"
        assert handshake(hub, path, tokens[BOB]) == 403, share_id
        assert handshake(hub, path, cookie=bob.cookie(view_path(share_id) + "/socket")) == 403
    # and no other live grant covers him (carol's is hers): his hub share went with it
    ended = hub_share_ended(hub, alice_token, BOB)
    print(f"bob's hub share was revoked {1000 * (ended - revoked):.0f} ms after alice's revoke")

    # 4. a hub-side revoke (alice deletes her server's hub shares) ends bob's watch within
    # the re-validation interval, for his browser's socket and his token's
    status_, again = make_grant(hub, alice_token, shell["id"], BOB, 600)
    assert status_ == 201, again
    bob = accept(hub, again)  # a hub share again
    by_cookie = watch(hub, bob, again["id"])
    by_token = TermClient(socket_url(hub, again["id"]), token=tokens[BOB])
    by_token.wait_for(lambda c: len(c.messages) >= 2)
    revoked = time.monotonic()
    assert hub.api("DELETE", f"/hub/api/shares/{ALICE}/", token=alice_token)[0] == 204
    # waits bounded by the interval (with slack for a loaded machine); the figures print
    cookie_took = time_to_close(by_cookie, revoked, REVALIDATE + 5)
    token_took = time_to_close(by_token, revoked, REVALIDATE + 5)
    assert cookie_took is not None and token_took is not None
    print(
        f"hub-side revoke ended bob's watch after {1000 * cookie_took:.0f} ms (cookie) and "
        f"{1000 * token_took:.0f} ms (token); re-validation interval {REVALIDATE} s"
    )
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
    left = rf"viewer {BOB} disconnected from share {grant['id']}: \d+ bytes sent, (\d+) input"
    assert [int(n) for n in re.findall(left, log)][:2] == dropped  # bob's pestering sockets
    for line in (
        f"share {grant['id']} created by {ALICE}: session {shell['id']}, viewer {BOB}",
        f"viewer {BOB} connected to share {grant['id']}",
        f"share {grant['id']} revoked by {ALICE}",
        f"viewer {BOB} of share {again['id']}: no longer let in by the hub",
    ):
        assert line in log, line
    code = urllib.parse.parse_qs(link.query)["code"][0]
    ours = re.compile(rf"\b(share [0-9a-f]{{24}}|viewer {BOB})\b")
    audit = "\n".join(line for line in log.splitlines() if ours.search(line))
    assert audit and all(secret not in audit for secret in (code, *tokens.values()))


def test_expiry_and_a_restart_of_alices_server(hub: Hub) -> None:
    """4. A grant's expiry closes bob's socket; after alice's server is stopped and
    started again through the hub, her grants and their expiry still hold: bob watches
    again through the same grant, one that expired meanwhile stays refused, and one
    that expires after the restart closes his socket then."""
    alice_token, bob_token = hub.token(ALICE), hub.token(BOB)
    shell = new_session(hub, alice_token)
    grants: dict[str, Any] = {}

    def grant(name: str, expires_in: int) -> None:
        status_, grants[name] = make_grant(hub, alice_token, shell["id"], BOB, expires_in)
        assert status_ == 201, grants[name]

    grant("lasting", 600)
    grant("later", LATER)  # to expire after the restart below
    grant("brief", 3)
    bob = accept(hub, grants["lasting"])  # a hub share again (the test before revoked his)

    # expiry ends the watch (the expiry this server scheduled when the grant was made)
    viewer = watch(hub, bob, grants["brief"]["id"])
    assert closed(viewer, 15)
    late = time.time() - expires_at(grants["brief"])
    print(f"expiry closed bob's socket {1000 * late:.0f} ms after the grant's expiry")
    assert f"share {grants['brief']['id']} expired" in hub.log_path.read_text()
    assert http_status(hub, "GET", f"/agents/view/{grants['brief']['id']}", bob_token) == 403

    # alice's server stopped and started again through the hub; a grant expires while
    # it is down, another after it is back
    watching = watch(hub, bob, grants["lasting"]["id"])
    grant("soon", 2)
    stopped = time.monotonic()
    hub.stop_server(ALICE)
    assert closed(watching, 10)  # its server went away
    time.sleep(max(0.0, expires_at(grants["soon"]) - time.time()))
    hub.start_server(ALICE, {"plain": False})
    print(f"alice's server stopped and started again in {time.monotonic() - stopped:.1f} s")
    assert time.time() < expires_at(grants["later"]), "the restart outlasted the grant"

    # configured as the docs say, the server tells its clients that sharing works
    assert hub.user_api(ALICE, alice_token, "GET", "/api/agents/sharing") == (
        200,
        {"available": True, "reason": None},
    )
    status_, listed = hub.user_api(ALICE, alice_token, "GET", "/api/agents/shares")
    live = {share["id"] for share in listed}
    assert status_ == 200 and {grants["lasting"]["id"], grants["later"]["id"]} <= live
    assert not {grants["brief"]["id"], grants["soon"]["id"]} & live
    for name in ("brief", "soon"):
        path = f"/agents/view/{grants[name]['id']}"
        assert http_status(hub, "GET", path, bob_token) == 403, name
        assert handshake(hub, path + "/socket", bob_token) == 403, name
    # the same grant, and bob's own token: he watches again what alice does now
    again = TermClient(socket_url(hub, grants["lasting"]["id"]), token=bob_token)
    alice = hub.ws(ALICE, alice_token, shell["name"])
    typed(alice, "echo AFTER-$((5*5))", "AFTER-25")
    again.wait_for("AFTER-25")
    alice.close()
    again.close()
    # the restarted server keeps the expiry of a grant made before
    later = TermClient(socket_url(hub, grants["later"]["id"]), token=bob_token)
    later.wait_for(lambda c: len(c.messages) >= 2)
    assert closed(later, expires_at(grants["later"]) - time.time() + 10)
    late = time.time() - expires_at(grants["later"])
    print(f"after the restart, expiry closed bob's socket {1000 * late:.0f} ms after it")
    assert f"share {grants['later']['id']} expired" in hub.log_path.read_text()
    assert http_status(hub, "GET", f"/agents/view/{grants['later']['id']}", bob_token) == 403


def test_a_slow_viewer_costs_alice_nothing(hub: Hub) -> None:
    """5. bob stops reading while alice's session prints 100 MB: alice reads it all, her
    echo in another session stays responsive meanwhile, her server's memory stays
    bounded, and bob is cut off rather than buffered for."""
    alice_token, bob_token = hub.token(ALICE), hub.token(BOB)
    shell, quiet = new_session(hub, alice_token), new_session(hub, alice_token)
    status_, grant = make_grant(hub, alice_token, shell["id"], BOB, 600)
    assert status_ == 201, grant
    accept(hub, grant)
    viewer = TermClient(socket_url(hub, grant["id"]), token=bob_token)
    viewer.wait_for(lambda c: len(c.messages) >= 2)  # and from now on, bob reads nothing

    alice = hub.ws(ALICE, alice_token, shell["name"])
    alice.wait_for(lambda c: len(c.messages) >= 2)
    other = hub.ws(ALICE, alice_token, quiet["name"])
    echoes: list[float] = []

    def echo() -> None:
        n = len(echoes) + 1
        start = time.monotonic()
        typed(other, f"echo ECHO-{n}-$(({n}*7))", f"ECHO-{n}-{n * 7}")
        echoes.append(time.monotonic() - start)

    echo()  # before the flood
    rss_before, peak = flood(alice, singleuser_pid(ALICE), probe=echo)
    print(
        f"alice's server RSS {rss_before >> 20} MB -> peak {peak >> 20} MB while bob did not"
        f" read; her echo in another session: {round(1000 * echoes[0])} ms before, "
        f"{[round(1000 * s) for s in echoes[1:]]} ms during the 100 MB"
    )
    assert len(echoes) >= 2  # some during the flood
    assert peak - rss_before < FLOOD_RSS_BOUND
    # cut off, not buffered for: the close frame comes after what the proxy and the
    # sockets still hold, which a loaded machine takes a while to drain (it returns once
    # closed; a viewer buffered for is never closed)
    assert closed(viewer, 60)
    typed(alice, "echo STILL-$((3*3))", "STILL-9")
    alice.close()
    other.close()
    left = rf"viewer {BOB} disconnected from share {grant['id']}: (\d+) bytes sent"
    sent = [int(n) for n in re.findall(left, hub.log_path.read_text())]
    print(f"bytes the server queued for bob before cutting him off: {sent}")
    assert len(sent) == 1 and sent[0] < 32 << 20


def test_the_hub_share_ends_with_the_grant(hub: Hub) -> None:
    """The hub share bob gets by accepting a grant's share code ends when the grant is
    revoked or expires, unless another live grant still covers him; a revoked grant's
    share code is deleted; a grant that expires while alice's server is down ends his
    hub share when it is back (the store records who was admitted)."""
    alice_token = hub.token(ALICE)
    shell = new_session(hub, alice_token)
    # the grants the tests before left live cover bob: alice revokes them all first
    for share in hub.user_api(ALICE, alice_token, "GET", "/api/agents/shares")[1]:
        path = f"/api/agents/shares/{share['id']}"
        assert hub.user_api(ALICE, alice_token, "DELETE", path)[0] == 204
    hub_share_ended(hub, alice_token, BOB)

    def grant(expires_in: int = 600) -> dict[str, Any]:
        codes = hub_codes(hub, alice_token)
        status_, model = make_grant(hub, alice_token, shell["id"], BOB, expires_in)
        assert status_ == 201 and "accept_url" in model, model
        (model["code_id"],) = hub_codes(hub, alice_token) - codes
        return dict(model)

    def revoke(model: dict[str, Any]) -> None:
        path = f"/api/agents/shares/{model['id']}"
        assert hub.user_api(ALICE, alice_token, "DELETE", path)[0] == 204

    def code_deleted(model: dict[str, Any]) -> None:
        """Wait until the ended grant's share code is gone (deleted after the hub share
        ends: the hub may give its id to the next code)."""
        deadline = time.monotonic() + 10
        while model["code_id"] in hub_codes(hub, alice_token):
            assert time.monotonic() < deadline, "the ended grant's share code is still there"
            time.sleep(0.1)

    # two grants: revoking one leaves his hub share (the other covers him), the second
    # ends it; each revoke deletes that grant's share code
    one, two = grant(), grant()
    accept(hub, one)
    assert BOB in hub_sharers(hub, alice_token)
    revoke(one)
    code_deleted(one)
    assert two["code_id"] in hub_codes(hub, alice_token)
    assert BOB in hub_sharers(hub, alice_token)
    assert http_status(hub, "GET", f"/agents/view/{two['id']}", hub.token(BOB)) == 200
    revoked = time.monotonic()
    revoke(two)
    took = hub_share_ended(hub, alice_token, BOB) - revoked
    print(f"the last revoke ended bob's hub share {1000 * took:.0f} ms later")
    assert two["code_id"] not in hub_codes(hub, alice_token)
    # a new token of bob's (none of his answers cached by alice's server) is refused by
    # the hub: he no longer reaches alice's server at all
    assert http_status(hub, "GET", f"/agents/view/{two['id']}", hub.token(BOB)) == 403

    # expiry: with the server up, and with the server down at the time
    brief = grant(3)
    accept(hub, brief)
    assert BOB in hub_sharers(hub, alice_token)
    hub_share_ended(hub, alice_token, BOB, timeout=15)
    late = time.time() - expires_at(brief)
    print(f"the grant's expiry ended bob's hub share {1000 * late:.0f} ms after it")
    code_deleted(brief)
    soon = grant(4)
    accept(hub, soon)
    hub.stop_server(ALICE)
    time.sleep(max(0.0, expires_at(soon) - time.time()) + 0.5)
    assert BOB in hub_sharers(hub, alice_token)  # no server to end it
    hub.start_server(ALICE, {"plain": False})
    hub_share_ended(hub, alice_token, BOB)
    assert f"hub share of {BOB} revoked: share {soon['id']} ended" in hub.log_path.read_text()


def test_a_server_without_our_classes_refuses_to_share(hub: Hub) -> None:
    """6. alice's server started without our authorizer and identity provider (the hub
    config's ``plain`` option) answers 409 to a grant and 403 on the viewer page and
    socket, even for a grant it made before and a viewer the hub lets in. Last in the
    module: it leaves alice's server plain."""
    alice_token, bob_token = hub.token(ALICE), hub.token(BOB)
    shell = new_session(hub, alice_token)
    status_, grant = make_grant(hub, alice_token, shell["id"], BOB, 600)
    assert status_ == 201, grant
    bob = accept(hub, grant)
    path = f"/agents/view/{grant['id']}"
    assert http_status(hub, "GET", path, bob_token) == 200

    restart(hub, plain=True)
    status_, body = make_grant(hub, alice_token, shell["id"], BOB, 600)
    assert status_ == 409 and "ViewerAuthorizer" in body["message"], body
    # the hub still lets bob in (his share), and a plain server would hand him
    # everything: the refusals below are this server's own
    assert http_status(hub, "GET", "/api/status", bob_token) == 200
    for token in (bob_token, alice_token):
        assert http_status(hub, "GET", path, token) == 403
        assert handshake(hub, path + "/socket", token) == 403
    code, url, _page = bob.consent(bob.open(hub.url + view_path(grant["id"])))  # his browser
    assert (code, urllib.parse.urlsplit(url).path) == (403, view_path(grant["id"]))
