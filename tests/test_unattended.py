"""A limit for unattended work (issue 30): an agent spending past
``AgentsApp.unattended_limit`` with no viewer that can type is interrupted the way a
person would (the fake CLIs record every byte they read: Escape), its attention becomes
``error`` with the reason (REST and an event), nothing is killed; with a viewer
connected nothing happens, and a person's input starts a fresh allowance. A bad limit
is refused: at start (the server stops, naming the trait), per session (400)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_agents.clients.cli import main
from jupyter_agents.pytest_plugin import EventClient, ServerProcess, TermClient, poll

LIMIT = 150_000  # tokens: /spend 100 writes ~20k a record, ten records a second
SPEND = "/spend 100 0.1"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def limited_server(
    agents_server: Any, fake_agents: Any, tmp_path: Path, limit: dict[str, Any] | None = None
) -> ServerProcess:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    settings = {"unattended_limit": {"tokens": LIMIT} if limit is None else limit}
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {**settings, "refresh_interval": 0.3}})
    )
    return agents_server(env=fake_agents.env)  # type: ignore[no-any-return]


def start_spending(server: ServerProcess, agent: dict[str, Any], ready: str) -> TermClient:
    client = server.ws(agent["name"])
    client.wait_for(ready)
    client.stdin(SPEND + "\r")
    client.wait_for("spending")
    return client


def interrupts(fake_agents: Any, pid: int) -> list[dict[str, Any]]:
    return [r for r in fake_agents.records("interrupted") if r["pid"] == pid]


@pytest.mark.parametrize(
    ("agents_backend", "kind", "ready"),
    [
        ("tmux", "claude", "FAKE CLAUDE conversation"),
        ("broker", "claude", "FAKE CLAUDE conversation"),
        ("tmux", "codex", "FAKE CODEX thread"),
    ],
    indirect=["agents_backend"],
)
def test_past_the_limit_with_nobody_watching_the_turn_is_interrupted(
    agents_server, fake_agents, project, tmp_path, kind, ready
):
    server = limited_server(agents_server, fake_agents, tmp_path)
    events = EventClient(server)
    try:
        agent = server.new(kind, project)
        sid = agent["id"]
        client = start_spending(server, agent, ready)
        pid = server.model(sid)["pid"]
        client.close()  # nobody watches now
        got = poll(lambda: interrupts(fake_agents, pid), timeout=20, what="the interrupt key")
        assert got[0]["data"] == "\x1b"  # Escape, as a person presses it, and only that
        inputs = [r["data"] for r in fake_agents.records("input") if r["pid"] == pid]
        assert inputs == ["\x1b"]

        after = server.model(sid)
        assert after["status"] == "running" and psutil.pid_exists(pid)  # nothing killed
        assert after["attention"] == "error"
        reason = after["attention_reason"]
        assert reason.startswith("unattended limit: ") and "nobody watching" in reason
        usage = after["usage"]
        assert usage["allowance"]["tokens"]["total"] > LIMIT
        assert usage["limit"] == {"tokens": LIMIT} and usage["limit_source"] == "config"
        assert usage["limit_reached"] is not None and usage["limit_reason"] == reason
        errors = poll(
            lambda: [e for e in events.of(sid, "attention") if e["attention"] == "error"],
            what="the attention event",
        )
        assert errors[-1]["attention_reason"] == reason
        assert "interrupted session" in server.log_path.read_text()

        # it stopped spending: its records end
        spent = after["usage"]["tokens"]["total"]
        time.sleep(1.5)
        assert server.model(sid)["usage"]["tokens"]["total"] - spent < 100_000
        assert len(interrupts(fake_agents, pid)) == 1  # once: it is not working any more
    finally:
        events.close()


def test_with_a_viewer_connected_the_limit_does_not_apply(
    agents_server, fake_agents, project, tmp_path
):
    server = limited_server(agents_server, fake_agents, tmp_path)
    agent = server.new("claude", project)
    sid = agent["id"]
    client = start_spending(server, agent, "FAKE CLAUDE conversation")
    pid = server.model(sid)["pid"]
    poll(lambda: server.model(sid)["usage"]["tokens"]["total"] > 3 * LIMIT, timeout=20)
    time.sleep(1.0)  # several refreshes past the limit
    usage = server.model(sid)["usage"]
    assert interrupts(fake_agents, pid) == []
    assert usage["watched"] is True
    assert usage["allowance"]["tokens"]["total"] == 0  # watched: nothing unattended
    assert usage["unattended"]["tokens"]["total"] == 0
    client.stdin("\x1b")  # the person stops it
    poll(lambda: interrupts(fake_agents, pid), what="stopped by the viewer")
    client.close()


def test_a_persons_input_starts_a_fresh_allowance(agents_server, fake_agents, project, tmp_path):
    server = limited_server(agents_server, fake_agents, tmp_path)
    agent = server.new("claude", project)
    sid = agent["id"]
    client = start_spending(server, agent, "FAKE CLAUDE conversation")
    pid = server.model(sid)["pid"]
    client.close()
    poll(lambda: interrupts(fake_agents, pid), timeout=20, what="the first interrupt")
    first = server.model(sid)["usage"]
    assert first["allowance"]["tokens"]["total"] > LIMIT

    # watching again without typing: the allowance stays as it was
    client = server.ws(agent["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)
    poll(lambda: server.model(sid)["usage"]["watched"], what="watched")
    watched = server.model(sid)["usage"]
    assert watched["allowance"] == first["allowance"]
    assert watched["limit_reached"] == first["limit_reached"]

    # a person types: a fresh allowance, from then on
    client.stdin(SPEND + "\r")
    client.wait_for("spending")
    fresh = poll(
        lambda: (
            (u := server.model(sid)["usage"])["allowance"]["since"] != first["allowance"]["since"]
            and u
        ),
        what="a fresh allowance",
    )
    assert fresh["allowance"]["tokens"]["total"] == 0 and fresh["limit_reached"] is None
    # the prompt's hook: the error is over
    poll(lambda: server.model(sid)["attention"] == "working", what="working again")
    client.close()
    poll(lambda: len(interrupts(fake_agents, pid)) == 2, timeout=20, what="the second interrupt")
    second = server.model(sid)["usage"]
    assert second["limit_reached"] > fresh["allowance"]["since"]
    # counted from the input on: about the limit, not the first allowance plus more
    assert (
        LIMIT
        < second["allowance"]["tokens"]["total"]
        < first["allowance"]["tokens"]["total"] + LIMIT
    )


def test_a_session_has_its_own_limit(
    agents_server, fake_agents, project, tmp_path, capsys, monkeypatch
):
    server = limited_server(agents_server, fake_agents, tmp_path)
    shell = server.new("shell", project)
    agent = server.new("claude", project, args=["--model", "claude-sonnet-4-5-20250929"])
    sid = agent["id"]
    path = f"/api/agents/sessions/{sid}"
    for bad in ({"dollars": 1}, {"cost": -1}, {"tokens": 0.5}, "1h", [1]):
        status, body = server.request("PATCH", path, {"unattended_limit": bad})
        assert status == 400, (bad, body)
        assert "unattended_limit" in body["message"]
    status, body = server.request("PATCH", path, {"unattended_limit": {"cost": 1}, "title": "\x07"})
    assert status == 400 and server.model(sid)["usage"]["limit"] == {"tokens": LIMIT}
    status, body = server.request(
        "PATCH", f"/api/agents/sessions/{shell['id']}", {"unattended_limit": {"cost": 1}}
    )
    assert status == 400, body
    status, body = server.request("PATCH", path, {"unattended_limit": {}})  # none for it
    assert status == 200, body
    assert body["usage"]["limit"] is None and body["usage"]["limit_source"] is None

    client = start_spending(server, agent, "FAKE CLAUDE conversation")
    pid = server.model(sid)["pid"]
    client.close()
    poll(lambda: server.model(sid)["usage"]["allowance"]["tokens"]["total"] > 2 * LIMIT)
    time.sleep(0.8)
    assert interrupts(fake_agents, pid) == []

    # the CLI sets a limit of its own: acted on at the next refresh
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(server.state_dir))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["limit", sid, "--tokens", "-5"]) == 2
    capsys.readouterr()
    assert main(["limit", sid, "--cost", "0.01"]) == 0
    assert "$0.01 (its own)" in capsys.readouterr().out
    poll(lambda: interrupts(fake_agents, pid), timeout=20, what="interrupted at its own limit")
    usage = server.model(sid)["usage"]
    assert usage["limit"] == {"cost": 0.01} and usage["limit_source"] == "session"
    assert main(["limit", sid, "--default"]) == 0
    assert "AgentsApp.unattended_limit" in capsys.readouterr().out
    assert server.model(sid)["usage"]["limit_source"] == "config"


@pytest.mark.parametrize(
    ("trait", "value"),
    [
        ("unattended_limit", {"dollars": 5}),
        ("unattended_limit", {"seconds": -1}),
        ("prices", {"claude-x": {"input": 1}}),
        ("prices", {"claude-x": {"input": 1, "output": "free"}}),
    ],
)
def test_an_invalid_limit_or_price_table_stops_the_server(
    agents_server, fake_agents, tmp_path, trait, value
):
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"AgentsApp": {trait: value}}))
    with pytest.raises(RuntimeError, match="server exited early") as failed:
        agents_server(env=fake_agents.env)
    assert f"The '{trait}' trait" in str(failed.value)
    assert "invalid configuration" in str(failed.value)
