"""Reaching the owner with JupyterLab closed (issue 57), with the fake Claude
(tests/fakes/fake_agent.py, ``/perm``) on a real server: answer links (single use, bound
to one request and one choice, ended with it, a GET changes nothing, a token reads
nothing)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from test_permissions import asked, none_pending, start_claude

from jupyter_agents.pytest_plugin import ServerProcess, poll


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


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
