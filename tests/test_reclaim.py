"""One user's reclaiming round (``python -m jupyter_agents.clients.reclaim``'s per-user part, run
as the user the test is), on sessions a real server left detached: an agent that goes
on spending past ``AgentsApp.unattended_limit`` with no server to interrupt it is ended,
with the reason in its record; an idle shell is listed and kept when no idle limit is
set, and ended, with its reason, once one is. The hub's part (every user, deleted users)
is tests/test_hub_reclaim.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from jupyter_agents.core.store import SessionStore
from jupyter_agents.pytest_plugin import poll

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 150_000  # tokens: /spend 100 writes ~20k a record, ten records a second


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie its parent has not reaped yet has)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def reclaim(state: Path, env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    """One round over ``state`` (``--one``): its records."""
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_agents.clients.reclaim", "--one", str(state), *args],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_an_agent_past_its_limit_ends_an_idle_shell_by_policy(
    agents_server: Any, fake_agents: Any, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {"unattended_limit": {"tokens": LIMIT}}})
    )
    server = agents_server(env={**fake_agents.env, "PYTHONPATH": str(ROOT)})
    state = server.state_dir
    status, shell = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, shell
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(tmp_path)}
    )
    assert status == 201, agent
    client = server.ws(agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    client.stdin("/spend 100 0.1\r")
    client.wait_for("spending")
    server.stop()  # watched until now: the agent spends on, unwatched, with no server

    env = {**fake_agents.env, "JUPYTER_CONFIG_DIR": str(config), "LANG": "C.UTF-8"}
    # listing only (no --end), until it has spent past the limit unwatched
    listed = poll(
        lambda: [r for r in reclaim(state, env) if r["id"] == agent["id"] and r["end"]],
        what="the agent past its limit",
    )
    assert not listed[0]["ended"] and psutil.pid_exists(agent["pid"])
    records = {r["id"]: r for r in reclaim(state, env, "--end")}
    assert records[agent["id"]]["ended"], json.dumps(records[agent["id"]])
    assert records[agent["id"]]["why"].startswith("unattended limit: ")
    assert not records[shell["id"]]["end"] and records[shell["id"]]["kind"] == "shell"
    store = SessionStore(state / "sessions.db")
    try:
        ended = store.get(agent["id"])
        assert ended.status == "killed"
        assert ended.reason is not None and ended.reason.startswith("reclaimed: unattended limit")
        poll(lambda: gone(agent["pid"]), what="the agent's process gone")
        assert store.get(shell["id"]).status == "running"
    finally:
        store.close()

    # an idle limit of a second: the shell printed nothing since its prompt
    records = {r["id"]: r for r in reclaim(state, env, "--end", "--idle-timeout=1")}
    assert records[shell["id"]]["ended"] and records[shell["id"]]["why"].startswith("idle ")
    store = SessionStore(state / "sessions.db")
    try:
        assert str(store.get(shell["id"]).reason).startswith("reclaimed: idle ")
    finally:
        store.close()
    # its signal is sent; the process ends (and is reaped) a moment later
    poll(lambda: gone(shell["pid"]), what="the shell's process gone")
