"""The labelled heuristic for configured kinds that report nothing exact: ``waiting``
after ``silence`` seconds without output, ``working`` while it prints."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_agents.pytest_plugin import poll


def test_silence_heuristic_is_labelled_and_follows_output(agents_server, tmp_path: Path):
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    # prints, then reads lines; each line it reads makes it print for 2 s
    script = "while read x; do for i in 1 2 3 4; do echo busy-$x; sleep 0.5; done; done"
    agents = {"quiet": {"command": ["/bin/sh", "-c", script], "attention": "silence", "silence": 1}}
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {"agents": agents}})
    )
    server = agents_server(args=["--AgentsApp.refresh_interval=0.3"])
    status, session = server.request("POST", "/api/agents/sessions", {"kind": "quiet"})
    assert status == 201, session
    waiting = poll(lambda: (m := server.model(session["id"]))["attention"] == "waiting" and m)
    assert waiting["attention_source"] == "heuristic"
    client = server.ws(session["name"])
    try:
        client.wait_for(lambda c: len(c.messages) >= 2)
        client.stdin("go\r")
        client.wait_for("busy-go")
        poll(lambda: server.model(session["id"])["attention"] == "working", what="working")
        poll(lambda: server.model(session["id"])["attention"] == "waiting", what="waiting again")
    finally:
        client.close()
    shell = server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    assert server.model(shell["id"])["attention"] is None  # shells never report


def test_bad_attention_config_is_refused():
    from jupyter_agents.agents.kinds import make_kinds

    for spec in ({"attention": "guess"}, {"attention": "silence", "silence": -1}):
        try:
            make_kinds(["sh"], {"x": {"command": ["x"], **spec}})
        except ValueError as e:
            assert "agent kind 'x'" in str(e)
        else:
            raise AssertionError(f"{spec} accepted")
