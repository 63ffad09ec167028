"""Permission requests answered away from the tab (issue 36), with the fake Claude
(tests/fakes/fake_agent.py), which runs its ``PermissionRequest`` hook in the background
while its dialog shows, as the real CLI does: the request appears in REST, the events,
the CLI; an answer over REST or the CLI reaches the agent with no key pressed; a key
pressed first closes it; a reader, a stale id and a second answer are refused; nothing
of what a request shows outlives it. The real CLIs: tests/test_real_turns.py."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from test_attention import cli, reaches

from jupyter_agents.agents.permissions import PendingRequest, RequestFolder
from jupyter_agents.pytest_plugin import EventClient, ServerProcess, TermClient, poll

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def asked(server: ServerProcess, session_id: str) -> dict[str, Any]:
    """The session's one pending request, once there is one."""
    found = poll(
        lambda: server.request("GET", f"/api/agents/requests?session={session_id}")[1],
        what="a pending permission request",
    )
    (request,) = found
    return dict(request)


def none_pending(server: ServerProcess, session_id: str) -> None:
    poll(
        lambda: server.request("GET", f"/api/agents/requests?session={session_id}")[1] == [],
        what="no pending request",
    )


def hooks_ended(state: Path) -> list[dict[str, Any]]:
    """Every ``PermissionEnded`` record spooled so far."""
    out = []
    for path in (state / "spool").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "PermissionEnded":
                out.append(record)
    return out


