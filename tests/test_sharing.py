"""Read-only sharing on a real server: alice (the owner, ``$JUPYTERHUB_USER``) shares a
session with bob; carol is a bystander. Users come from tokens (tests/fakes/users.py)
through the same narrowing identity mixin and the authorizer a hub server is configured
with (jupyter_agents.sharing.auth), so everything but the hub itself is the product's code."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
import websocket

from jupyter_agents.agents.permissions import PendingRequest, RequestFolder
from jupyter_agents.pytest_plugin import (
    TOKEN,
    ServerProcess,
    TermClient,
    poll,
    transcript_bytes,
)

FAKES = Path(__file__).parent / "fakes"
BOB, CAROL = "bob-token-6f1c", "carol-token-93a2"
SHARING_ARGS = [
    "--ServerApp.authorizer_class=jupyter_agents.auth.ViewerAuthorizer",
    "--ServerApp.identity_provider_class=users.SharingTestIdentity",
    "--AgentsApp.share_revalidate_interval=1",
]
#: ``printf`` arguments printing the probes agent TUIs send: cursor position, device
#: attributes, background colour, DECRQSS (SGR)
PROBES = "'\\033[6n\\033[c\\033]11;?\\007\\033P$qm\\033\\\\'"
#: a viewer terminal's answers to :data:`PROBES`, with values no terminal here gives
ANSWERS = "\x1b[77;66R\x1b[?6;99c\x1b]11;rgb:1234/5678/9abc\x07\x1bP1$r7;77m\x1b\\"
#: what would show in the owner's pty (its output or its input) had any intrusion passed
LEAKS = (b"77;66R", b"6;99c", b"rgb:1234", b"7;77m", b"touch")
#: a frame over the viewer socket's limit (4 KiB): the server closes the socket
OVERSIZED = "x" * 10_000
#: a shell line printing ~100 MB (75 MB of zeros in base64), then FLOOD-4
FLOOD = "head -c 75000000 /dev/zero | base64 -w 100; echo FLOOD-$((2*2))\r"
#: how much a server's RSS may grow during :data:`FLOOD` while a viewer reads nothing
#: (well under the flood: a server that buffered it for the viewer would pass it)
FLOOD_RSS_BOUND = 64 << 20


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    path.write_text(json.dumps({TOKEN: "alice", BOB: "bob", CAROL: "carol"}))
    return path


def env(users: Path) -> dict[str, str]:
    return {
        "JUPYTERHUB_USER": "alice",
        "JUPYTER_AGENTS_TEST_USERS": str(users),
        "PYTHONPATH": str(FAKES),
    }


def call(server: ServerProcess, method: str, path: str, token: str, body: Any = None) -> int:
    """The status of one request as ``token``'s user."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.base + path, data=data, method=method)
    req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        e.close()
        return int(e.code)


def share(server: ServerProcess, sid: str, viewer: str | None = "bob", expires: int = 600) -> dict:
    status, model = server.request(
        "POST", "/api/agents/shares", {"session": sid, "viewer": viewer, "expires_in": expires}
    )
    assert status == 201, model
    return dict(model)


def watch(server: ServerProcess, share_id: str, token: str = BOB) -> TermClient:
    return TermClient(f"ws://127.0.0.1:{server.port}/agents/view/{share_id}/socket", token)


def refused(server: ServerProcess, path: str, token: str) -> int:
    """The status of a websocket handshake (101 when it was accepted)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(
            "GET",
            path,
            headers={
                "Authorization": f"token {token}",
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
        return conn.getresponse().status
    finally:
        conn.close()


def closed(client: TermClient, timeout: float) -> bool:
    """Whether the server closes ``client``'s socket within ``timeout`` seconds (output
    before that is read and dropped). The client is closed either way."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            client.ws.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if client.ws.recv() in ("", b""):  # the close frame
                    return True
            except websocket.WebSocketTimeoutException:
                return False
            except (websocket.WebSocketConnectionClosedException, OSError):
                return True
        return False
    finally:
        client.close()


def time_to_close(client: TermClient, since: float, timeout: float) -> float | None:
    """Seconds from ``since`` (a ``time.monotonic()``, e.g. before a revoke was sent)
    until the server closes ``client``; None when it is still open ``timeout`` seconds
    from now."""
    return time.monotonic() - since if closed(client, timeout) else None


