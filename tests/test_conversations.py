"""Conversations that cannot be lost, end to end: real servers, real tmux, the fake agent
CLIs (tests/fakes/fake_agent.py, which keep their files where the real ones do and, like
Claude Code, delete conversation files older than cleanupPeriodDays).

A conversation file the CLI lost comes back from the archive before a restore resumes
it; a resume that still cannot work keeps the id and says why; conversations read as
Markdown or raw records (REST and CLI); search finds a purged conversation; prune; a full
disk under the archive."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.agents.archive import ConversationArchive
from jupyter_agents.core.store import SessionStore
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll

#: the archive follows quickly in tests (the default refresh is 5 s)
FAST = ["--AgentsApp.refresh_interval=0.3"]


def source_of(state_dir: Path, sid: str) -> Path:
    """The CLI's file of the session's (first) archived conversation."""
    (copy, *_) = ConversationArchive(state_dir).index(sid).copies
    return Path(copy.source)


def archived(state_dir: Path, sid: str, cid: str | None = None) -> bytes | None:
    """The archived copy of one conversation of a session (its current one if
    ``cid`` is None... or the first), or None."""
    archive = ConversationArchive(state_dir)
    index = archive.index(sid)
    for copy in index.kept():
        if cid is None or copy.conversation == cid:
            path = archive.folder(sid) / copy.name
            return path.read_bytes() if path.exists() else None
    return None


def wait_archived(state_dir: Path, sid: str, source: Path | None = None) -> Path:
    """Wait until the archive holds exactly what the CLI's file holds; that file."""

    def whole() -> Path | None:
        try:
            path = source or source_of(state_dir, sid)
        except ValueError:
            return None
        data = archived(state_dir, sid)
        return path if data is not None and path.exists() and data == path.read_bytes() else None

    return poll(whole, timeout=30, what=f"the archive to catch up with {sid}")


def reboot(server: ServerProcess, agents_server: Any, env: dict[str, str]) -> ServerProcess:
    """What a reboot leaves: no tmux, no server; the state dir intact."""
    kill_backends(server.state_dir)
    server.stop(signal.SIGKILL)
    return agents_server(env=env, args=FAST)


def restored_screen(server: ServerProcess, name: str, kind: str, expect: str) -> str:
    """The restored terminal's text once ``expect`` shows after the marker line."""
    client = server.ws(name)
    marker = f"--- restored {kind} session "
    client.wait_for(
        lambda c: marker in c.text and expect in c.text[c.text.index(marker) :], timeout=30
    )
    client.close()
    return client.text


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def test_a_deleted_claude_conversation_comes_back_and_resumes(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "remember-purple-octopus", "claude heard: remember-purple")
    source = wait_archived(server.state_dir, agent["id"])
    kept = source.read_bytes()
    assert source.name == f"{agent['conversation_id']}.jsonl"

    server = reboot(server, agents_server, fake_agents.env)
    source.unlink()  # e.g. ~/.claude/projects cleaned by hand
    status, after = server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")
    assert status == 200 and after["status"] == "running", after
    assert after["argv"][1:3] == ["--resume", agent["conversation_id"]]
    assert source.read_bytes() == kept  # put back exactly where claude reads it
    text = restored_screen(server, after["name"], "claude", "resumed prompt: remember-purple")
    assert text.count("FAKE CLAUDE conversation") >= 1


def test_claudes_own_clean_up_is_undone_on_restore(agents_server, fake_agents, project, tmp_path):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "before-the-clean-up", "claude heard: before-the-clean-up")
    source = wait_archived(server.state_dir, agent["id"])

    server = reboot(server, agents_server, fake_agents.env)
    old = time.time() - 60 * 86400  # not written for 60 days (cleanupPeriodDays: 30)
    os.utime(source, (old, old))
    # another claude, elsewhere, runs Claude's clean-up at its first prompt
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = server.new("claude", elsewhere)
    server.type_line(other["name"], "hello", "claude heard: hello")
    cleaned = poll(lambda: fake_agents.records("cleanup"), what="Claude's clean-up")
    assert cleaned[0]["path"] == str(source) and not source.exists()

    status, after = server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")
    assert status == 200 and after["status"] == "running", after
    restored_screen(server, after["name"], "claude", "resumed prompt: before-the-clean-up")
    assert server.model(agent["id"])["conversation_id"] == agent["conversation_id"]


