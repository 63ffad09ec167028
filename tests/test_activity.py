"""Server activity for idle culling (issue 30; jupyter_agents/activity.py): terminal input
and output move ``/api/status``'s ``last_activity`` (what jupyterhub-singleuser reports to
the hub); an agent at work keeps it fresh up to ``agent_keepalive`` after the last human
input, a waiting one and an idle shell do not; ``current_activity()`` (which holds off
``ServerApp.shutdown_no_activity_timeout``) reports working agents only. The same rules
with a real hub and jupyterhub-idle-culler: tests/test_hub_culling.py."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from jupyter_agents.core.records import Session
from jupyter_agents.pytest_plugin import ServerProcess, poll
from jupyter_agents.server.activity import KEY, ServerActivity, keepalive_until

#: seconds between notes of activity (and checks of working agents) in these servers
INTERVAL = 0.5
#: the servers' agent_keepalive
KEEPALIVE = 5.0
#: what a sample of last_activity may lag behind: one interval and a busy machine
SLACK = INTERVAL + 1.0
ARGS = [f"--AgentsApp.activity_interval={INTERVAL}", f"--AgentsApp.agent_keepalive={KEEPALIVE}"]
#: added to our REST calls so that they are not API activity themselves
QUIET = "?no_track_activity=1"


def last_activity(server: ServerProcess) -> float:
    """``/api/status``'s ``last_activity`` (epoch seconds); the call itself is no activity."""
    status, body = server.request("GET", "/api/status")
    assert status == 200, body
    return datetime.fromisoformat(body["last_activity"].replace("Z", "+00:00")).timestamp()


def reaches(server: ServerProcess, session_id: str, attention: str) -> None:
    def check() -> bool:
        status, model = server.request("GET", f"/api/agents/sessions/{session_id}{QUIET}")
        assert status == 200, model
        return bool(model["attention"] == attention)

    poll(check, what=f"attention {attention}")