def intrude(client: TermClient, created: Path) -> int:
    """Send every kind of frame a viewer might try on the owner's terminal: keys that
    would create ``created``, a resize, malformed JSON, the answers to :data:`PROBES`,
    a binary frame. Returns how many were sent."""
    frames = [
        json.dumps(["stdin", f"touch {created}\r"]),
        json.dumps(["set_size", 5, 10, 50, 100]),
        "not json",
        json.dumps(["stdin", ANSWERS]),
    ]
    for frame in frames:
        client.ws.send(frame)
    client.ws.send_binary(b"\x00\x01binary")
    return len(frames) + 1


def flood(
    owner: TermClient, server_pid: int, probe: Callable[[], None] | None = None
) -> tuple[int, int]:
    """``owner``'s shell prints ~100 MB (:data:`FLOOD`) and ``owner`` reads all of it:
    (RSS of process ``server_pid`` before, its peak meanwhile, sampled every 200
    frames). ``probe``, if given, is called about once a second meanwhile."""
    proc = psutil.Process(server_pid)
    before = proc.memory_info().rss
    peak, tail, frames, probed = before, "", 0, time.monotonic()
    owner.stdin(FLOOD)
    owner.ws.settimeout(60)
    while "FLOOD-4" not in tail:
        message = json.loads(owner.ws.recv())
        tail = (tail + message[1])[-200:] if message[0] == "stdout" else tail
        frames += 1
        if frames % 200 == 0:
            peak = max(peak, proc.memory_info().rss)
        if probe is not None and time.monotonic() - probed > 1:
            probe()
            probed = time.monotonic()
    return before, max(peak, proc.memory_info().rss)


def new_shell(server: ServerProcess) -> tuple[str, str]:
    status, model = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, model
    return model["name"], model["id"]


def test_a_server_without_our_authorizer_refuses_to_share(agents_server, users):
    # 6. the users are known (alice owns it), but the default authorizer is active
    server = agents_server(
        env=env(users), args=["--ServerApp.identity_provider_class=users.TokenUsers"]
    )
    _, sid = new_shell(server)
    status, body = server.request(
        "POST", "/api/agents/shares", {"session": sid, "viewer": "bob", "expires_in": 60}
    )
    assert status == 409 and "ViewerAuthorizer" in body["message"]
    assert call(server, "GET", "/agents/view/abc", TOKEN) == 403
    assert refused(server, "/agents/view/abc/socket", TOKEN) == 403


