"""A session's ``last_activity`` follows its program's output whether anyone watches or
not (``SessionService.follow_activity``: the transcript's last write), on both backends,
with one store write per session per refresh at most."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from conftest import producer_config

from jupyter_agents.pytest_plugin import EventClient, poll, transcript_bytes

#: what the acceptance allows between the last output and ``last_activity``
LAG = 5.0
#: the producer prints one line every STEP seconds, COUNT of them (20 s)
STEP, COUNT = 0.5, 40


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_last_activity_moves_with_output_nobody_watches(agents_server, agents_state_dir, tmp_path):
    producer_config(tmp_path, count=COUNT, interval=STEP)
    server = agents_server()
    events = EventClient(server)
    try:
        status, made = server.request("POST", "/api/agents/sessions", {"kind": "producer"})
        assert status == 201, made
        sid, created = made["id"], epoch(made["created"])
        started = time.time()

        def recorded() -> float:
            return epoch(server.request("GET", f"/api/agents/sessions/{sid}")[1]["last_activity"])

        # while it prints, it moves with the output (nobody has the terminal open)
        poll(
            lambda: recorded() > created + LAG or None,
            timeout=30,
            what="last_activity moving while it prints",
        )
        printed = transcript_bytes(agents_state_dir, sid)
        assert b"PRODUCER DONE" not in printed, "last_activity moved only once it was done"
        poll(lambda: b"PRODUCER DONE" in transcript_bytes(agents_state_dir, sid), timeout=40)
        last_output = time.time()  # seen within a poll step of being printed
        time.sleep(LAG + 1)  # nothing more is printed; the record keeps the last output
        lag = abs(recorded() - last_output)
        assert lag <= LAG, (recorded(), last_output)
        pushed = events.of(sid, "activity")
        assert pushed, "no activity event reached the browsers"
        took = time.time() - started
    finally:
        events.close()
    # bounded cost: at most one write (and event) per refresh (5 s) and per listing
    assert len(pushed) <= took / 5 + 4, (len(pushed), took)
    print(
        f"last_activity {lag:.2f} s from the last output; "
        f"{len(pushed)} activity events in {took:.0f} s"
    )
