"""Session titles (issue 28): the title a person gives a session (REST, CLI), else the
last one its program set, kept in the store across restarts, pushed as events; a
person's title with control characters is refused, a program's is stripped of them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from jupyter_agents.clients.cli import main
from jupyter_agents.pytest_plugin import EventClient, ServerProcess, poll

both_backends = pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
REFRESH = ["--AgentsApp.refresh_interval=0.5"]


def titled(server: ServerProcess, sid: str, title: str | None, source: str | None) -> dict:
    found: dict = {}

    def check() -> bool:
        found.update(server.model(sid))
        return (found["title"], found["title_source"]) == (title, source)

    poll(check, timeout=15, what=f"title {title!r} ({source})")
    return found


def patch(server: ServerProcess, sid: str, body: object) -> tuple[int, object]:
    return server.request("PATCH", f"/api/agents/sessions/{sid}", body)


@both_backends
def test_a_session_keeps_the_title_a_person_or_its_program_gave_it(
    agents_server, agents_state_dir, tmp_path: Path
):
    server = agents_server(args=REFRESH)
    events = EventClient(server)
    try:
        status, made = server.request("POST", "/api/agents/sessions", {"cwd": str(tmp_path)})
        assert status == 201, made
        sid = made["id"]
        assert (made["title"], made["title_source"]) == (None, None)

        # the program's title (OSC 0), its control characters stripped
        server.type_line(
            made["name"], "printf '\\033]0;build\\001ing docs\\007'; echo OK$((1+1))", "OK2"
        )
        titled(server, sid, "building docs", "program")
        poll(
            lambda: any(e.get("title") == "building docs" for e in events.of(sid, "title")),
            what="the title event",
        )

        # a person's title wins, and is published
        status, body = patch(server, sid, {"title": "  Fix the flaky test  "})
        assert status == 200, body
        assert (body["title"], body["title_source"]) == ("Fix the flaky test", "user")
        poll(
            lambda: any(e.get("title_source") == "user" for e in events.of(sid, "title")),
            what="the rename event",
        )
        # the program retitling itself does not override it
        server.type_line(made["name"], "printf '\\033]2;vim notes.md\\007'; echo OK$((2+1))", "OK3")
        status, listed = server.request("GET", "/api/agents/sessions")
        assert [s["title"] for s in listed if s["id"] == sid] == ["Fix the flaky test"]

        # bad titles: 400 with a message, nothing changed
        for bad in ({"title": "a\x1b[31mb"}, {"title": "x" * 257}, {"title": 7}, {}, {"name": "x"}):
            status, body = patch(server, sid, bad)
            assert status == 400 and body["message"], (bad, status, body)
        status, body = server.request("PATCH", f"/api/agents/sessions/{sid}", b"\xff{")
        assert status == 400, body
        assert patch(server, "nosuchsession", {"title": "x"})[0] == 404
        assert server.model(sid)["title"] == "Fix the flaky test"

        # kept across a crash of the server
        server.stop(signal.SIGKILL)
        server.start()
        titled(server, sid, "Fix the flaky test", "user")

        # the CLI renames too; an empty title shows the program's again
        assert main(["rename", sid, "", "--state-dir", str(agents_state_dir)]) == 0
        titled(server, sid, "vim notes.md", "program")
        assert main(["rename", sid, "From the CLI", "--state-dir", str(agents_state_dir)]) == 0
        titled(server, sid, "From the CLI", "user")
    finally:
        events.close()