def test_bob_watches_alice_read_only(agents_server, users):
    server = agents_server(env=env(users), args=SHARING_ARGS)
    name, sid = new_shell(server)
    _, model = server.request("GET", f"/api/agents/sessions/{sid}")
    alice = server.ws(name)
    alice.stdin("for i in $(seq 1 120); do echo HIST-$i; done\r")
    alice.wait_for("HIST-120")
    grant = share(server, sid)
    assert grant["viewer"] == "bob" and grant["url"].endswith(f"/agents/view/{grant['id']}")

    # the page and the screen (no history)
    assert call(server, "GET", f"/agents/view/{grant['id']}", BOB) == 200
    assert call(server, "GET", "/agents/view/static/xterm.js", BOB) == 200
    bob = watch(server, grant["id"])
    bob.wait_for(lambda c: len(c.messages) >= 2)
    assert bob.messages[0] == ["setup", {}]
    assert "HIST-120" in bob.text and "HIST-5\r" not in bob.text  # scrolled away: not sent

    # 1. output reaches bob
    alice.stdin("echo MARK-$((6*7))\r")
    alice.wait_for("MARK-42")
    seen = time.monotonic()
    bob.wait_for("MARK-42", timeout=5)
    print(f"marker reached the viewer {1000 * (time.monotonic() - seen):.0f} ms after the owner")

    # 2. nothing bob sends reaches the pty
    pwned = server.workdir / "pwned"
    intrude(bob, pwned)
    alice.stdin(f"printf {PROBES}; echo PROBED-$((1+1))\r")
    alice.wait_for("PROBED-2")
    bob.wait_for("PROBED-2")
    alice.stdin("stty size; echo SIZE-DONE\r")
    alice.wait_for("SIZE-DONE")
    assert not pwned.exists()
    _, after = server.request("GET", f"/api/agents/sessions/{sid}")
    assert (after["rows"], after["cols"]) == (model["rows"], model["cols"])
    assert "\n5 10\r" not in alice.text
    log = transcript_bytes(server.state_dir, sid)
    assert not [leak for leak in LEAKS if leak in log]
    bob.ws.send(OVERSIZED)  # the server closes the socket
    assert closed(bob, 5)

    # 3. every other route refuses bob; carol gets nothing; bob's grant is his alone
    other = server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    # a permission request of the shared session, as a waiting hook leaves it: answering
    # is typing, so bob may neither see nor answer it
    asked = PendingRequest.from_payload(
        {"tool_name": "Bash", "tool_input": {"command": "rm -rf build"}},
        sid,
        60,
        "shown",
        time.time(),
    )
    RequestFolder(server.state_dir).add(asked)
    routes = [
        ("GET", "/api/agents/sessions"),
        ("GET", f"/api/agents/sessions/{sid}"),
        ("GET", f"/api/agents/sessions/{other['id']}/log"),
        ("DELETE", f"/api/agents/sessions/{sid}"),
        ("GET", "/api/agents/shares"),
        ("POST", "/api/agents/shares"),
        ("GET", "/api/agents/search?q=x"),
        ("GET", "/api/terminals"),
        ("POST", "/api/terminals"),
        ("GET", f"/api/terminals/{name}"),
        ("DELETE", f"/api/terminals/{name}"),
        ("GET", "/api/kernels"),
        ("POST", "/api/kernels"),
        ("GET", "/api/contents"),
        ("PUT", "/api/contents/x.txt"),
        ("GET", "/api/sessions"),
        ("GET", "/api/status"),
        ("GET", "/api/agents/requests"),
        ("GET", f"/api/agents/requests/{asked.id}"),
        ("POST", f"/api/agents/requests/{asked.id}"),
        ("GET", "/agents/requests"),
    ]
    for method, path in routes:
        body = {} if method in ("POST", "PUT") else None
        # (an unknown token on a page is sent to log in, as test_security checks)
        for token in (BOB, CAROL) if path.startswith("/agents/") else (BOB, CAROL, "nobody"):
            got = call(server, method, path, token, body)
            assert got == 403, (method, path, token, got)
    for path in (f"/terminals/websocket/{name}", "/api/events/subscribe"):
        assert refused(server, path, BOB) == 403, path
        assert refused(server, path, CAROL) == 403, path
    assert call(server, "GET", f"/agents/view/{grant['id']}", CAROL) == 403
    assert refused(server, f"/agents/view/{grant['id']}/socket", CAROL) == 403
    assert call(server, "GET", "/api/agents/shares", TOKEN) == 200  # alice still can
    pending = server.request("GET", "/api/agents/requests")[1]
    assert [r["id"] for r in pending] == [asked.id]  # still pending, unanswered
    assert not (server.state_dir / "requests" / f"{asked.id}.answer").exists()
    RequestFolder(server.state_dir).remove(asked.id)

    # 4. revoke closes bob's socket at once; then bob has no grant
    bob = watch(server, grant["id"])
    bob.wait_for(lambda c: len(c.messages) >= 2)
    revoked = time.monotonic()
    assert server.request("DELETE", f"/api/agents/shares/{grant['id']}")[0] == 204
    took = time_to_close(bob, revoked, 5)
    assert took is not None
    print(f"revoke closed the viewer in {1000 * took:.0f} ms")
    assert call(server, "GET", f"/agents/view/{grant['id']}", BOB) == 403
    assert refused(server, f"/agents/view/{grant['id']}/socket", BOB) == 403

    # expiry, and a "hub-side" revoke (bob's token no longer valid), re-checked each 1 s
    short = share(server, sid, expires=3)
    bob = watch(server, short["id"])
    bob.wait_for(lambda c: len(c.messages) >= 2)
    assert closed(bob, 8)
    anyone = share(server, sid, viewer=None)
    bob = watch(server, anyone["id"])
    bob.wait_for(lambda c: len(c.messages) >= 2)
    users.write_text(json.dumps({TOKEN: "alice", CAROL: "carol"}))
    assert closed(bob, 5)

    # 7. the audit lines: who and when, never tokens or content
    audit = server.log_path.read_text()
    for line in (
        f"share {grant['id']} created by alice: session {sid}, viewer bob",
        f"viewer bob connected to share {grant['id']}",
        f"share {grant['id']} revoked by alice",
        f"share {short['id']} expired",
        f"viewer bob of share {anyone['id']}: no longer let in",
    ):
        assert line in audit, line
    left = rf"viewer bob disconnected from share {grant['id']}: (\d+) bytes sent, (\d+) input"
    dropped = re.findall(left, audit)
    assert dropped and int(dropped[0][0]) > 0 and int(dropped[0][1]) >= 5
    assert BOB not in audit and CAROL not in audit and "MARK-42" not in audit


