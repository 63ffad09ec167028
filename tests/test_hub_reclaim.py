"""Reclaiming detached sessions through a real JupyterHub: the example config's
``agents-reclaim`` service (``python -m jupyter_agents.clients.reclaim`` as root, a round every
second, idle limit :data:`IDLE` s).

ja-alice leaves an idle shell and an agent at work (the fake claude's ``/hold``), and her
server is stopped: the shell is ended once idle past the limit, with the reason in its
record; the agent, within its keepalive, runs on. ja-bob leaves a shell printing a
line every second, and the hub deletes him: every session of his ends within a round or
two, recorded as such, and no process of his runs. The records are read from each
user's ``sessions.db`` as the admin would (root).
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_hub
from test_hub import Hub, running_hub, state_dir, typed
from test_hub_culling import alive, new, wait_attention

from jupyter_agents.pytest_plugin import poll

ALICE, BOB = "ja-alice", "ja-bob"
#: the idle limit (seconds with no output, input or viewer)
IDLE = 6
#: a round every second; what a busy machine may add to a round and an ending
LATE = 15
RECLAIM = {"JUPYTER_AGENTS_HUB_RECLAIM_IDLE": str(IDLE), "JUPYTER_AGENTS_HUB_RECLAIM_EVERY": "1"}

pytestmark = [m for m in test_hub.pytestmark if m.name != "timeout"] + [pytest.mark.timeout(300)]


@pytest.fixture
def hub() -> Iterator[Hub]:
    with running_hub((ALICE, BOB), "", RECLAIM) as running:
        yield running


def record(user: str, session_id: str) -> dict[str, Any]:
    """The session's record in ``user``'s store, read by root."""
    with sqlite3.connect(state_dir(user) / "sessions.db") as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    assert row is not None
    return dict(row)


def processes(user: str) -> list[str]:
    found = subprocess.run(["pgrep", "-a", "-u", user], capture_output=True, text=True)
    return found.stdout.splitlines()


def test_idle_shell_ends_working_agent_stays_deleted_user_ends(hub: Hub) -> None:
    # alice: an idle shell, and an agent whose tool "runs" until a next line that never comes
    hub.start_server(ALICE)
    alice = hub.token(ALICE)
    shell = new(hub, ALICE, alice, "shell")
    agent = new(hub, ALICE, alice, "claude")
    client = hub.ws(ALICE, alice, agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    client.stdin("/hold\r")
    client.close()
    wait_attention(hub, ALICE, alice, agent["id"], "working")
    hub.stop_server(ALICE)  # detached: both live on

    # bob: a shell that prints every second; then the hub deletes him
    hub.start_server(BOB)
    bob = hub.token(BOB)
    busy = new(hub, BOB, bob, "shell")
    client = hub.ws(BOB, bob, busy["name"])
    typed(client, "while :; do echo TICK-$((6*7)); sleep 1; done", "TICK-42")
    client.close()
    assert hub.api("DELETE", f"/hub/api/users/{BOB}")[0] == 204
    deleted = time.monotonic()
    while record(BOB, busy["id"])["status"] == "running" or processes(BOB):
        assert time.monotonic() < deleted + LATE, (record(BOB, busy["id"]), processes(BOB))
        time.sleep(0.2)
    took = time.monotonic() - deleted
    ended = record(BOB, busy["id"])
    assert (ended["status"], ended["reason"]) == ("killed", "reclaimed: user deleted from the hub")
    assert not alive(busy["pid"])

    # alice's idle shell ends (once idle IDLE s); the agent at work does not
    deadline = time.monotonic() + IDLE + LATE
    while record(ALICE, shell["id"])["status"] == "running":
        assert time.monotonic() < deadline, record(ALICE, shell["id"])
        time.sleep(0.2)
    ended = record(ALICE, shell["id"])
    assert ended["status"] == "killed" and ended["reason"].startswith("reclaimed: idle "), ended
    assert not alive(shell["pid"])
    # two more rounds (each lists the hub's users)
    rounds = hub.log_path.read_text().count("/hub/api/users?offset=0")
    poll(
        lambda: hub.log_path.read_text().count("/hub/api/users?offset=0") >= rounds + 2,
        what="two more reclaim rounds",
    )
    kept = record(ALICE, agent["id"])
    assert (kept["status"], kept["attention"]) == ("running", "working") and alive(agent["pid"])

    log = hub.log_path.read_text()
    assert f"reclaim: ended {BOB}'s session {busy['id']} (shell" in log, log[-3000:]
    assert f"reclaim: ended {ALICE}'s session {shell['id']} (shell" in log
    assert not any(agent["id"] in line for line in log.splitlines() if "reclaim: ended" in line)
    print(f"bob's sessions ended {took:.1f} s after the hub deleted him")

    # the hub stops its service (SIGINT): it says so and ends, no traceback
    hub.stop()
    log = hub.log_path.read_text()
    assert "reclaim: stopped" in log and "Traceback" not in log, log[-3000:]
