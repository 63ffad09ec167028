"""``jupyter agents prune`` against a real server: a session of each kind, started,
ended and pruned, leaves no file of its own in the state dir (its record, transcript,
spool, prelude, and what its kind keeps: Claude's settings, Gemini's and Qwen's system
defaults, OpenCode's plugin records). Each kind's CLI is tests/fakes/idle_cli.py:
what is tested is what our launch writes, not what the CLI does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.core.store import SessionStore
from jupyter_agents.pytest_plugin import poll

IDLE = Path(__file__).parent / "fakes" / "idle_cli.py"
CLIS = {"claude", "codex", "gemini", "copilot", "qwen", "opencode"}


@pytest.fixture
def idle_clis(tmp_path: Path) -> dict[str, str]:
    """A PATH where every agent CLI is the idle one, and a HOME of its own."""
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    home.mkdir()
    for name in CLIS:
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{IDLE}" {name} "$@"\n')
        script.chmod(0o755)
    import os

    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}


def prune(state: Path) -> str:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "jupyter_agents.clients.cli", "prune"),
            *("--older-than", "90d", "--yes", "--state-dir", str(state)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("kind", ["shell", *sorted(CLIS)])
def test_a_pruned_session_leaves_no_file_of_its_own(
    agents_server: Any, idle_clis: dict[str, str], tmp_path: Path, kind: str
) -> None:
    server = agents_server(env=idle_clis)
    state = server.state_dir
    session = server.new(kind, tmp_path)
    sid = session["id"]

    def own() -> list[str]:
        return sorted(str(p.relative_to(state)) for p in state.rglob("*") if sid in p.name)

    if kind != "shell":
        server.ws(session["name"]).wait_for(f"IDLE {kind} ready")
    if kind == "opencode":  # the plugin's record folder, as OpenCode's plugin makes it
        poll(lambda: f"opencode/{sid}" in own(), what="the plugin's record folder")
    made = own()
    assert made, "the session made no file of its own"
    assert server.request("DELETE", f"/api/agents/sessions/{sid}")[0] == 204
    poll(lambda: server.model(sid)["status"] == "killed", what="the kill")
    store = SessionStore(state / "sessions.db")
    store.update(sid, last_activity="2020-01-01T00:00:00Z")
    store.close()
    said = prune(state)
    assert "removed 1 session" in said, said
    assert own() == [], f"left after prune (of {made}): {own()}"


def test_an_environment_never_read_goes_when_its_session_ends_or_is_pruned(
    agents_server: Any, tmp_path: Path
) -> None:
    """tmux hands a session's environment (secrets included) to its first process in a
    private file that process deletes as it starts. A session ended before it got there
    (the hunt of e01534f killed a shell that quickly on a loaded machine) left the file
    for ever; now the end of the session removes it, and prune removes one a vanished
    tmux server left."""
    server = agents_server()
    state = server.state_dir
    session = server.new("shell", tmp_path)
    env = state / "tmux" / f"env-{session['id']}"
    poll(lambda: not env.exists(), what="its first process to read and delete the file")
    env.write_text("SECRET=never-read\n")  # as if that process had not got there yet
    assert server.request("DELETE", f"/api/agents/sessions/{session['id']}")[0] == 204
    poll(lambda: server.model(session["id"])["status"] == "killed", what="the kill")
    assert not env.exists()
    env.write_text("SECRET=never-read\n")  # as if its tmux server had ended first
    store = SessionStore(state / "sessions.db")
    store.update(session["id"], last_activity="2020-01-01T00:00:00Z")
    store.close()
    assert "removed 1 session" in prune(state)
    assert not env.exists()