def start_claude(server: ServerProcess, project: Path) -> tuple[dict[str, Any], TermClient]:
    agent = server.new("claude", project)
    client = server.ws(agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    return agent, client


def test_allow_over_rest_runs_the_tool_with_no_key_pressed(
    agents_server, agents_state_dir, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    events = EventClient(server)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    client.wait_for("Do you want to proceed?")
    request = asked(server, sid)
    assert request["tool"] == "Bash" and request["command"] == "echo fake"
    assert request["description"] == "a fake tool call"
    assert (request["session_id"], request["name"], request["kind"]) == (
        sid,
        agent["name"],
        "claude",
    )
    assert request["suggestions"] == [{"index": 0, "label": "Allow Bash(echo:*) for this session"}]
    assert request["falls_back_to_dialog"] is False  # Claude's dialog is on screen meanwhile
    assert reaches(server, sid, "permission")["attention"] == "permission"
    assert server.request("GET", f"/api/agents/requests/{request['id']}")[1] == request
    poll(lambda: events.of(sid, "request"), what="a request event")

    # what the request shows lives in a private file while it waits, never in the spool
    folder = agents_state_dir / "requests"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (held,) = folder.glob("*.json")
    assert stat.S_IMODE(held.stat().st_mode) == 0o600
    assert "echo fake" in held.read_text()
    assert "echo fake" not in (agents_state_dir / "spool" / f"{sid}.jsonl").read_text()

    sent_before = len(client.text)
    status, body = server.request(
        "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
    )
    assert status == 200, body
    assert body["decision"] == "allow" and body["request"]["id"] == request["id"]
    client.wait_for("Allowed by PermissionRequest hook")
    client.wait_for("claude heard: /perm")
    assert len(client.text) > sent_before
    reaches(server, sid, "waiting")
    (decision,) = fake_agents.records("decision")
    assert decision["decision"] == {"behavior": "allow"}
    none_pending(server, sid)
    assert list(folder.iterdir()) == []  # nothing of it is kept
    (ended,) = hooks_ended(agents_state_dir)
    assert ended["decision"] == "allow" and ended["request"] == request["id"]
    spooled = (agents_state_dir / "spool" / f"{sid}.jsonl").read_text()
    assert "echo fake" not in spooled

    # an answer to it now: it ended, allowed
    again = poll(  # once the server read the hook's end
        lambda: (
            (
                a := server.request(
                    "POST", f"/api/agents/requests/{request['id']}", {"decision": "deny"}
                )
            )[0]
            == 409
            and a
        ),
        what="a 409",
    )
    assert again[1]["message"] == f"permission request {request['id']} was allowed", again
    n = len(events.of(sid, "request"))
    assert n >= 2, events.of(sid, "request")  # asked, then answered
    assert all("command" not in json.dumps(e) for e in events.of(sid, "request"))
    events.close()
    client.close()


def test_deny_with_a_message_the_agent_receives_and_the_suggestion_allows(
    agents_server, agents_state_dir, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    status, body = server.request(
        "POST",
        f"/api/agents/requests/{request['id']}",
        {"decision": "deny", "message": "use the test fixture instead"},
    )
    assert status == 200, body
    client.wait_for("claude heard: denied: use the test fixture instead")
    hooks = [r["name"] for r in fake_agents.records("hook")]
    assert "PostToolUse" not in hooks[hooks.index("PermissionRequest") :]  # it did not run
    none_pending(server, sid)

    # the agent's own "allow from now on" suggestion goes back to it with the allow
    client.stdin("/perm\r")
    request = asked(server, sid)
    code, out, err = cli(agents_state_dir, "allow", request["id"][:6], "--always", "0")
    assert code == 0, err
    assert out.strip() == f"allowed Bash for claude {agent['name']} ({request['id']})"
    client.wait_for("Allowed by PermissionRequest hook")
    decisions = [r["decision"] for r in fake_agents.records("decision")]
    assert decisions[-1] == {
        "behavior": "allow",
        "updatedPermissions": [
            {
                "type": "addRules",
                "rules": [{"toolName": "Bash", "ruleContent": "echo:*"}],
                "behavior": "allow",
                "destination": "session",
            }
        ],
    }
    client.close()


def test_a_key_pressed_in_the_terminal_first_closes_the_request(
    agents_server, agents_state_dir, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    client.stdin("y\r")  # the dialog's answer, in the terminal
    client.wait_for("claude heard: /perm")
    none_pending(server, sid)
    ended = poll(lambda: hooks_ended(agents_state_dir), what="the hook's end")
    assert ended[0]["decision"] == "closed"
    assert ended[0]["reason"] == "answered in the terminal"
    assert fake_agents.records("decision") == []  # the hook printed nothing
    late = poll(  # it says how it ended, once the server read the hook's end
        lambda: (
            (
                a := server.request(
                    "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
                )
            )[0]
            == 409
            and a
        ),
        what="a 409",
    )
    assert late[1]["message"] == (
        f"permission request {request['id']} was closed: answered in the terminal"
    )
    assert list((agents_state_dir / "requests").iterdir()) == []

    # the CLI says so too
    code, out, _ = cli(agents_state_dir, "requests")
    assert (code, out.strip()) == (0, "no pending permission requests")
    client.close()


def test_bad_answers_get_4xx_and_change_nothing(
    agents_server, agents_state_dir, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    sid = agent["id"]
    client.stdin("/perm\r")
    request = asked(server, sid)
    path = f"/api/agents/requests/{request['id']}"
    bad: list[tuple[Any, int, str]] = [
        ({"decision": "maybe"}, 400, '"decision" must be "allow" or "deny"'),
        ({}, 400, '"decision" must be'),
        ({"decision": "allow", "message": "x"}, 400, '"message" goes with "deny" only'),
        ({"decision": "deny", "message": "a\x1b[2Jb"}, 400, "control characters"),
        ({"decision": "deny", "message": "x" * 2001}, 400, "longer than 2000"),
        ({"decision": "allow", "suggestion": 7}, 400, "there is no suggestion 7"),
        ({"decision": "allow", "suggestion": True}, 400, "must be the index"),
        ({"decision": "deny", "suggestion": 0}, 400, '"suggestion" goes with "allow" only'),
        ({"decision": "allow", "extra": 1}, 400, "extra"),
        (b"not json", 400, ""),
        (["allow"], 400, ""),
    ]
    for body, status, words in bad:
        got = server.request("POST", path, body)
        assert got[0] == status, (body, got)
        said = got[1]["message"] if isinstance(got[1], dict) else str(got[1])
        assert words in said, (body, got)
    for unknown in ("0123456789abcdef", "nothex", "x" * 300):
        got = server.request("POST", f"/api/agents/requests/{unknown}", {"decision": "allow"})
        assert got[0] == 404, (unknown, got)
    # all of that left it pending, and the agent waiting
    assert asked(server, sid)["id"] == request["id"]
    assert fake_agents.records("decision") == []
    code, _, err = cli(agents_state_dir, "deny", "zzzz")
    assert code == 3 and "no pending permission request 'zzzz'" in err
    client.stdin("y\r")
    client.wait_for("claude heard: /perm")
    client.close()


def test_a_second_answer_is_refused_while_the_first_is_taken(agents_server, agents_state_dir):
    """Taken once: the answer file is made with a hard link, which a second answer finds
    there (a hook that has not yet read the first leaves both to see)."""
    server = agents_server()
    shell = server.new("shell")
    pending = PendingRequest.from_payload(
        {"tool_name": "Bash", "tool_input": {"command": "make deploy"}},
        shell["id"],
        60,
        "dialog",
        time.time(),
    )
    RequestFolder(agents_state_dir).add(pending)  # a hook that never reads its answer
    path = f"/api/agents/requests/{pending.id}"
    assert server.request("GET", path)[1]["command"] == "make deploy"
    first = server.request("POST", path, {"decision": "deny", "message": "not today"})
    assert first[0] == 200, first
    second = server.request("POST", path, {"decision": "allow"})
    assert second[0] == 409 and second[1]["message"].endswith("was denied"), second
    assert server.request("GET", path)[0] == 404  # answered: no longer pending
    answer = json.loads((agents_state_dir / "requests" / f"{pending.id}.answer").read_text())
    assert answer["decision"] == "deny" and answer["message"] == "not today"
    RequestFolder(agents_state_dir).remove(pending.id)


def test_a_reader_sees_no_request_and_cannot_answer(agents_server, fake_agents, project):
    """A deployment granting only ``read`` (tests/fakes/authorizers.py): what a request
    shows is output, and answering is typing; both need ``execute``."""
    owner = agents_server(env=fake_agents.env)
    agent, client = start_claude(owner, project)
    client.stdin("/perm\r")
    request = asked(owner, agent["id"])
    reader = agents_server(
        env={
            **fake_agents.env,
            "PYTHONPATH": str(FAKES) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        },
        args=["--ServerApp.authorizer_class=authorizers.ReadOnly"],
    )
    for method, path, body in (
        ("GET", "/api/agents/requests", None),
        ("GET", f"/api/agents/requests/{request['id']}", None),
        ("POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}),
    ):
        status, got = reader.request(method, path, body)
        assert status == 403, (method, path, status, got)
        assert "echo fake" not in json.dumps(got)
    assert asked(owner, agent["id"])["id"] == request["id"]  # still pending
    assert fake_agents.records("decision") == []
    client.stdin("y\r")
    client.wait_for("claude heard: /perm")
    client.close()


def test_a_request_never_outlives_its_session(
    agents_server, agents_state_dir, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    agent, client = start_claude(server, project)
    client.stdin("/perm\r")
    request = asked(server, agent["id"])
    status, _ = server.request("DELETE", f"/api/agents/sessions/{agent['id']}")
    assert status == 204
    none_pending(server, agent["id"])
    poll(
        lambda: not (agents_state_dir / "requests" / f"{request['id']}.json").exists(),
        what="the request's file removed",
    )
    client.close()


def test_the_magic_lists_and_answers_requests(
    agents_state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``%agent requests|allow|deny`` (IPython in this process, real tmux): what is
    asked, and the answer taken once."""
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    monkeypatch.chdir(tmp_path)
    shell: Any = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        sid = shell.run_line_magic("agent", "new shell --name asks").sessions[0].id
        pending = PendingRequest.from_payload(
            {"tool_name": "Bash", "tool_input": {"command": "make release", "description": "Ship"}},
            sid,
            60,
            "dialog",
            time.time(),
        )
        RequestFolder(agents_state_dir).add(pending)  # as a waiting hook leaves it
        capsys.readouterr()
        shell.run_line_magic("agent", "requests")
        out = capsys.readouterr().out
        assert f"{pending.id}  shell asks  Bash: make release" in out and "Ship" in out
        shell.run_line_magic("agent", f"deny {pending.id[:6]} -m 'not on a Friday'")
        assert capsys.readouterr().out.strip() == f"denied Bash for shell asks ({pending.id})"
        answer = json.loads((agents_state_dir / "requests" / f"{pending.id}.answer").read_text())
        assert (answer["decision"], answer["message"]) == ("deny", "not on a Friday")
        with pytest.raises(UsageError, match="no pending permission request"):
            shell.run_line_magic("agent", f"allow {pending.id}")
        RequestFolder(agents_state_dir).remove(pending.id)
        shell.run_line_magic("agent", "kill asks")
    finally:
        InteractiveShell.clear_instance()
