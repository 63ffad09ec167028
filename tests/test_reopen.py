"""Tabs that come back: after a reboot JupyterLab reopens its terminal tabs by POSTing
their names to /api/terminals; an interrupted session of that name is restored in
place (``AgentsApp.restore_on_open``, on by default) instead of an unrelated shell."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from jupyter_agents.pytest_plugin import ServerProcess, kill_backends


def sessions(server: ServerProcess) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in server.request("GET", "/api/agents/sessions")[1]}


def reboot(server: ServerProcess, agents_server: Any, **kwargs: Any) -> ServerProcess:
    """What a reboot leaves: no tmux, no server; the state dir intact."""
    kill_backends(server.state_dir)
    server.stop(signal.SIGKILL)
    return agents_server(**kwargs)


def test_reopened_tabs_restore_their_sessions_in_place(agents_server, fake_agents, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    server = agents_server(env=fake_agents.env)
    shell = server.request("POST", "/api/agents/sessions", {"kind": "shell", "cwd": str(project)})[
        1
    ]
    server.type_line(shell["name"], "echo tail-was-$((6*7))", "tail-was-42")
    agent = server.request("POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(project)})[
        1
    ]
    server.type_line(agent["name"], "hello-before", "claude heard: hello-before")

    server = reboot(server, agents_server, env=fake_agents.env)
    assert {sessions(server)[s["id"]]["status"] for s in (shell, agent)} == {"interrupted"}
    # JupyterLab reopens both tabs: POST with the old names
    for old in (shell, agent):
        status, model = server.request("POST", "/api/terminals", {"name": old["name"]})
        assert status == 200 and model["name"] == old["name"], model
    after = sessions(server)
    assert len(after) == 2  # restored in place: no new session
    assert after[shell["id"]]["status"] == after[agent["id"]]["status"] == "running"
    assert after[agent["id"]]["conversation_id"] == agent["conversation_id"]
    assert after[agent["id"]]["argv"][1:3] == ["--resume", agent["conversation_id"]]

    client = server.ws(shell["name"])
    client.wait_for("restored shell session")  # the old tail, then the marker line
    assert client.text.index("tail-was-42") < client.text.index("restored shell session")
    client.stdin("pwd\r")
    client.wait_for(str(Path(project).resolve()))  # in the same cwd
    client.close()
    client = server.ws(agent["name"])
    client.wait_for("restored claude session")
    assert "hello-before" in client.text
    client.close()


def test_restore_on_open_off_starts_a_fresh_shell(agents_server):
    server = agents_server()
    shell = server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    server = reboot(server, agents_server, args=["--AgentsApp.restore_on_open=False"])
    status, model = server.request("POST", "/api/terminals", {"name": shell["name"]})
    assert status == 200 and model["name"] == shell["name"]
    after = sessions(server)
    assert after[shell["id"]]["status"] == "interrupted"  # left for the banner / panel
    assert len(after) == 2
