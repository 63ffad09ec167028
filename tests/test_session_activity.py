"""A session's ``last_activity`` follows its program's output whether anyone watches or
not (``Refresh.follow_activity``: the transcript's last write), on both backends,
with one store write per session per refresh at most."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime

import pytest
from conftest import producer_config

from jupyter_agents.pytest_plugin import EventClient, poll, transcript_bytes

#: what the acceptance allows between the last output and ``last_activity``
LAG = 5.0
#: the producer prints one line every STEP seconds, COUNT of them (10 s: past LAG, with
#: a refresh every REFRESH seconds while it prints)
STEP, COUNT = 0.5, 20
REFRESH = 1


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_last_activity_moves_with_output_nobody_watches(agents_server, agents_state_dir, tmp_path):
    producer_config(tmp_path, count=COUNT, interval=STEP)
    server = agents_server(args=[f"--AgentsApp.refresh_interval={REFRESH}"])
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
        time.sleep(3 * REFRESH)  # nothing more is printed; the record keeps the last output
        lag = abs(recorded() - last_output)
        assert lag <= LAG, (recorded(), last_output)
        pushed = events.of(sid, "activity")
        assert pushed, "no activity event reached the browsers"
        took = time.time() - started
    finally:
        events.close()
    # bounded cost: at most one write (and event) per refresh and per listing
    assert len(pushed) <= took / REFRESH + 4, (len(pushed), took)
    print(
        f"last_activity {lag:.2f} s from the last output; "
        f"{len(pushed)} activity events in {took:.0f} s"
    )


#: no refresh falls within these tests
NO_REFRESH = ["--AgentsApp.refresh_interval=3600"]


def test_a_listing_writes_and_publishes_nothing(agents_server, agents_state_dir, tmp_path):
    """``GET /api/agents/sessions`` only reads: while a session prints and nobody
    watches it, with no refresh due, 100 listings leave the store as it was (SQLite's
    ``data_version``: another connection's commit changes it) and publish no event.
    One backend: a listing asks none."""
    import sqlite3

    producer_config(tmp_path, count=2000, interval=0.02)
    server = agents_server(args=NO_REFRESH)
    events = EventClient(server)
    try:
        status, made = server.request("POST", "/api/agents/sessions", {"kind": "producer"})
        assert status == 201, made
        sid = made["id"]
        poll(lambda: b"line-00020" in transcript_bytes(agents_state_dir, sid), timeout=30)
        store = sqlite3.connect(f"file:{agents_state_dir / 'sessions.db'}?mode=ro", uri=True)
        try:
            version = store.execute("PRAGMA data_version").fetchone()[0]
            published, printed = len(events.of(sid)), len(transcript_bytes(agents_state_dir, sid))
            for _ in range(100):
                status, listed = server.request("GET", "/api/agents/sessions")
                assert status == 200 and [s["id"] for s in listed] == [sid]
            assert len(transcript_bytes(agents_state_dir, sid)) > printed, "it printed meanwhile"
            assert store.execute("PRAGMA data_version").fetchone()[0] == version, "a write"
        finally:
            store.close()
        # a change after them: once its event is here, any the listings made would be
        status, _ = server.request("PATCH", f"/api/agents/sessions/{sid}", {"title": "x"})
        assert status == 200
        poll(lambda: events.of(sid, "title"), timeout=10, what="the title event")
        assert [e["action"] for e in events.of(sid)[published:]] == ["title"]
        assert listed[0]["status"] == "running"
    finally:
        events.close()


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_a_session_that_ends_unwatched_is_recorded_when_it_ends(
    agents_server, agents_state_dir, tmp_path
):
    """No viewer, no refresh due, no listing that would look: the server watches the
    session's process and records its end (published) when it ends."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    brief = [sys.executable, "-c", "import time; time.sleep(0.5); print('BRIEF DONE')"]
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {"agents": {"brief": {"command": brief}}}})
    )
    server = agents_server(args=NO_REFRESH)
    events = EventClient(server)
    try:
        status, made = server.request("POST", "/api/agents/sessions", {"kind": "brief"})
        assert status == 201, made
        sid = made["id"]
        ended = poll(lambda: events.of(sid, "status") or None, timeout=30, what="its end")
        assert ended[-1]["status"] == "exited"
        assert server.request("GET", f"/api/agents/sessions/{sid}")[1]["exit_code"] == 0
        assert b"BRIEF DONE" in transcript_bytes(agents_state_dir, sid)
    finally:
        events.close()
