"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``, pinned by ``.ci/run`` into
``/opt/jupyter-agents-cli``) through our API, offline (docs/development.md): with
``~/.claude.json`` saying onboarding is done and the project is trusted, and no API key,
it reaches its prompt, and a prompt ends in ``StopFailure`` ``authentication_failed``.
So what the fakes model is checked against the real thing: our hooks fire, the
conversation id is SessionStart's, ``/clear`` is followed, the user's own hooks still
fire; and that a conversation the CLI lost (deleted, or removed by Claude's own
retention clean-up) comes back from the archive on restore. The real Codex CLI (pinned
next to it) resumes a rollout put back the same way. Skipped, with the reason, where a
CLI is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from turn_rig import RealCli, realcli_marks
from xterm_probe import shows

from jupyter_agents.pytest_plugin import ServerProcess, TermClient, poll

#: the version .ci/run installs
CLAUDE_VERSION = "2.1.197"
CLAUDE = Path(os.environ.get("JUPYTER_AGENTS_REAL_CLAUDE", "/opt/jupyter-agents-cli/bin/claude"))


_MISSING = RealCli("Claude Code", CLAUDE, "Claude Code").missing()
pytestmark = realcli_marks(_MISSING)

#: credentials or settings of the machine that would change what the CLI does offline
_SCRUB = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
)


def spooled(server: ServerProcess, session_id: str) -> list[dict[str, Any]]:
    path = server.state_dir / "spool" / f"{session_id}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def user_hook_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def type_into(client: TermClient, text: str) -> None:
    """Type like a person: the text, then, once the TUI shows it in its input box and a
    moment later (it treats a burst as a paste, and slash commands open a menu first),
    Enter. On a loaded machine a TUI can take seconds to draw what was typed; an Enter
    sent before would find its input box empty."""
    client.stdin(text)
    client.wait_for(shows(text), timeout=60)
    time.sleep(1)
    client.stdin("\r")