def test_terminal_input_and_output_are_server_activity(agents_server, tmp_path):
    server = agents_server(args=ARGS)
    shell = server.new("shell", tmp_path)
    created = time.time()
    time.sleep(3 * INTERVAL)
    assert last_activity(server) <= created + 0.1  # the POST was the last activity
    client = server.ws(shell["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)  # setup and the replay: no activity
    time.sleep(3 * INTERVAL)
    assert last_activity(server) <= created + 0.1

    typed = time.time()
    client.stdin("sleep 2; echo OUT-$((6*7))\r")  # input now, output 2 s later
    poll(lambda: last_activity(server) >= typed - 0.05, what="input as activity")
    client.wait_for("OUT-42")
    printed = time.time()
    # nothing but the output happened since the input echoed
    poll(lambda: last_activity(server) >= printed - SLACK, what="output as activity")
    assert last_activity(server) >= typed + 1.5
    client.close()

    # an idle shell, with nobody watching or typing, keeps nothing active
    idle = last_activity(server)
    time.sleep(4 * INTERVAL)
    assert last_activity(server) == idle


def test_a_working_agent_keeps_the_server_active_until_keepalive(
    agents_server, fake_agents, tmp_path
):
    server = agents_server(env=fake_agents.env, args=ARGS)
    server.new("shell", tmp_path)  # an idle shell beside it
    agent = server.new("claude", tmp_path)
    reaches(server, agent["id"], "ready")
    client = server.ws(agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    client.stdin("/hold\r")  # the last human input: the tool "runs" until the next line
    typed = time.time()
    client.close()
    reaches(server, agent["id"], "working")

    # fresh (within one interval, give or take a busy machine) until the keepalive ends
    samples = 0
    while time.time() < typed + KEEPALIVE - SLACK:
        assert last_activity(server) >= time.time() - SLACK, samples
        samples += 1
        time.sleep(INTERVAL)
    assert samples >= 3
    # then it stops at the end of the keepalive, however long the agent works on
    time.sleep(2 * SLACK)
    ended = last_activity(server)
    assert typed + KEEPALIVE - SLACK <= ended <= typed + KEEPALIVE + SLACK
    time.sleep(3 * INTERVAL)
    assert last_activity(server) == ended
    _status, model = server.request("GET", f"/api/agents/sessions/{agent['id']}{QUIET}")
    assert model["attention"] == "working"  # still at work

    # a waiting agent keeps nothing active: the input that ended the turn is the last
    client = server.ws(agent["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)
    client.stdin("ok\r")
    reaches(server, agent["id"], "waiting")
    client.close()
    time.sleep(SLACK)
    waiting = last_activity(server)
    time.sleep(4 * INTERVAL)
    assert last_activity(server) == waiting
    assert waiting < time.time() - 3 * INTERVAL


async def test_current_activity_reports_working_agents_only(jp_serverapp, jp_fetch):
    """What ``ServerApp.shutdown_no_activity_timeout`` asks every extension before
    shutting an idle server down: our running sessions are no reason, a working agent is
    (stock reports every terminal that exists)."""
    agents = jp_serverapp.extension_manager.extensions["jupyter_agents"].extension_points
    app = agents["jupyter_agents"].app
    await jp_fetch("api", "agents", "sessions", method="POST", body="{}")
    assert app.current_activity() is None
    assert not jp_serverapp.extension_manager.any_activity()
    store = app.service.store
    (shell,) = store.list(["running"])
    app.activity.refresh(store.list(["running"]))
    assert app.current_activity() is None

    store.update(shell.id, attention="working")  # as an agent kind's hooks would set it
    app.activity.refresh(store.list(["running"]))
    assert set(app.current_activity() or {}) == {shell.name}
    assert jp_serverapp.extension_manager.any_activity()
    assert jp_serverapp.web_app.settings["last_activity_times"][KEY] is not None


def session(**fields: Any) -> Session:
    base: dict[str, Any] = {"id": "a", "name": "1", "status": "running", "backend": "tmux"}
    return Session(**{**base, "kind": "claude", "pid_created": 1000.0, **fields})


@pytest.mark.parametrize(
    ("fields", "last_input", "expected"),
    [
        ({"attention": "working"}, None, 1000.0 + 60),  # since its process started
        ({"attention": "working"}, 1100.0, 1100.0 + 60),  # since the last human input
        ({"attention": "working", "pid_created": 1200.0}, 1100.0, 1200.0 + 60),  # restored
        ({"attention": "waiting"}, 1100.0, None),
        ({"attention": "permission"}, 1100.0, None),
        ({"attention": None, "kind": "shell"}, 1100.0, None),
        ({"attention": "working", "status": "orphaned"}, 1100.0, None),
    ],
)
def test_keepalive_rule(fields, last_input, expected):
    assert keepalive_until(session(**fields), last_input, 900.0, 60.0) == expected
    assert keepalive_until(session(**fields), last_input, 900.0, 0.0) is None  # disabled
    # a server started later starts the count again (it starts because someone asked)
    if expected is not None:
        assert keepalive_until(session(**fields), last_input, 5000.0, 60.0) == 5060.0


def test_server_activity_moves_up_to_the_keepalive_and_never_back():
    now = [2000.0]
    settings: dict[str, Any] = {}
    activity = ServerActivity(settings, 60.0, clock=lambda: now[0])
    agent = session(id="a", attention="working", pid_created=1990.0)
    assert activity.refresh([agent]) == [agent]
    assert settings["last_activity_times"][KEY].timestamp() == 2000.0
    activity.human_input("a")  # at 2000: good until 2060
    now[0] = 2100.0
    assert activity.refresh([agent]) == []
    assert settings["last_activity_times"][KEY].timestamp() == 2060.0  # exactly its end
    activity.refresh([])  # it ended: its input is forgotten, the activity stays
    assert settings["last_activity_times"][KEY].timestamp() == 2060.0
    assert activity._inputs == {}
    activity.terminal()
    assert settings["terminal_last_activity"] is not None