def test_every_conversation_a_session_had_is_kept(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    first = agent["conversation_id"]
    server.type_line(agent["name"], "before-clear", "claude heard: before-clear")
    server.type_line(agent["name"], "/clear", "cleared; conversation")
    server.type_line(agent["name"], "after-clear", "claude heard: after-clear")
    second = poll(
        lambda: (cid := server.model(agent["id"])["conversation_id"]) != first and cid,
        what="the id to follow /clear",
    )
    archive = ConversationArchive(server.state_dir)
    poll(
        lambda: (
            [c.conversation for c in archive.index(agent["id"]).kept()] == [first, second]
            and all(
                (archive.folder(agent["id"]) / c.name).read_bytes() == Path(c.source).read_bytes()
                for c in archive.index(agent["id"]).kept()
            )
        ),
        what="both conversations archived",
    )
    for copy in archive.index(agent["id"]).kept():
        Path(copy.source).unlink()  # both of Claude's files go
    status, md = server.request("GET", f"/api/agents/sessions/{agent['id']}/conversation")
    assert status == 200
    text = md.decode()
    assert text.index(f"## Conversation `{first}`") < text.index("> before-clear")
    assert text.index("> before-clear") < text.index(f"## Conversation `{second}`")
    assert text.index(f"## Conversation `{second}`") < text.index("> after-clear")
    assert text.count("*From archived copy") == 2


def test_a_clear_seen_first_by_its_hook_keeps_the_conversation_it_left(
    agents_state_dir: Path, fake_agents: Any, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/clear`` reaches the server two ways: the SessionStart hook (pushed) and the
    periodic check of conversation ids. Whichever comes first, the conversation left
    is kept. Here the hook's, with no periodic check at all: before the fix the first
    conversation was never archived (half the runs of the test above lost it)."""
    from jupyter_agents.agents.spool import read_spool, spool_path
    from jupyter_agents.config import open_sessions
    from jupyter_agents.sessions.send import send

    for key, value in fake_agents.env.items():
        monkeypatch.setenv(key, value)
    service = open_sessions(str(agents_state_dir))
    try:
        session, _ = service.create(cwd=str(project), kind="claude", strict=True)
        first = session.conversation_id
        kind = service.kinds["claude"]
        send(service, session, "before-clear")
        poll(lambda: kind.conversation_file(session, first) is not None, what="its file")
        spool = spool_path(agents_state_dir, session.id)

        def new_start() -> str | None:
            records = read_spool(spool, 0)[0]
            return next(
                (
                    r["conversation"]
                    for r in records
                    if r["event"] == "SessionStart" and r.get("conversation") != first
                ),
                None,
            )

        send(service, session, "/clear")
        second = poll(new_start, what="the SessionStart of /clear spooled")
        service.refresh.apply_attention()  # the hook's wake; no follow_conversations here
        assert service.get(session.id).conversation_id == second
        send(service, session, "after-clear")
        poll(lambda: kind.conversation_file(session, second) is not None, what="its new file")
        service.refresh.archive_conversations()
        kept = [c.conversation for c in service.archive.index(session.id).kept()]
        assert kept == [first, second], kept
    finally:
        service.close()
        kill_backends(agents_state_dir)


def test_a_deleted_codex_rollout_comes_back_and_resumes(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    coder = server.new("codex", project)
    server.type_line(coder["name"], "hello-codex-archive", "codex heard: hello-codex-archive")
    cid = poll(lambda: server.model(coder["id"])["conversation_id"], what="codex id")
    source = wait_archived(server.state_dir, coder["id"])
    assert source.name.endswith(f"-{cid}.jsonl") and "sessions" in source.parts

    server = reboot(server, agents_server, fake_agents.env)
    source.unlink()
    status, after = server.request("POST", f"/api/agents/sessions/{coder['id']}/restore")
    assert status == 200 and after["status"] == "running", after
    assert source.exists()
    restored_screen(server, after["name"], "codex", "resumed prompt: hello-codex-archive")
    assert fake_agents.records("error") == []


def test_a_resume_that_cannot_work_keeps_the_id_and_says_why(
    agents_server, fake_agents, project, tmp_path
):
    # an archive so small that a newer session's conversation pushes the first one out
    args = [*FAST, "--AgentsApp.conversation_archive_max_bytes=6000"]
    server = agents_server(env=fake_agents.env, args=args)
    first = server.new("claude", project)
    server.type_line(first["name"], "lost-forever", "claude heard: lost-forever")
    source = wait_archived(server.state_dir, first["id"])
    assert server.request("DELETE", f"/api/agents/sessions/{first['id']}")[0] == 204
    second = server.new("claude", project)
    server.type_line(second["name"], "/bulk 4", "bulk wrote 4 records")
    poll(
        lambda: ConversationArchive(server.state_dir).index(first["id"]).copies[0].dropped,
        what="the first copy dropped for room",
    )

    kill_backends(server.state_dir)
    server.stop(signal.SIGKILL)
    server = agents_server(env=fake_agents.env, args=FAST)
    source.unlink()  # and Claude's own file is gone too: no copy anywhere
    runs = len(fake_agents.records("start"))
    status, after = server.request("POST", f"/api/agents/sessions/{first['id']}/restore")
    assert status == 200, after
    cid = first["conversation_id"]
    assert after["status"] == "interrupted"
    assert after["conversation_id"] == cid  # never forgotten
    assert f"No conversation found with session ID: {cid}" in after["reason"]  # the CLI's
    # it was asked to resume that id, and no new conversation started under the record
    assert after["argv"][1:3] == ["--resume", cid]
    assert len(fake_agents.records("start")) == runs
    assert not source.exists()
    assert server.model(first["id"])["status"] == "interrupted"

    # what the user is offered: a fresh session in the same folder, the old tail first
    status, fresh = server.request("POST", f"/api/agents/sessions/{first['id']}/fresh")
    assert status == 201, fresh
    assert (fresh["kind"], fresh["cwd"], fresh["status"]) == ("claude", str(project), "running")
    assert fresh["id"] != first["id"] and fresh["conversation_id"] not in (None, cid)
    client = server.ws(fresh["name"])
    marker = f"--- new claude session; above: the end of session {first['id']}"
    client.wait_for(f"FAKE CLAUDE conversation {fresh['conversation_id']}")
    assert client.text.index("lost-forever") < client.text.index(marker)
    client.close()
    old = server.model(first["id"])  # the old record is as it was
    assert (old["status"], old["conversation_id"]) == ("interrupted", cid)
    assert "No conversation found" in old["reason"]
    assert server.request("POST", f"/api/agents/sessions/{fresh['id']}/fresh")[0] == 409
    assert server.request("POST", "/api/agents/sessions/nope/fresh")[0] == 404


def test_markdown_and_raw_records_of_a_conversation(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    coder = server.new("codex", project)
    shell = server.new("shell", project)
    silent = server.new("claude", project)
    server.type_line(agent["name"], "list the files please", "claude heard: list the files")
    server.type_line(coder["name"], "and codex too", "codex heard: and codex too")
    source = wait_archived(server.state_dir, agent["id"])

    status, md = server.request("GET", f"/api/agents/sessions/{agent['id']}/conversation")
    assert status == 200
    text = md.decode()
    assert text.startswith(f"# claude session {agent['name']} ({agent['id']})")
    assert f"## Conversation `{agent['conversation_id']}`" in text
    assert re.search(r"\*\*User\*\* · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n\n> list the files", text)
    assert "**Tool call** `Bash`: `echo fake` (a fake tool call)" in text
    assert "**Tool result**: `fake`" in text
    assert re.search(r"\*\*Assistant\*\* · [^\n]+UTC\n\nclaude heard: list the files please", text)
    status, raw = server.request(
        "GET", f"/api/agents/sessions/{agent['id']}/conversation?format=jsonl"
    )
    assert status == 200 and raw == source.read_bytes()

    status, md = server.request("GET", f"/api/agents/sessions/{coder['id']}/conversation")
    assert status == 200
    text = md.decode()
    assert "> and codex too" in text
    assert "**Tool call** `shell`: `echo fake`" in text and "**Tool result**: `fake`" in text
    assert "codex heard: and codex too" in text

    for path, code, message in [
        (f"{agent['id']}/conversation?format=pdf", 400, "unknown format"),
        (f"{shell['id']}/conversation", 400, "is a shell session"),
        (f"{silent['id']}/conversation", 404, "no conversation file"),
        ("nope/conversation", 404, "nope"),
    ]:
        status, body = server.request("GET", f"/api/agents/sessions/{path}")
        assert status == code and message in body["message"], (path, status, body)


def test_a_damaged_conversation_is_archived_as_is_and_exported_as_far_as_it_parses(
    agents_server, fake_agents, project
):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "first-turn", "claude heard: first-turn")
    source = wait_archived(server.state_dir, agent["id"])
    with source.open("ab") as f:
        f.write(b"\xff\xfe{this is not json\n")
    server.type_line(agent["name"], "second-turn", "claude heard: second-turn")
    with source.open("ab") as f:
        f.write(b'{"type": "user", "message": {"role": "user", "content": "cut of')  # mid-write
    wait_archived(server.state_dir, agent["id"], source)  # byte for byte

    status, md = server.request("GET", f"/api/agents/sessions/{agent['id']}/conversation")
    assert status == 200
    text = md.decode()
    assert "> first-turn" in text and "> second-turn" in text
    assert text.count("is not JSON") == 2
    status, raw = server.request(
        "GET", f"/api/agents/sessions/{agent['id']}/conversation?format=jsonl"
    )
    assert status == 200 and raw == source.read_bytes()


def test_search_finds_a_purged_conversation(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "needle-in-the-archive", "claude heard: needle-in")
    source = wait_archived(server.state_dir, agent["id"])
    assert server.request("DELETE", f"/api/agents/sessions/{agent['id']}")[0] == 204
    source.unlink()
    status, page = server.request("GET", "/api/agents/search?q=needle-in-the-archive&kind=claude")
    assert status == 200, page
    found = [h for h in page["hits"] if h["source"] == "conversation"]
    assert found, page
    assert all(h["session"] == agent["id"] for h in found)
    assert Path(found[0]["file"]).is_relative_to(server.state_dir / "conversations")
    assert "needle-in-the-archive" in found[0]["line"]


def cli(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_agents.clients.cli", *args, "--state-dir", str(state_dir)],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_cli_conversation_and_prune(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    shell = server.new("shell", project)
    running = server.new("shell", project)
    server.type_line(agent["name"], "cli-prompt", "claude heard: cli-prompt")
    source = wait_archived(server.state_dir, agent["id"])
    state = server.state_dir

    done = cli(state, "conversation", agent["id"], env=fake_agents.env)
    assert done.returncode == 0, done.stderr
    assert b"> cli-prompt" in done.stdout and b"**Tool call** `Bash`" in done.stdout
    done = cli(state, "conversation", agent["id"], "--format", "jsonl", env=fake_agents.env)
    assert done.returncode == 0 and done.stdout == source.read_bytes()
    done = cli(state, "conversation", shell["id"])
    assert done.returncode == 2 and b"is a shell session" in done.stderr
    assert cli(state, "conversation", "nope").returncode == 3

    for s in (agent, shell):
        assert server.request("DELETE", f"/api/agents/sessions/{s['id']}")[0] == 204
    store = SessionStore(state / "sessions.db")
    for s in (agent, shell, running):  # all last active long ago; one still runs
        store.update(s["id"], last_activity="2020-01-01T00:00:00Z")
    store.close()
    transcript = state / "transcripts" / agent["id"]
    assert transcript.is_dir() and (state / "conversations" / agent["id"]).is_dir()

    done = cli(state, "prune", "--older-than", "90d")
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert agent["id"] in out and shell["id"] in out and running["id"] not in out
    assert "nothing removed" in out and transcript.is_dir()  # a dry run
    for bad in (["--older-than", "yesterday"], ["--older-than", "-3d"], []):
        done = cli(state, "prune", *bad)
        assert done.returncode == 2, (bad, done)
        assert b"older-than" in done.stderr

    done = cli(state, "prune", "--older-than", "90d", "--yes")
    assert done.returncode == 0, done.stderr
    assert "removed 2 sessions" in done.stdout.decode()
    ids = {s["id"] for s in server.request("GET", "/api/agents/sessions")[1]}
    assert ids == {running["id"]}  # the running one stays, however old
    assert not transcript.exists() and not (state / "conversations" / agent["id"]).exists()
    assert source.exists()  # the CLI's own files are the CLI's
    assert server.model(running["id"])["status"] == "running"


@pytest.fixture
def small_archive(agents_state_dir: Path) -> Any:
    """A real 1 MiB filesystem (tmpfs) under the state dir's conversation archive."""
    mount = agents_state_dir / "conversations"
    mount.mkdir(parents=True)
    os.chmod(agents_state_dir, 0o700)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_pauses_the_archive_not_the_session(
    agents_server, fake_agents, project, small_archive
):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "/bulk 1500", "bulk wrote 1500 records")  # ~1.4 MB
    poll(lambda: "archive paused" in server.log_path.read_text(), what="the archive to pause")
    server.type_line(agent["name"], "still-alive", "claude heard: still-alive")  # it runs on
    time.sleep(1.5)  # several more refreshes, all failing for want of space
    assert server.model(agent["id"])["status"] == "running"

    subprocess.run(["mount", "-o", "remount,size=8m", str(small_archive)], check=True)
    source = wait_archived(server.state_dir, agent["id"])
    assert b"still-alive" in archived(server.state_dir, agent["id"]) == source.read_bytes()
    log = server.log_path.read_text()
    assert log.count("conversation archive paused") == 1, log[-3000:]
    assert "conversation archive resumed" in log
    status, md = server.request("GET", f"/api/agents/sessions/{agent['id']}/conversation")
    assert status == 200 and "still-alive" in md.decode()


def test_the_archive_is_private(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "private-words", "claude heard: private-words")
    wait_archived(server.state_dir, agent["id"])
    root = server.state_dir / "conversations"
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