def test_real_claude_through_our_api(agents_server, tmp_path, monkeypatch):
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    project = tmp_path / "proj"
    project.mkdir()
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "projects": {os.path.realpath(project): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    # the user's own hook: it must keep firing next to ours
    user_log = tmp_path / "user-hook.jsonl"
    user_hook = f"cat >> '{user_log}'; echo >> '{user_log}'"
    (home / ".claude" / "settings.json").write_text(
        json.dumps(
            {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": user_hook}]}]}}
        )
    )
    env = {
        "HOME": str(home),
        "PATH": f"{CLAUDE.parent}{os.pathsep}{os.environ['PATH']}",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    server = agents_server(env=env)
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(project)}
    )
    assert status == 201, agent
    sid, first = agent["id"], agent["conversation_id"]
    try:
        # SessionStart: through our hook (spool -> model) and the user's own
        started = poll(lambda: user_hook_runs(user_log), timeout=90, what="user's SessionStart")
        assert started[0]["hook_event_name"] == "SessionStart"
        assert started[0]["source"] == "startup"
        assert started[0]["session_id"] == first
        ours = poll(
            lambda: [r for r in spooled(server, sid) if r["event"] == "SessionStart"],
            timeout=60,
            what="our SessionStart",
        )
        assert ours[0]["conversation"] == first
        assert "prompt" not in json.dumps(ours)
        after_start = poll(  # started, asked nothing: not "needs you"
            lambda: (m := server.model(sid))["attention"] == "ready" and m,
            timeout=60,
            what="ready after SessionStart",
        )
        assert after_start["attention_source"] == "hooks"
        assert after_start["conversation_id"] == first

        client = server.ws(agent["name"])
        client.wait_for("\u276f", timeout=60)  # its prompt sign
        client.drain(1)

        # a prompt, offline and without a key: StopFailure authentication_failed
        type_into(client, "say hello")
        failed = poll(
            lambda: (m := server.model(sid))["attention"] == "error" and m,
            timeout=90,
            what="error after a prompt",
        )
        assert failed["attention_reason"] == "authentication_failed"
        events = [r["event"] for r in spooled(server, sid)]
        assert "UserPromptSubmit" in events and events[-1] == "StopFailure", events
        assert "say hello" not in (server.state_dir / "spool" / f"{sid}.jsonl").read_text()

        # /clear: a new conversation id, named by SessionStart (source clear)
        type_into(client, "/clear")
        cleared = poll(
            lambda: [r for r in user_hook_runs(user_log) if r.get("source") == "clear"],
            timeout=60,
            what="SessionStart after /clear",
        )
        second = cleared[0]["session_id"]
        assert second != first
        poll(
            lambda: server.model(sid)["conversation_id"] == second,
            timeout=60,
            what="the model to follow /clear",
        )
        again = poll(
            lambda: (m := server.model(sid))["attention"] == "ready" and m,
            timeout=60,
            what="ready after /clear",
        )
        assert again["attention_reason"] is None
        client.close()
    finally:
        server.request("DELETE", f"/api/agents/sessions/{sid}")


# -- conversations that cannot be lost (the archive, jupyter_agents/archive.py) ---------


def offline_home(tmp_path: Path, *projects: Path) -> dict[str, str]:
    """A HOME in which the real CLI reaches its prompt offline with ``projects``
    trusted; the environment a server passes to its sessions."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    trusted = {os.path.realpath(p): {"hasTrustDialogAccepted": True} for p in projects}
    (home / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True, "projects": trusted})
    )
    return {
        "HOME": str(home),
        "PATH": f"{CLAUDE.parent}{os.pathsep}{os.environ['PATH']}",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def conversation_path(home: Path, project: Path, cid: str) -> Path:
    from jupyter_agents.agents.claude import project_slug

    slug = project_slug(os.path.realpath(project))
    return home / ".claude" / "projects" / slug / f"{cid}.jsonl"


def archived_copy(state_dir: Path, sid: str) -> bytes | None:
    from jupyter_agents.agents.archive import ConversationArchive

    archive = ConversationArchive(state_dir)
    kept = archive.index(sid).kept()
    path = archive.folder(sid) / kept[0].name if kept else None
    return path.read_bytes() if path is not None and path.exists() else None


def talk_and_archive(
    server: ServerProcess, project: Path, home: Path, phrase: str
) -> tuple[dict[str, Any], Path]:
    """A real claude session in ``project`` that got ``phrase`` as a prompt; waits until
    its conversation file holds it and the archive holds the whole file."""
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(project)}
    )
    assert status == 201, agent
    client = server.ws(agent["name"])
    client.wait_for("\u276f", timeout=90)  # its prompt sign
    client.drain(1)
    type_into(client, phrase)
    path = conversation_path(home, project, agent["conversation_id"])
    poll(lambda: path.exists() and phrase in path.read_text(), timeout=60, what="the JSONL")
    client.close()
    poll(
        lambda: archived_copy(server.state_dir, agent["id"]) == path.read_bytes(),
        timeout=60,
        what="the archive to hold the conversation",
    )
    return agent, path


def reboot(server: ServerProcess, agents_server: Any, env: dict[str, str]) -> ServerProcess:
    """What a reboot leaves: no tmux, no server; the state dir intact."""
    import signal

    from jupyter_agents.pytest_plugin import kill_backends

    kill_backends(server.state_dir)
    server.stop(signal.SIGKILL)
    return agents_server(env=env, args=FAST)


def resumed_shows(server: ServerProcess, sid: str, phrase: str) -> None:
    """Restore ``sid``: the resumed CLI (after the marker line) shows ``phrase``."""
    status, after = server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and after["status"] == "running", after
    assert "--resume" in after["argv"]
    client = server.ws(after["name"])
    marker = "--- restored claude session "
    client.wait_for(shows(phrase, after=marker), timeout=90)
    client.close()
    server.request("DELETE", f"/api/agents/sessions/{sid}")


#: the archive follows quickly in tests (the default refresh is 5 s)
FAST = ["--AgentsApp.refresh_interval=0.5"]


def test_real_claude_resumes_a_deleted_conversation(agents_server, tmp_path, monkeypatch):
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "proj"
    project.mkdir()
    env = offline_home(tmp_path, project)
    server = agents_server(env=env, args=FAST)
    agent, path = talk_and_archive(server, project, Path(env["HOME"]), "purple-octopus-42")
    server = reboot(server, agents_server, env)
    path.unlink()  # the CLI's file is gone
    # without the archive, the real CLI says so and exits (checked by hand: exit 1)
    done = subprocess.run(
        [str(CLAUDE), "--resume", agent["conversation_id"], "-p", "x"],
        cwd=project,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "No conversation found with session ID" in done.stdout + done.stderr
    resumed_shows(server, agent["id"], "purple-octopus-42")
    assert path.exists()  # put back where claude reads it


#: libfaketime (Debian's faketime package)
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def fast_clock(folder: Path, speed: int = 30) -> Path | None:
    """A folder holding a ``claude`` that runs the real one on a clock ``speed`` times
    as fast (libfaketime; None where it is missing)."""
    if not FAKETIME.exists():
        return None
    folder.mkdir()
    wrapper = folder / "claude"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"LD_PRELOAD={FAKETIME} FAKETIME='+0 x{speed}' FAKETIME_NO_CACHE=1 exec {CLAUDE} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return folder


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_real_claudes_own_clean_up_is_undone(agents_server, tmp_path, monkeypatch):
    """Claude Code 2.1.197's retention clean-up (read in its bundle): 5 s after the first
    prompt of an interactive session, then every 10 min while a key was pressed in the
    last minute, at most once a day (``~/.claude/.last-cleanup``), it deletes conversation
    files not written for ``cleanupPeriodDays`` (30): over 10 minutes of its clock,
    about 20 s on the fast clock."""
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    env = offline_home(tmp_path, project, elsewhere)
    home = Path(env["HOME"])
    server = agents_server(env=env, args=FAST)
    agent, path = talk_and_archive(server, project, home, "green-walrus-17")
    # after the reboot the CLI runs on a clock 30 times as fast (libfaketime, which
    # .ci/run installs): its 10 minutes take 20 s; without it, real time
    fast = fast_clock(tmp_path / "fast-clock")
    if fast is not None:
        env = {**env, "PATH": f"{fast}{os.pathsep}{env['PATH']}"}
    server = reboot(server, agents_server, env)
    old = time.time() - 60 * 86400
    os.utime(path, (old, old))  # not written for 60 days
    (home / ".claude" / ".last-cleanup").unlink(missing_ok=True)

    # any later claude cleans up: here another session, in another folder
    other, _ = talk_and_archive(server, elsewhere, home, "hello")
    # its clean-up deletes first and writes ``.last-cleanup`` when done (the bundle's
    # order): the file gone and the marker there together say its clean-up ran
    marker = home / ".claude" / ".last-cleanup"
    poll(
        lambda: not path.exists() and marker.exists(),
        timeout=900,
        interval=5,
        what="Claude's clean-up",
    )
    server.request("DELETE", f"/api/agents/sessions/{other['id']}")
    resumed_shows(server, agent["id"], "green-walrus-17")


#: the version installed next to claude (pinned like it); its test is skipped without it
CODEX_VERSION = "0.171.0"
CODEX = CLAUDE.parent / "codex"


CODEX_CLI = RealCli("Codex", CODEX, CODEX_VERSION)
_NO_CODEX = CODEX_CLI.missing()


@pytest.mark.skipif(_NO_CODEX is not None, reason=_NO_CODEX or "")
def test_real_codex_resumes_a_deleted_rollout(agents_server, tmp_path, monkeypatch):
    """Codex 0.171 offline: with an API key saved (never checked until a turn is sent)
    it reaches its prompt, and a prompt is written to its rollout before the turn only
    reconnects. The rollout alone is what ``codex resume <id>`` needs: here its
    state_5.sqlite index and thread_history_1.sqlite go too, and it still resumes."""
    for name in ("OPENAI_API_KEY", "CODEX_HOME", "CODEX_THREAD_ID"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "proj"
    project.mkdir()
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "PATH": f"{CODEX.parent}{os.pathsep}{os.environ['PATH']}",
    }
    subprocess.run(
        [str(CODEX), "login", "--with-api-key"],
        input="sk-test-not-a-key\n",
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    server = agents_server(env=env, args=FAST)
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "codex", "cwd": str(project)}
    )
    assert status == 201, agent
    try:
        client = server.ws(agent["name"])
        client.wait_for("Ask Codex", timeout=90)
        client.drain(1)
        type_into(client, "remember amber-lynx-9")
        client.close()

        def rollout() -> Path | None:
            found = list(codex_home.glob("sessions/*/*/*/rollout-*.jsonl"))
            return found[0] if found and "amber-lynx-9" in found[0].read_text() else None

        path = poll(rollout, timeout=90, what="the rollout")
        cid = poll(lambda: server.model(agent["id"])["conversation_id"], what="codex id")
        assert path.name.endswith(f"-{cid}.jsonl")
        poll(
            lambda: archived_copy(server.state_dir, agent["id"]) == path.read_bytes(),
            timeout=60,
            what="the archive to hold the rollout",
        )
        server = reboot(server, agents_server, env)
        path.unlink()
        for index in (*codex_home.glob("state_*.sqlite*"), *codex_home.glob("thread_history_*")):
            index.unlink()
        status, after = server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")
        assert status == 200 and after["status"] == "running", after
        assert path.exists()
        client = server.ws(after["name"])
        marker = "--- restored codex session "
        client.wait_for(shows("amber-lynx-9", after=marker), timeout=90)
        client.close()
    finally:
        server.request("DELETE", f"/api/agents/sessions/{agent['id']}")
