"""Idle culling through a real JupyterHub (issue 30, acceptance 3): jupyterhub-idle-culler
runs as a hub service with a timeout of seconds, the single-user servers report their
activity every second (``JUPYTERHUB_ACTIVITY_INTERVAL``), and ``agent_keepalive`` is a
few culler timeouts long. ja-alice's agent is at work (the fake claude's ``/hold``) when
the last person leaves it: her server outlives the culler's timeout until the keepalive
ends, then is culled. ja-bob has an idle shell and an agent waiting for input: his server
is culled one timeout after he left. Both culled servers detach (``on_shutdown=detach``,
LocalProcessSpawner): their tmux sessions and the agents go on running.

The rules without a hub, to the second: tests/test_activity.py. The hub, its helpers
and the users' cleanup are tests/test_hub.py's."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_hub
from test_hub import HUB_VENV, Hub, as_user, running_hub, state_dir, typed

ALICE, BOB = "ja-alice", "ja-bob"
#: the culler's --timeout (seconds without activity before it stops a server)
TIMEOUT = 8
#: the servers' agent_keepalive: long enough that a server kept only by the culler's
#: timeout would have gone well before it
KEEPALIVE = 24
#: what the reported activity, the culler's rounds and the stop may add up to, beyond
#: the timeout (activity noted every 1 s, reported every 1 s +-10 %, a round every 1 s),
#: on a busy machine
LATE = 10
QUIET = "?no_track_activity=1"
CONFIG = f"""
c.Spawner.args = [
    *c.Spawner.args,
    "--AgentsApp.activity_interval=1",
    "--AgentsApp.agent_keepalive={KEEPALIVE}",
]
c.Spawner.environment = {{"JUPYTERHUB_ACTIVITY_INTERVAL": "1"}}
"""
#: the example config's culler service (and its role), with our timeout, a round a second
CULLER = {"JUPYTER_AGENTS_HUB_CULL_TIMEOUT": str(TIMEOUT), "JUPYTER_AGENTS_HUB_CULL_EVERY": "1"}

pytestmark = [m for m in test_hub.pytestmark if m.name != "timeout"] + [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not (HUB_VENV / "bin" / "jupyterhub-idle-culler").exists(),
        reason="needs jupyterhub-idle-culler in the hub venv (.ci/run installs it)",
    ),
]


@pytest.fixture
def hub() -> Iterator[Hub]:
    with running_hub((ALICE, BOB), CONFIG, CULLER) as running:
        yield running


def session(hub: Hub, user: str, token: str, sid: str) -> dict[str, Any]:
    status, model = hub.user_api(user, token, "GET", f"/api/agents/sessions/{sid}{QUIET}")
    assert status == 200, model
    return dict(model)


def new(hub: Hub, user: str, token: str, kind: str) -> dict[str, Any]:
    status, model = hub.user_api(user, token, "POST", "/api/agents/sessions", {"kind": kind})
    assert status == 201, model
    return dict(model)


def wait_attention(hub: Hub, user: str, token: str, sid: str, attention: str) -> None:
    deadline = time.monotonic() + 30
    while session(hub, user, token, sid)["attention"] != attention:
        assert time.monotonic() < deadline, (attention, session(hub, user, token, sid))
        time.sleep(0.3)


def running(hub: Hub, user: str) -> bool:
    """Whether the hub has ``user``'s server up and not being stopped."""
    _status, model = hub.api("GET", f"/hub/api/users/{user}")
    server = model.get("servers", {}).get("")
    return bool(server and server.get("ready") and not server.get("pending"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_working_agent_holds_off_the_culler_until_keepalive_an_idle_server_goes(
    hub: Hub,
) -> None:
    # each user's setup right after their server starts: an unused server goes in TIMEOUT
    tokens = {}
    # alice: an agent whose tool "runs" until the next line, which never comes
    hub.start_server(ALICE)
    tokens[ALICE] = hub.token(ALICE)
    alice_agent = new(hub, ALICE, tokens[ALICE], "claude")
    client = hub.ws(ALICE, tokens[ALICE], alice_agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    client.stdin("/hold\r")
    alice_left = time.time()
    client.close()
    wait_attention(hub, ALICE, tokens[ALICE], alice_agent["id"], "working")

    # bob: an idle shell and an agent that answered and waits for input
    hub.start_server(BOB)
    tokens[BOB] = hub.token(BOB)
    bob_shell = new(hub, BOB, tokens[BOB], "shell")
    bob_agent = new(hub, BOB, tokens[BOB], "claude")
    client = hub.ws(BOB, tokens[BOB], bob_agent["name"])
    typed(client, "hello", "claude heard: hello")
    client.close()
    bob_left = time.time()
    wait_attention(hub, BOB, tokens[BOB], bob_agent["id"], "waiting")

    culled: dict[str, float] = {}
    deadline = alice_left + KEEPALIVE + TIMEOUT + LATE
    while len(culled) < 2 and time.time() < deadline:
        for user in (ALICE, BOB):
            if user not in culled and not running(hub, user):
                culled[user] = time.time()
        time.sleep(0.5)
    log = hub.log_path.read_text()
    assert set(culled) == {ALICE, BOB}, (culled, log[-4000:])
    assert f"Culling server {BOB}" in log and f"Culling server {ALICE}" in log

    # bob's server went one timeout after he left; alice's only after the keepalive
    assert bob_left + TIMEOUT - 2 <= culled[BOB] <= bob_left + TIMEOUT + LATE
    assert culled[ALICE] >= alice_left + KEEPALIVE, (culled[ALICE] - alice_left, log[-4000:])
    assert culled[ALICE] <= alice_left + KEEPALIVE + TIMEOUT + LATE

    # detached, not killed: the sessions live on in each user's tmux
    for user, sessions in ((ALICE, [alice_agent]), (BOB, [bob_shell, bob_agent])):
        sock = state_dir(user) / "tmux" / "socket"
        listed = as_user(user, "tmux", "-S", str(sock), "list-sessions", "-F", "#{session_name}")
        assert sorted(listed.stdout.split()) == sorted(s["id"] for s in sessions), listed
        assert all(alive(s["pid"]) for s in sessions)