def test_grants_survive_a_restart_and_a_slow_viewer_costs_the_owner_nothing(agents_server, users):
    server = agents_server(env=env(users), args=SHARING_ARGS)
    name, sid = new_shell(server)
    lasting, brief = share(server, sid), share(server, sid, expires=4)
    server.stop()
    time.sleep(4)
    server = agents_server(env=env(users), args=SHARING_ARGS)
    status, listed = server.request("GET", "/api/agents/shares")
    assert status == 200 and [s["id"] for s in listed] == [lasting["id"]]
    assert refused(server, f"/agents/view/{brief['id']}/socket", BOB) == 403

    # 5. bob stops reading while alice's session prints 100 MB
    bob = watch(server, lasting["id"])
    bob.wait_for(lambda c: len(c.messages) >= 2)
    alice = server.ws(name)
    rss_before, peak = flood(alice, server.proc.pid)  # alice reads all 100 MB; bob nothing
    print(f"server RSS {rss_before >> 20} MB -> peak {peak >> 20} MB while bob did not read")
    assert peak - rss_before < FLOOD_RSS_BOUND
    assert closed(bob, 10)  # cut off, not buffered
    alice.stdin("echo STILL-$((3*3))\r")
    alice.wait_for("STILL-9")


def watchers(server: ServerProcess) -> dict[str, list[str]]:
    """``{grant id: watchers}`` of the live grants, as the owner's panel lists them."""
    status, listed = server.request("GET", "/api/agents/shares")
    assert status == 200, listed
    return {s["id"]: s["watchers"] for s in listed}


def frames_until_closed(client: TermClient, timeout: float) -> list[Any] | None:
    """The frames the server sent ``client`` before closing its socket within
    ``timeout`` seconds; None when it was still open then. The client is closed."""
    frames: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            client.ws.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                frame = client.ws.recv()
            except websocket.WebSocketTimeoutException:
                return None
            except (websocket.WebSocketConnectionClosedException, OSError):
                return frames
            if frame in ("", b""):
                return frames
            frames.append(json.loads(frame))
        return None
    finally:
        client.close()


def held_watch(server: ServerProcess, gate: Path, share_id: str, meanwhile: Callable[[], Any]):
    """bob's socket on ``share_id``, with ``meanwhile()`` run after the server admitted
    him and before his socket was registered (the gate of tests/fakes/users.py)."""
    hold, admitted = gate / "hold", gate / "admitted"
    admitted.unlink(missing_ok=True)
    hold.touch()
    opened: list[TermClient] = []
    failed: list[BaseException] = []

    def connect() -> None:
        try:
            opened.append(watch(server, share_id))
        except BaseException as e:  # seen by the test below
            failed.append(e)

    connecting = threading.Thread(target=connect)
    connecting.start()
    try:
        deadline = time.monotonic() + 15
        while not admitted.exists():
            assert time.monotonic() < deadline and not failed, failed or "never admitted"
            time.sleep(0.01)
        assert admitted.read_text() == share_id
        meanwhile()
    finally:
        hold.unlink()
        connecting.join(15)
    assert opened and not failed, failed
    return opened[0]


