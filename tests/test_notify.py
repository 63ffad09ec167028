"""Reaching the owner with JupyterLab closed (issue 57), with the fake Claude
(tests/fakes/fake_agent.py, ``/perm``) on a real server: answer links (single use, bound
to one request and one choice, ended with it, a GET changes nothing, a token reads
nothing); the notifier (presence, quiet hours), ntfy and Web Push against a fake ntfy
server and a fake push service on 127.0.0.1 (a real HTTP server in a thread,
:class:`FakeService`), the push decrypted with the keys of a subscription the test made
(:class:`Device`: no browser)."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import stat
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import http_ece
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02
from test_permissions import asked, none_pending, start_claude

from jupyter_agents.core import clock
from jupyter_agents.pytest_plugin import TOKEN, ServerProcess, TermClient, poll


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


class FakeService:
    """A push service or ntfy server on 127.0.0.1: records every request (method, path,
    headers, body) and answers ``status``, or with ``mode`` ``hang`` accepts and never
    answers (until :meth:`close`), or ``refuse`` closes the connection unanswered."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.status = 201
        self.mode = "answer"
        self._release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                outer.received.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                if outer.mode == "hang":
                    outer._release.wait(60)
                    return
                if outer.mode == "refuse":
                    self.close_connection = True
                    return
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.received]

    def close(self) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def fake_service() -> Iterator[FakeService]:
    service = FakeService()
    yield service
    service.close()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Device:
    """What a browser's ``pushManager.subscribe`` makes: a P-256 key pair and an auth
    secret, the test holding the private key to decrypt what is pushed to it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        public = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        self.p256dh = b64(public)

    def subscription(self, name: str = "phone") -> dict[str, Any]:
        keys = {"p256dh": self.p256dh, "auth": b64(self.auth)}
        return {"endpoint": self.endpoint, "keys": keys, "expirationTime": None, "name": name}

    def decrypt(self, body: bytes) -> dict[str, Any]:
        raw = http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth,
                               version="aes128gcm")  # fmt: skip
        return dict(json.loads(raw))


def push_args(*more: str) -> list[str]:
    return [
        "--AgentsApp.push_subject=mailto:ops@example.org",
        "--AgentsApp.notify_channels=webpush",
        *more,
    ]


def ntfy_args(ntfy: FakeService, *more: str) -> list[str]:
    return [
        f"--AgentsApp.ntfy_url={ntfy.url}",
        "--AgentsApp.ntfy_topic=agents-{username}",
        "--AgentsApp.ntfy_token=tk_secret",
        *more,
    ]


def notify_state(server: ServerProcess) -> dict[str, Any]:
    status, body = server.request("GET", "/api/agents/notify")
    assert status == 200, body
    return dict(body)


def tokens_for(server: ServerProcess, request_id: str) -> dict[str, Any]:
    status, body = server.request("POST", f"/api/agents/requests/{request_id}/tokens")
    assert status == 201, body
    return dict(body)


def anonymous(
    server: ServerProcess, method: str, path: str, accept: str = "application/json"
) -> tuple[int, str]:
    """One call with no credential at all (no token, no cookie, no XSRF header)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        body = b"" if method == "POST" else None
        conn.request(method, path, body=body, headers={"Accept": accept})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_an_answer_link_answers_once_with_its_choice_and_a_get_changes_nothing(
    agents_server, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    made = tokens_for(server, request["id"])
    assert set(made["tokens"]) == {"allow", "deny", "suggestion-0"}
    assert made["request"]["id"] == request["id"]
    tokens = made["tokens"]
    assert len(set(tokens.values())) == 3 and all(len(t) == 43 for t in tokens.values())
    assert made["urls"]["allow"] == f"/agents/act/{tokens['allow']}"

    # the confirmation page: what will run, where; a button that posts; nothing answered
    for _ in range(3):
        status, page = anonymous(server, "GET", f"/agents/act/{tokens['allow']}", "text/html")
        assert status == 200, page
    assert "echo fake" in page and agent["name"] in page and "Bash" in page
    assert "<form method='post'>" in page and "<script" not in page
    assert asked(server, sid)["id"] == request["id"]
    assert fake_agents.records("decision") == []

    # the post answers: no credential but the token
    status, body = anonymous(server, "POST", f"/agents/act/{tokens['allow']}")
    assert status == 200, body
    said = json.loads(body)
    assert said == {
        "decision": "allow",
        "choice": "Allow",
        "request": request["id"],
        "session": agent["name"],
        "tool": "Bash",
        "message": f"Allowed: Bash in {agent['name']}",
    }
    client.wait_for("Allowed by PermissionRequest hook")
    client.wait_for("claude heard: /perm")
    (decision,) = fake_agents.records("decision")
    assert decision["decision"] == {"behavior": "allow"}
    none_pending(server, sid)

    # single use: the token again, and its siblings, are 409; the page says so too
    for key in ("allow", "deny", "suggestion-0"):
        status, body = anonymous(server, "POST", f"/agents/act/{tokens[key]}")
        assert status == 409, (key, body)
        assert json.loads(body)["message"] == "this permission request was allowed already"
    status, page = anonymous(server, "GET", f"/agents/act/{tokens['deny']}", "text/html")
    assert status == 409 and "allowed already" in page
    assert len(fake_agents.records("decision")) == 1
    client.close()


def test_deny_and_suggestion_links_reach_the_agent(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    tokens = tokens_for(server, asked(server, sid)["id"])["tokens"]
    status, page = anonymous(server, "POST", f"/agents/act/{tokens['deny']}", "text/html")
    assert status == 200 and "Denied: Bash in" in page, page
    client.wait_for("claude heard: denied: The user denied this from JupyterLab.")
    none_pending(server, sid)

    client.stdin("/perm\r")
    request = asked(server, sid)
    tokens = tokens_for(server, request["id"])["tokens"]
    status, page = anonymous(server, "GET", f"/agents/act/{tokens['suggestion-0']}", "text/html")
    assert status == 200 and "Allow Bash(echo:*) for this session?" in page, page
    status, body = anonymous(server, "POST", f"/agents/act/{tokens['suggestion-0']}")
    assert status == 200, body
    assert json.loads(body)["choice"] == "Allow Bash(echo:*) for this session"
    client.wait_for("Allowed by PermissionRequest hook")
    decisions = [r["decision"] for r in fake_agents.records("decision")]
    assert decisions[0]["behavior"] == "deny"
    assert decisions[-1]["updatedPermissions"][0]["rules"] == [
        {"toolName": "Bash", "ruleContent": "echo:*"}
    ]
    client.close()


def test_a_link_is_bound_to_its_request_and_ends_with_it(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    first = asked(server, sid)
    old = tokens_for(server, first["id"])["tokens"]
    # answered another way (the panel's REST call): its links are 409, saying how
    answer = server.request("POST", f"/api/agents/requests/{first['id']}", {"decision": "allow"})
    assert answer[0] == 200
    client.wait_for("claude heard: /perm")
    status, body = anonymous(server, "POST", f"/agents/act/{old['deny']}")
    assert (status, json.loads(body)["message"]) == (
        409,
        "this permission request was allowed already",
    )

    # another request now waits: the first one's links never answer it
    client.stdin("/perm\r")
    second = poll(
        lambda: [
            r
            for r in server.request("GET", f"/api/agents/requests?session={sid}")[1]
            if r["id"] != first["id"]
        ],
        what="a second request",
    )[0]
    for token in (old["allow"], old["suggestion-0"]):
        assert anonymous(server, "POST", f"/agents/act/{token}")[0] == 409
    unknown = ["x" * 43, old["allow"][:-1] + ("A" if old["allow"][-1] != "A" else "B"), "-"]
    for token in unknown:
        status, body = anonymous(server, "POST", f"/agents/act/{token}")
        assert status == 404, (token, body)
        assert "no such answer link" in json.loads(body)["message"]
    assert asked(server, sid)["id"] == second["id"]  # still pending
    assert len(fake_agents.records("decision")) == 1

    # it ends without an answer (the session ends): its links are 410
    tokens = tokens_for(server, second["id"])["tokens"]
    assert server.request("DELETE", f"/api/agents/sessions/{sid}")[0] == 204
    status, body = poll(
        lambda: (r := anonymous(server, "POST", f"/agents/act/{tokens['allow']}"))[0] != 200 and r,
        what="the link refused",
    )
    assert status == 410, body
    assert json.loads(body)["message"].startswith("this permission request has ended")
    assert anonymous(server, "GET", f"/agents/act/{tokens['deny']}", "text/html")[0] == 410
    # and no link for it can be made now
    assert server.request("POST", f"/api/agents/requests/{second['id']}/tokens")[0] == 404
    client.close()


def test_a_token_reads_nothing_and_opens_no_other_route(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    token = tokens_for(server, request["id"])["tokens"]["allow"]
    quoted = urllib.parse.quote(token)
    for path in (
        "/api/agents/sessions",
        f"/api/agents/sessions/{sid}/log",
        "/api/agents/requests",
        f"/api/agents/requests/{request['id']}",
        f"/api/terminals?token={quoted}",
    ):
        status, _ = server.request("GET", path, token=token)
        assert status == 403, path
    for method, path in (
        ("POST", f"/api/agents/requests/{request['id']}"),
        ("POST", f"/api/agents/requests/{request['id']}/tokens"),
    ):
        assert server.request(method, path, {"decision": "allow"}, token=token)[0] == 403
    for path in (f"/agents/act/{token}/x", f"/agents/act/{token}/../../api/agents/sessions"):
        assert anonymous(server, "POST", path)[0] in (403, 404), path  # no route: XSRF
    assert anonymous(server, "DELETE", f"/agents/act/{token}")[0] == 405
    # a body is ignored: the token's choice is the answer
    assert asked(server, sid)["id"] == request["id"]
    assert fake_agents.records("decision") == []
    assert server.request("POST", "/api/agents/requests/0123456789abcdef/tokens")[0] == 404
    path = f"/api/agents/requests/{request['id']}/tokens"
    assert server.request("POST", path, {"x": 1})[0] == 400
    client.close()


def test_ntfy_gets_the_minimum_and_its_http_action_answers(
    agents_server, fake_agents, fake_service, project
):
    ntfy = fake_service
    server = agents_server(env=fake_agents.env, args=ntfy_args(ntfy))
    state = notify_state(server)
    assert {c["name"]: c["ready"] for c in state["channels"]} == {"webpush": False, "ntfy": True}
    assert state["when"] == "no_visible_tab" and state["visible_tabs"] == 0
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    poll(lambda: ntfy.received, what="the ntfy message")
    (got,) = ntfy.received
    assert got["path"] == "/"
    assert got["headers"]["authorization"] == "Bearer tk_secret"
    message = json.loads(got["body"])
    user = __import__("getpass").getuser()
    assert set(message) == {"topic", "title", "message", "tags", "priority", "click", "actions"}
    assert message["topic"] == f"agents-{user}"
    assert message["title"] == f"{agent['name']} asks to run Bash"
    assert message["message"] == "claude · Bash: echo fake"
    act = f"{server.base}/agents/act/"
    assert message["click"].startswith(act)
    labels = [a["label"] for a in message["actions"]]
    assert labels == ["Allow", "Deny", "Allow Bash(echo:*) for this session"]
    for action in message["actions"]:
        assert action["action"] == "http" and action["method"] == "POST"
        assert action["url"].startswith(act) and len(action["url"]) == len(act) + 43
    assert message["click"] == message["actions"][0]["url"]
    # nothing else of the session: no output, no id, no credential of the server
    assert "FAKE CLAUDE" not in got["body"].decode() and sid not in got["body"].decode()

    # the phone's ntfy app posts the action: the request is answered
    allow = message["actions"][0]
    req = urllib.request.Request(allow["url"], data=b"", method="POST",
                                 headers=allow["headers"])  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as response:
        assert response.status == 200
        assert json.loads(response.read())["decision"] == "allow"
    client.wait_for("Allowed by PermissionRequest hook")
    none_pending(server, sid)
    assert poll(lambda: notify_state(server)["counts"]["sent"] == 1, what="counted")
    assert len(ntfy.received) == 1 and request["id"]  # one request, one message
    client.close()


def test_a_visible_lab_tab_holds_notifications_back(
    agents_server, fake_agents, fake_service, project
):
    ntfy = fake_service
    ttl = "--AgentsApp.notify_presence_ttl=6"  # long enough for a loaded machine
    server = agents_server(env=fake_agents.env, args=ntfy_args(ntfy, ttl))
    # a tab says it is visible: held back
    said = server.request("POST", "/api/agents/presence", {"visible": True, "tab": "lab-1"})
    assert said == (200, {"visible_tabs": 1, "ttl": 6.0})
    agent, client = start_claude(server, project)
    client.stdin("/perm\r")
    first = asked(server, agent["id"])
    poll(lambda: notify_state(server)["counts"]["held"] == 1, what="held back")
    assert ntfy.received == []
    # the tab is hidden now, and the request still waits: it is notified
    server.request("POST", "/api/agents/presence", {"visible": False, "tab": "lab-1"})
    assert notify_state(server)["visible_tabs"] == 0
    poll(lambda: ntfy.received, what="the held request's message")
    assert "echo fake" in ntfy.bodies()[0]["message"]
    answer = server.request("POST", f"/api/agents/requests/{first['id']}", {"decision": "allow"})
    assert answer[0] == 200
    client.wait_for("claude heard: /perm")
    # no tab visible: the next request is notified at once
    client.stdin("/perm\r")
    poll(lambda: len(ntfy.received) == 2, what="the second request's message")
    assert notify_state(server)["counts"]["held"] == 1

    # a tab that says nothing more (closed, asleep) stops counting after its TTL
    second = asked(server, agent["id"])
    server.request("POST", f"/api/agents/requests/{second['id']}", {"decision": "allow"})
    client.wait_for(lambda c: c.text.count("claude heard: /perm") >= 2)
    server.request("POST", "/api/agents/presence", {"visible": True, "tab": "lab-2"})
    client.stdin("/perm\r")
    poll(lambda: notify_state(server)["counts"]["held"] == 2, what="the third held back")
    poll(lambda: len(ntfy.received) == 3, timeout=40, what="the third, once lab-2 went quiet")
    assert notify_state(server)["visible_tabs"] == 0

    # bad presence calls: 400, never 500
    bad: list[Any] = [
        {"visible": "yes", "tab": "a"},
        {"visible": True},
        {"visible": True, "tab": "a b"},
        {"visible": True, "tab": "x" * 65},
        {"x": 1},
        [1],
    ]
    for body in bad:
        status, said = server.request("POST", "/api/agents/presence", body)
        assert status == 400, (body, said)
    client.close()


def test_quiet_hours_hold_notifications_back(agents_server, fake_agents, fake_service, project):
    ntfy = fake_service
    now = time.localtime()
    minute = now.tm_hour * 60 + now.tm_min
    start, end = (minute - 60) % 1440, (minute + 60) % 1440
    quiet = f"{start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"
    args = ntfy_args(ntfy, f"--AgentsApp.notify_quiet_hours={quiet}")
    server = agents_server(env=fake_agents.env, args=[*args, "--AgentsApp.notify_when=always"])
    assert notify_state(server)["quiet_hours"] == quiet
    assert server.request("POST", "/api/agents/presence", {"visible": False, "tab": "t"})[0] == 200
    agent, client = start_claude(server, project)
    client.stdin("/perm\r")
    asked(server, agent["id"])
    poll(lambda: notify_state(server)["counts"]["held"] == 1, what="held back")
    assert ntfy.received == []
    client.close()


def test_bad_quiet_hours_stop_the_server_saying_why(agents_server, fake_agents):
    with pytest.raises(RuntimeError) as e:
        agents_server(args=["--AgentsApp.notify_quiet_hours=late"])
    assert "quiet hours must look like 22:00-07:00" in str(e.value)


def post_action(server: ServerProcess, payload: dict[str, Any], action: str) -> dict[str, Any]:
    """What the service worker does for a notification action: POST the action's answer
    link, resolved against its scope ``{base_url}agents/``, with no credential."""
    (token,) = [a["token"] for a in payload["actions"] if a["action"] == action]
    status, body = anonymous(server, "POST", f"/agents/act/{token}")
    assert status == 200, body
    return dict(json.loads(body))


def test_web_push_reaches_a_device_whose_actions_answer(
    agents_server, agents_state_dir, fake_agents, fake_service, project
):
    push = fake_service
    server = agents_server(env=fake_agents.env, args=push_args())
    status, key = server.request("GET", "/api/agents/push/key")
    assert status == 200 and key["available"] is True and key["reason"] is None, key
    assert len(base64.urlsafe_b64decode(key["public_key"] + "=")) == 65
    pem = agents_state_dir / "push" / "vapid.pem"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    assert stat.S_IMODE(pem.parent.stat().st_mode) == 0o700

    device = Device(push.url + "push/device-1")
    status, made = server.request("POST", "/api/agents/push/subscriptions", device.subscription())
    assert status == 201, made
    assert set(made) == {"id", "name", "endpoint", "created"} and made["name"] == "phone"
    listed = server.request("GET", "/api/agents/push/subscriptions")
    assert listed == (200, [made])
    # the same endpoint again (the browser subscribed again): replaced, not doubled
    again = server.request("POST", "/api/agents/push/subscriptions", device.subscription("p2"))
    assert again[0] == 200 and again[1]["id"] == made["id"] and again[1]["name"] == "p2"
    # the service worker, at its scope's root, to anyone
    status, script = anonymous(server, "GET", "/agents/sw.js", "*/*")
    assert status == 200 and "notificationclick" in script and "act/" in script

    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    poll(lambda: push.received, what="the push")
    (got,) = push.received
    assert got["path"] == "/push/device-1"
    headers = got["headers"]
    assert headers["content-encoding"] == "aes128gcm" and headers["urgency"] == "high"
    wait = clock.epoch(request["until"]) - clock.epoch(request["asked"])
    assert 0 < int(headers["ttl"]) <= wait  # no longer than the request waits
    # signed with the server's VAPID key, for this push service, with the subject
    scheme, _, params = headers["authorization"].partition(" ")
    fields = dict(p.split("=", 1) for p in params.split(","))
    assert scheme == "vapid" and fields["k"] == key["public_key"]
    assert Vapid02.verify(headers["authorization"])
    claims = json.loads(base64.urlsafe_b64decode(fields["t"].split(".")[1] + "=="))
    assert claims["aud"] == push.url.rstrip("/") and claims["sub"] == "mailto:ops@example.org"
    payload = device.decrypt(got["body"])
    assert {k: payload[k] for k in ("type", "request", "kind", "session", "tool", "command")} == {
        "type": "permission-request",
        "request": request["id"],
        "kind": "claude",
        "session": agent["name"],
        "tool": "Bash",
        "command": "echo fake",
    }
    assert [a["action"] for a in payload["actions"]] == ["allow", "deny", "suggestion-0"]
    assert payload["url"] == f"act/{payload['actions'][0]['token']}"
    assert b"echo fake" not in got["body"]  # encrypted on the wire

    # the Allow action: the command runs, with no browser and no Jupyter credential
    said = post_action(server, payload, "allow")
    assert said["decision"] == "allow"
    client.wait_for("Allowed by PermissionRequest hook")
    client.wait_for("claude heard: /perm")
    (decision,) = fake_agents.records("decision")
    assert decision["decision"] == {"behavior": "allow"}

    # the next one, denied: the agent is told
    client.stdin("/perm\r")
    poll(lambda: len(push.received) == 2, what="the second push")
    payload = device.decrypt(push.received[1]["body"])
    assert post_action(server, payload, "deny")["decision"] == "deny"
    client.wait_for("claude heard: denied: The user denied this from JupyterLab.")

    # the push service says the subscription is gone: it is dropped
    push.status = 410
    client.stdin("/perm\r")
    poll(lambda: len(push.received) == 3, what="the third push")
    poll(lambda: server.request("GET", "/api/agents/push/subscriptions")[1] == [],
         what="the subscription dropped")  # fmt: skip
    poll(lambda: notify_state(server)["counts"]["failed"] == 1, what="counted as failed")
    client.close()


def test_no_key_pair_leaves_web_push_off_and_the_rest_on(agents_server, agents_state_dir):
    agents_state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (agents_state_dir / "push").write_text("not a folder")
    # asked for both channels: Web Push cannot make its keys, ntfy goes on
    server = agents_server(args=push_args("--AgentsApp.notify_channels=ntfy"))
    assert notify_state(server)["channels"] == [
        {
            "name": "ntfy",
            "ready": False,
            "reason": "no ntfy server and topic are configured (ntfy_url, ntfy_topic)",
        }
    ]
    status, said = server.request("GET", "/api/agents/push/key")
    assert status == 404 and "Web Push is off" in said["message"]
    assert "Web Push is off: no VAPID key pair" in server.log_path.read_text()


def test_push_subscriptions_refuse_bad_input_and_a_missing_subject_says_why(
    agents_server, fake_service
):
    server = agents_server(args=["--AgentsApp.notify_channels=webpush"])
    status, key = server.request("GET", "/api/agents/push/key")
    assert status == 200 and key["available"] is False
    assert key["reason"].startswith("Web Push needs c.AgentsApp.push_subject")
    (channel,) = notify_state(server)["channels"]
    assert channel == {"name": "webpush", "ready": False, "reason": key["reason"]}
    good = Device(fake_service.url + "push/x").subscription()
    bad: list[tuple[Any, str]] = [
        ({**good, "endpoint": "ftp://push.example.org/x"}, "https URL"),
        ({**good, "endpoint": "http://push.example.org/x"}, "https URL"),
        ({**good, "endpoint": "https://user@push.example.org/x"}, "no user"),
        ({**good, "endpoint": 7}, "endpoint"),
        ({**good, "keys": {"p256dh": good["keys"]["p256dh"]}}, "keys.auth"),
        ({**good, "keys": {**good["keys"], "p256dh": b64(b"\x05" * 65)}}, "P-256"),
        ({**good, "keys": {**good["keys"], "auth": "!!"}}, "base64url"),
        ({**good, "keys": "x"}, "keys"),
        ({**good, "name": "a\x1b[2J"}, "control characters"),
        ({**good, "name": "x" * 101}, "1-100"),
        ({**good, "extra": 1}, "extra"),
    ]
    for body, words in bad:
        status, said = server.request("POST", "/api/agents/push/subscriptions", body)
        assert status == 400 and words in said["message"], (body, status, said)
    assert server.request("GET", "/api/agents/push/subscriptions") == (200, [])
    assert server.request("DELETE", "/api/agents/push/subscriptions/nope")[0] == 404
    made = server.request("POST", "/api/agents/push/subscriptions", good)[1]
    assert server.request("DELETE", f"/api/agents/push/subscriptions/{made['id']}")[0] == 204
    assert server.request("GET", "/api/agents/push/subscriptions") == (200, [])
    for subject in ("mailto:me@localhost", "https://127.0.0.1/"):
        other = agents_server(args=[f"--AgentsApp.push_subject={subject}"])
        reason = other.request("GET", "/api/agents/push/key")[1]["reason"]
        assert "local host" in reason, reason
        other.stop()


def test_only_the_owner_has_channels_a_watcher_or_other_user_gets_none(
    agents_server, fake_agents, fake_service, project
):
    # the server belongs to alice; the token's user (as a share's watcher or another
    # hub user would be) is somebody else: no device, no presence, no set-up
    server = agents_server(env={**fake_agents.env, "JUPYTERHUB_USER": "alice"}, args=push_args())
    device = Device(fake_service.url + "push/intruder")
    for method, path, body in (
        ("POST", "/api/agents/push/subscriptions", device.subscription()),
        ("GET", "/api/agents/push/subscriptions", None),
        ("GET", "/api/agents/push/key", None),
        ("POST", "/api/agents/presence", {"visible": True, "tab": "t"}),
        ("GET", "/api/agents/notify", None),
    ):
        status, said = server.request(method, path, body)
        assert status == 403 and "owner" in said["message"], (path, status, said)


@pytest.mark.parametrize("mode", ["hang", "refuse"])
def test_a_hanging_or_refusing_push_service_slows_no_hook_and_no_answer(
    agents_server, fake_agents, fake_service, project, mode
):
    """Figures, printed (no timing assertion): how long the hook takes to make a
    request pending, and an answer over REST, while a push is in flight to a push
    service that accepts and never answers (``hang``) or closes the connection
    (``refuse``), beside the same with no push at all."""
    push = fake_service
    figures: dict[str, list[float]] = {"with push": [], "no push": []}
    answers: dict[str, list[float]] = {"with push": [], "no push": []}
    server = agents_server(env=fake_agents.env, args=push_args("--AgentsApp.notify_timeout=2"))
    device = Device(push.url + "push/slow")
    assert server.request("POST", "/api/agents/push/subscriptions", device.subscription())[0] == 201
    agent, client = start_claude(server, project)
    sid = agent["id"]
    push.mode = mode
    for round_ in range(6):
        label = "with push" if round_ % 2 == 0 else "no push"
        subscribed = server.request("GET", "/api/agents/push/subscriptions")[1]
        if label == "no push" and subscribed:
            server.request("DELETE", f"/api/agents/push/subscriptions/{subscribed[0]['id']}")
        if label == "with push" and not subscribed:
            server.request("POST", "/api/agents/push/subscriptions", device.subscription())
        before = len(push.received)
        t0 = time.monotonic()
        client.stdin("/perm\r")
        request = poll(
            lambda: server.request("GET", f"/api/agents/requests?session={sid}")[1],
            what="the request",
            interval=0.01,
        )[0]
        figures[label].append(time.monotonic() - t0)
        if label == "with push":  # the push is in flight (hanging) or was refused
            poll(lambda n=before: len(push.received) > n, what="the push", interval=0.01)
        t1 = time.monotonic()
        status, _ = server.request("POST", f"/api/agents/requests/{request['id']}",
                                   {"decision": "allow"})  # fmt: skip
        answers[label].append(time.monotonic() - t1)
        assert status == 200
        client.wait_for(lambda c, n=round_: c.text.count("claude heard: /perm") > n)
    # every push failed (timed out or refused), and nothing else suffered
    poll(lambda: notify_state(server)["counts"]["failed"] == 3, what="3 failed pushes")
    assert notify_state(server)["counts"]["sent"] == 0

    def ms(values: list[float]) -> str:
        return ", ".join(f"{v * 1000:.0f}" for v in values)

    print(
        f"\n[{mode}] request pending after /perm (ms): with a push in flight "
        f"{ms(figures['with push'])}; no push {ms(figures['no push'])}\n"
        f"[{mode}] REST answer (ms): with a push in flight {ms(answers['with push'])};"
        f" no push {ms(answers['no push'])}"
    )
    client.close()


def test_a_hanging_push_service_holds_up_no_other_notice(
    agents_server, fake_agents, fake_service, project
):
    push, ntfy = fake_service, FakeService()
    try:
        push.mode = "hang"
        args = [
            *ntfy_args(ntfy, "--AgentsApp.notify_timeout=60"),
            "--AgentsApp.push_subject=mailto:ops@example.org",
        ]
        server = agents_server(env=fake_agents.env, args=args)
        device = Device(push.url + "push/stuck")
        made = server.request("POST", "/api/agents/push/subscriptions", device.subscription())
        assert made[0] == 201
        agent, client = start_claude(server, project)
        for n in (1, 2):
            client.stdin("/perm\r")
            request = asked(server, agent["id"])
            # its ntfy message comes while the push of the last one hangs; its own push
            # goes out beside it, and hangs too (the two are sent at once: either may
            # reach its service first)
            poll(lambda n=n: len(ntfy.received) == n, what=f"ntfy message {n}")
            poll(lambda n=n: len(push.received) == n, what=f"push {n}, hanging")
            status, _ = server.request(
                "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
            )
            assert status == 200
            client.wait_for(lambda c, n=n: c.text.count("claude heard: /perm") >= n)
        counts = notify_state(server)["counts"]
        assert counts["sent"] == 2 and counts["failed"] == 0  # the pushes still hang
        client.close()
    finally:
        ntfy.close()


def test_links_and_the_worker_live_under_a_hub_like_base_url(
    agents_server, fake_agents, fake_service, project
):
    ntfy, prefix = fake_service, "/user/alice"
    server = agents_server(
        env=fake_agents.env,
        # a Host other than 127.0.0.1 (the hub's name) is let in, as behind a hub's proxy
        args=ntfy_args(
            ntfy, f"--ServerApp.base_url={prefix}/", "--ServerApp.allow_remote_access=True"
        ),
    )
    fields = {"kind": "claude", "cwd": str(project)}
    status, agent = server.request("POST", f"{prefix}/api/agents/sessions", fields)
    assert status == 201, agent
    url = f"ws://127.0.0.1:{server.port}{prefix}/terminals/websocket/{agent['name']}"
    client = TermClient(url)
    try:
        client.wait_for("FAKE CLAUDE conversation")
        # the Lab page's presence call, to the name the owner's devices use for the hub:
        # the links are made with it
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        body = json.dumps({"visible": False, "tab": "t"})
        headers = {"Host": "hub.example.org", "Authorization": f"token {TOKEN}"}
        conn.request("POST", f"{prefix}/api/agents/presence", body=body, headers=headers)
        assert conn.getresponse().status == 200
        conn.close()
        client.stdin("/perm\r")
        poll(lambda: ntfy.received, what="the ntfy message")
        message = ntfy.bodies()[0]
        act = f"http://hub.example.org{prefix}/agents/act/"
        assert message["click"].startswith(act)
        assert all(a["url"].startswith(act) for a in message["actions"])
        here = f"{prefix}/agents/act/"
        status, page = anonymous(server, "GET", message["click"].replace(act, here), "text/html")
        assert status == 200 and "echo fake" in page
        deny = message["actions"][1]
        deny_url = server.base + deny["url"].replace(act, here)
        req = urllib.request.Request(deny_url, data=b"", method="POST", headers=deny["headers"])
        with urllib.request.urlopen(req, timeout=30) as response:
            assert json.loads(response.read())["decision"] == "deny"
        client.wait_for("claude heard: denied")
        status, script = anonymous(server, "GET", f"{prefix}/agents/sw.js", "*/*")
        assert status == 200 and "registration.scope" in script
        assert anonymous(server, "GET", "/agents/sw.js", "*/*")[0] == 404  # only its own
    finally:
        client.close()


def test_a_request_held_by_quiet_hours_is_notified_when_they_end_if_it_still_waits(
    tmp_path: Path, fake_service: FakeService
) -> None:
    """The notifier (its real desk, store, request folder and ntfy channel; only the
    local clock is the test's): two requests asked in quiet hours are held back; one is
    answered meanwhile; when the hours end, the one still waiting is sent, the other not."""
    import asyncio
    import logging

    from tornado.httpclient import AsyncHTTPClient

    from jupyter_agents.agents.permissions import PendingRequest, RequestFolder
    from jupyter_agents.core.events import SessionEvent
    from jupyter_agents.core.records import Session
    from jupyter_agents.core.store import SessionStore
    from jupyter_agents.notify.notifier import Links, Notifier, Policy, Presence
    from jupyter_agents.notify.ntfy import NtfyChannel
    from jupyter_agents.notify.tokens import AnswerTokens
    from jupyter_agents.sessions.requests import PermissionDesk

    store = SessionStore(tmp_path / "sessions.db")
    store.add(Session(id="s1", name="1", status="running", backend="tmux", kind="claude"))
    folder = RequestFolder(tmp_path)
    asks = [
        PendingRequest.from_payload(
            {"tool_name": "Bash", "tool_input": {"command": command}},
            "s1",
            600,
            "shown",
            time.time(),
        )
        for command in ("make test", "make deploy")
    ]
    for request in asks:
        folder.add(request)
    desk = PermissionDesk(store, folder, lambda session_id: None)
    minute = 2 * 60  # quiet from 01:00 to 07:00
    ntfy = NtfyChannel(
        fake_service.url, "agents", "", lambda: "http://127.0.0.1/agents/", AsyncHTTPClient()
    )

    async def scenario() -> list[str]:
        notifier = Notifier(
            desk,
            AnswerTokens(desk),
            [ntfy],
            Policy("always", (60, 7 * 60)),
            Presence(4.0),
            Links("", "http://127.0.0.1/"),
            logging.getLogger("test_notify"),
            local_minute=lambda: minute,
        )
        notifier.start()
        try:
            notifier.offer(SessionEvent("request", store.get("s1")))

            async def until(check: Any, what: str) -> None:
                for _ in range(200):
                    if check():
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"timed out waiting for {what}: {notifier.counts}")

            await until(lambda: notifier.counts["held"] == 2, "both held back")
            assert fake_service.received == []
            folder.remove(asks[1].id)  # answered meanwhile (its hook removes it)
            nonlocal minute
            minute = 7 * 60  # the quiet hours end
            await until(lambda: notifier.counts["sent"] == 1, "the one still waiting, sent")
            return [json.loads(r["body"])["message"] for r in fake_service.received]
        finally:
            await notifier.stop()

    try:
        sent = asyncio.run(scenario())
    finally:
        store.close()
    assert len(sent) == 1 and "make test" in sent[0], sent