def test_a_revoke_or_expiry_while_a_viewer_connects_closes_it(agents_server, users, tmp_path):
    """A viewer admitted just before its grant is revoked or expires, and registered
    just after (the gate holds it in between), is closed before any output reaches it:
    the grant is read again from the store once the socket is registered. The
    re-validation interval is 60 s here, so nothing else could close it in time. The
    owner's list shows every live viewer until it is gone."""
    gate = tmp_path / "gate"
    gate.mkdir()
    server = agents_server(
        env={**env(users), "JUPYTER_AGENTS_TEST_GATE": str(gate)},
        args=[*SHARING_ARGS, "--AgentsApp.share_revalidate_interval=60"],
    )
    name, sid = new_shell(server)
    steady = share(server, sid)
    first, second = watch(server, steady["id"]), watch(server, steady["id"])
    for client in (first, second):
        client.wait_for(lambda c: len(c.messages) >= 2)
    assert watchers(server) == {steady["id"]: ["bob", "bob"]}

    # a revoke between bob's admission and the registration of his socket
    doomed = share(server, sid)
    revoke = ("DELETE", f"/api/agents/shares/{doomed['id']}")
    late = held_watch(server, gate, doomed["id"], lambda: server.request(*revoke))
    frames = frames_until_closed(late, 5)
    assert frames == [], frames  # closed, and not one frame of alice's terminal sent
    assert watchers(server) == {steady["id"]: ["bob", "bob"]}

    # an expiry in between (the expiry this server scheduled has fired meanwhile)
    brief = share(server, sid, expires=2)
    wait = lambda: time.sleep(max(0.0, expires_at(brief) - time.time()) + 0.5)  # noqa: E731
    late = held_watch(server, gate, brief["id"], wait)
    frames = frames_until_closed(late, 5)
    assert frames == [], frames
    assert watchers(server) == {steady["id"]: ["bob", "bob"]}

    # the steady grant's viewers saw all of it and are listed until they are gone
    alice = server.ws(name)
    alice.stdin("echo STEADY-$((4*4))\r")
    for client in (first, second):
        client.wait_for("STEADY-16")
    first.close()
    poll(lambda: watchers(server) == {steady["id"]: ["bob"]}, 10, "one watcher left")
    second.close()
    poll(lambda: watchers(server) == {steady["id"]: []}, 10, "no watcher left")
    audit = server.log_path.read_text()
    for line in (
        f"viewer bob of share {doomed['id']}: the grant was revoked before the watch began",
        f"viewer bob of share {brief['id']}: the grant was expired before the watch began",
    ):
        assert line in audit, line


def test_a_revoke_through_another_server_on_the_state_dir_ends_the_watch(agents_server, users):
    """Two servers on one state dir (re-validation every 1 s): a revoke made through
    the second ends a watch on the first within an interval, and so does the expiry of
    a grant the second made (the first schedules it when the watch begins)."""
    first = agents_server(env=env(users), args=SHARING_ARGS)
    second = agents_server(env=env(users), args=SHARING_ARGS)
    _, sid = new_shell(first)
    grant, other = share(second, sid), share(second, sid)
    viewer, bystander = watch(first, grant["id"]), watch(first, other["id"])
    for client in (viewer, bystander):
        client.wait_for(lambda c: len(c.messages) >= 2)
    assert watchers(first) == {grant["id"]: ["bob"], other["id"]: ["bob"]}
    revoked = time.monotonic()
    assert second.request("DELETE", f"/api/agents/shares/{grant['id']}")[0] == 204
    took = time_to_close(viewer, revoked, 5)
    assert took is not None
    print(f"a revoke through the other server closed the viewer {1000 * took:.0f} ms later")
    assert watchers(first) == {other["id"]: ["bob"]}
    assert f"viewer bob of share {grant['id']}: the grant was revoked" in first.log_path.read_text()

    brief = share(second, sid, expires=3)
    viewer = watch(first, brief["id"])
    viewer.wait_for(lambda c: len(c.messages) >= 2)
    assert closed(viewer, 8)
    late = time.time() - expires_at(brief)
    print(f"the expiry of the other server's grant closed the viewer {1000 * late:.0f} ms after")
    assert late < 1.0  # on time, not at the next re-validation
    assert bystander.ws.connected  # the other grant's viewer watches on
    bystander.close()


def expires_at(grant: dict[str, Any]) -> float:
    """The grant's expiry, as a ``time.time()``."""
    return datetime.fromisoformat(grant["expires"].replace("Z", "+00:00")).timestamp()
