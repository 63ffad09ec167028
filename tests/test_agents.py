"""Agent sessions end to end: real server subprocesses, real tmux, fake agent CLIs
(tests/fakes/fake_agent.py) that keep their files where the real ones do."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from xterm_probe import render

from jupyter_agents.agents.base import is_uuid
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll, transcript_bytes


def sessions(server: ServerProcess) -> dict[str, dict[str, Any]]:
    status, body = server.request("GET", "/api/agents/sessions")
    assert status == 200
    return {s["id"]: s for s in body}


def without_reporting(argv: list[str]) -> list[str]:
    """A launch argv without the attention reporting we add (claude ``--settings F``,
    codex ``-c notify=[...] --no-daemon``), which test_attention.py checks."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--settings", "-c"):
            skip = True
        elif arg != "--no-daemon":
            out.append(arg)
    return out


def starts_by_pid(fake_agents: Any) -> dict[int, dict[str, Any]]:
    return {r["pid"]: r for r in fake_agents.records("start")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def test_parallel_sessions_get_exact_distinct_ids(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    claudes = [server.new("claude", project) for _ in range(5)]
    codexes = [server.new("codex", project) for _ in range(3)]
    # claude's id is assigned at launch: known in the POST answer already
    assert all(is_uuid(c["conversation_id"]) for c in claudes)
    assert all(c["argv"][:2] == ["claude", "--session-id"] for c in claudes)
    started = poll(
        lambda: len(starts_by_pid(fake_agents)) == 8 and starts_by_pid(fake_agents),
        what="8 agents started",
    )
    # codex's id is captured after launch, from the thread lock its process holds
    models = poll(
        lambda: all(s["conversation_id"] for s in sessions(server).values()) and sessions(server),
        what="codex ids captured",
    )
    for made in claudes + codexes:
        model = models[made["id"]]
        assert model["conversation_id"] == started[model["pid"]]["id"], model
        assert started[model["pid"]]["cwd"] == str(project)
    ids = [m["conversation_id"] for m in models.values()]
    assert len(set(ids)) == 8

    # /clear rotates claude's id: the session follows it, the others keep theirs
    target = claudes[2]
    server.type_line(target["name"], "/clear", "cleared; conversation")
    cleared = [r for r in fake_agents.records("clear") if r["pid"] == models[target["id"]]["pid"]]
    assert len(cleared) == 1
    after = poll(
        lambda: (
            sessions(server)[target["id"]]["conversation_id"] == cleared[0]["id"]
            and sessions(server)
        ),
        what="id to follow /clear",
    )
    assert {sid: m["conversation_id"] for sid, m in after.items() if sid != target["id"]} == {
        sid: m["conversation_id"] for sid, m in models.items() if sid != target["id"]
    }

    # codex /new starts another thread: followed through the lock too
    target = codexes[1]
    server.type_line(target["name"], "/new", "new thread")
    renewed = [r for r in fake_agents.records("new") if r["pid"] == models[target["id"]]["pid"]]
    poll(
        lambda: sessions(server)[target["id"]]["conversation_id"] == renewed[0]["id"],
        what="id to follow codex /new",
    )


def test_codex_id_from_rollout_when_no_lock_is_visible(agents_server, fake_agents, project):
    server = agents_server(env={**fake_agents.env, "FAKE_CODEX_NO_LOCK": "1"})
    first = server.new("codex", project)
    one = poll(lambda: sessions(server)[first["id"]]["conversation_id"], what="first id")
    second = server.new("codex", project)
    two = poll(lambda: sessions(server)[second["id"]]["conversation_id"], what="second id")
    started = starts_by_pid(fake_agents)
    assert one == started[first["pid"]]["id"]
    assert two == started[second["pid"]]["id"]
    assert one != two


def reboot(server: ServerProcess, agents_server: Any, env: dict[str, str]) -> ServerProcess:
    """What a reboot leaves: no tmux, no server; the state dir intact."""
    kill_backends(server.state_dir)
    server.stop(signal.SIGKILL)
    return agents_server(env=env)


def test_reboot_then_restore_all(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    talked = server.new("claude", project)
    server.type_line(talked["name"], "hello-from-A", "claude heard: hello-from-A")
    silent = server.new("claude", project, args=["--model", "opus"])
    coder = server.new("codex", project)
    server.type_line(coder["name"], "hello-codex", "codex heard: hello-codex")
    shell = server.new("shell", project)
    server.type_line(shell["name"], "echo shell-was-$((6*7))", "shell-was-42")
    before = poll(
        lambda: sessions(server)[coder["id"]]["conversation_id"] and sessions(server),
        what="codex id",
    )
    runs_before = len(fake_agents.records("start"))

    server = reboot(server, agents_server, fake_agents.env)
    after = sessions(server)
    assert {after[s["id"]]["status"] for s in (talked, silent, coder, shell)} == {"interrupted"}

    status, result = server.request("POST", "/api/agents/restore", {})
    assert status == 200, result
    assert result["failed"] == []
    restored = {m["id"]: m for m in result["restored"]}
    assert set(restored) == {talked["id"], silent["id"], coder["id"], shell["id"]}
    assert all(m["status"] == "running" for m in restored.values()), restored

    runs = starts_by_pid(fake_agents)
    assert len(fake_agents.records("start")) == runs_before + 3
    cid = {sid: before[sid]["conversation_id"] for sid in before}
    expected = {
        talked["id"]: ["--resume", cid[talked["id"]]],  # a message was sent
        silent["id"]: ["--session-id", cid[silent["id"]], "--model", "opus"],  # none was
        coder["id"]: ["resume", cid[coder["id"]]],
    }
    for sid, argv in expected.items():
        run = runs[restored[sid]["pid"]]
        assert without_reporting(run["argv"]) == argv
        assert run["cwd"] == str(project)
        assert restored[sid]["conversation_id"] == cid[sid]
        assert not restored[sid]["ambiguous"]

    # the restored screen: old transcript tail, then the marker line, then the new run
    client = server.ws(restored[talked["id"]]["name"])
    marker = f"--- restored claude session {cid[talked['id']]} (previous run ended "
    client.wait_for(marker)
    client.wait_for(lambda c: c.text.count("FAKE CLAUDE conversation") >= 2)
    text = client.text
    assert text.index("claude heard: hello-from-A") < text.index(marker)
    assert text.index(marker) < text.rindex("FAKE CLAUDE conversation")
    client.close()
    shell_client = server.ws(restored[shell["id"]]["name"])
    shell_client.wait_for(f"--- restored shell session {shell['id']}")
    shell_client.stdin("echo fresh-$((5*5))\r")
    shell_client.wait_for("fresh-25")
    assert shell_client.text.index("shell-was-42") < shell_client.text.index("--- restored")
    shell_client.close()
    # a tab that watched through the reboot got these bytes as they came: rendered by
    # the browser's engine, the replayed lines stay above the marker (the replay's end
    # once moved the cursor home and the marker overwrote the second line)
    screen = render([[transcript_bytes(server.state_dir, shell["id"])]], styles=False)[0]
    rows = [i for i, line in enumerate(screen["lines"]) if "shell-was-42" in line]
    marker = [i for i, line in enumerate(screen["lines"]) if "--- restored shell" in line]
    assert rows and marker and max(rows) < marker[0], screen["lines"]
    # the restored agents are terminals like any other
    status, terms = server.request("GET", "/api/terminals")
    assert {t["name"] for t in terms} == {m["name"] for m in restored.values()}


def test_restore_refuses_live_sessions_and_runs_once(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    status, body = server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")
    assert status == 409 and "running" in body["message"]

    server = reboot(server, agents_server, fake_agents.env)
    runs_before = len(fake_agents.records("start"))
    results: list[int] = []

    def restore() -> None:
        results.append(server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")[0])

    threads = [threading.Thread(target=restore) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200, 409]
    time.sleep(1)
    assert len(fake_agents.records("start")) == runs_before + 1
    status, body = server.request("POST", "/api/agents/restore", {})
    assert body == {"restored": [], "failed": []}


def test_failed_resume_keeps_the_id_and_says_why(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    coder = server.new("codex", project)
    cid = poll(lambda: sessions(server)[coder["id"]]["conversation_id"], what="codex id")
    server = reboot(server, agents_server, fake_agents.env)
    for rollout in (fake_agents.home / ".codex" / "sessions").rglob("*.jsonl"):
        rollout.unlink()  # its conversation is gone: the CLI's file and the archive's copy
    shutil.rmtree(server.state_dir / "conversations" / coder["id"], ignore_errors=True)
    status, model = server.request("POST", f"/api/agents/sessions/{coder['id']}/restore")
    assert status == 200
    assert model["status"] == "interrupted"  # it can be restored again once fixed
    assert model["exit_code"] == 1
    assert "resume failed" in model["reason"] and cid in model["reason"]
    assert f"No saved session found with ID {cid}" in model["reason"]  # the CLI's words
    assert model["conversation_id"] == cid
    assert fake_agents.records("error")[-1]["message"] == f"No saved session found with ID {cid}"


def test_an_agent_whose_conversation_holds_no_message_restores_fresh(
    agents_server, fake_agents, project
):
    """Claude Code writes a conversation's title and mode before its first message; a
    reboot before any message leaves a file `claude --resume` refuses ("No conversation
    found"). The restore starts a new conversation in its folder with its launch args,
    running, and says so; nothing is resumed (issue 54, item 11)."""
    from jupyter_agents.agents.claude import project_slug

    server = agents_server(env=fake_agents.env)
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(project), "args": ["--x"]}
    )
    assert status == 201, agent
    cid = agent["conversation_id"]
    path = fake_agents.home / ".claude" / "projects" / project_slug(str(project)) / f"{cid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    heads = [{"type": "ai-title", "title": "x", "sessionId": cid}, {"type": "mode", "mode": "x"}]
    path.write_text("".join(json.dumps(h) + "\n" for h in heads))
    server = reboot(server, agents_server, fake_agents.env)
    status, model = server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")
    assert status == 200, model
    assert model["status"] == "running", model
    assert model["reason"].startswith("started fresh: its claude conversation held no message")
    assert model["conversation_id"] != cid and is_uuid(model["conversation_id"])
    argv = fake_agents.records("start")[-1]["argv"]
    assert "--resume" not in argv and "--x" in argv, argv
    assert model["conversation_id"] in argv
    poll(
        lambda: b"held no message" in transcript_bytes(server.state_dir, agent["id"]),
        what="the terminal to say so",
    )


def test_agents_never_see_the_servers_agent_markers(agents_server, fake_agents, project):
    env = {
        **fake_agents.env,
        "CLAUDECODE": "1",
        "CLAUDE_CODE_CHILD_SESSION": "1",
        "CODEX_THREAD_ID": "x",
        "CLAUDE_CODE_USE_BEDROCK": "1",
    }
    server = agents_server(env=env)
    server.new("claude", project)
    server.new("codex", project)
    runs = poll(lambda: len(fake_agents.records("start")) == 2 and fake_agents.records("start"))
    for run in runs:
        seen = run["env"]
        assert "CLAUDECODE" not in seen
        assert "CLAUDE_CODE_CHILD_SESSION" not in seen
        assert "CODEX_THREAD_ID" not in seen
        assert seen["CLAUDE_CODE_USE_BEDROCK"] == "1"


def test_bad_input_is_refused_and_nothing_runs(agents_server, fake_agents, project, tmp_path):
    server = agents_server(env=fake_agents.env)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    pwned = tmp_path / "pwned"
    bad: list[tuple[Any, str]] = [
        ({"kind": "nope"}, "unknown session kind"),
        ({"kind": "claude", "cwd": str(tmp_path / "missing")}, "not an existing directory"),
        ({"kind": "claude", "cwd": str(a_file)}, "not an existing directory"),
        ({"kind": "claude", "args": f"--model x; touch {pwned}"}, "not a command line"),
        ({"kind": "claude", "args": [f"; touch {pwned}"]}, "shell syntax"),
        ({"kind": "codex", "args": [f"$(touch {pwned})"]}, "shell syntax"),
        ({"kind": "claude", "args": [f"`touch {pwned}`"]}, "shell syntax"),
        ({"kind": "claude", "args": ["a\nb"]}, "control characters"),
        ({"kind": "claude", "args": [1]}, "must be strings"),
        ({"kind": "claude", "args": ["--resume", "x"]}, "restore its session"),
        ({"kind": "codex", "args": ["resume", "--last"]}, "restore its session"),
        ({"kind": "claude", "name": "../x"}, "invalid terminal name"),
        ({"kind": "claude", "cwd": 7}, "cwd must be a string"),
        ({"kind": "claude", "bogus": 1}, "unknown fields"),
        ([1, 2], "must be a JSON object"),
    ]
    for body, message in bad:
        status, answer = server.request("POST", "/api/agents/sessions", body)
        assert status == 400, (body, status, answer)
        assert message in answer["message"], (body, answer)
    status, answer = server.request("POST", "/api/agents/sessions", b"{not json")
    assert status == 400
    assert sessions(server) == {}
    assert fake_agents.records() == []
    assert not pwned.exists()

    for method, path in [
        ("GET", "/api/agents/sessions/nope"),
        ("DELETE", "/api/agents/sessions/nope"),
        ("GET", "/api/agents/sessions/nope/log"),
        ("POST", "/api/agents/sessions/nope/restore"),
    ]:
        status, answer = server.request(method, path)
        assert status == 404 and "nope" in answer["message"], (method, path, answer)
    status, _ = server.request("GET", "/api/agents/sessions/..%2F..%2Fetc/log")
    assert status == 404


def test_log_serves_transcript_bytes(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    shell = server.new("shell", project)
    server.type_line(shell["name"], "echo log-$((7*6))-end", "log-42-end")
    path = f"/api/agents/sessions/{shell['id']}/log"
    transcript = transcript_bytes(server.state_dir, shell["id"])
    import urllib.request

    def get(query: str = "", headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
        req = urllib.request.Request(server.base + path + query, headers=headers or {})
        req.add_header("Authorization", "token test-token-not-secret")
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    status, body, headers = get()
    assert status == 200 and b"log-42-end" in body
    assert body == transcript[: len(body)]
    assert int(headers["X-Transcript-Size"]) >= len(transcript)
    status, body, _ = get("?offset=3&length=5")
    assert (status, body) == (200, transcript[3:8])
    status, body, headers = get(headers={"Range": "bytes=-4"})
    assert status == 206 and len(body) == 4
    assert headers["Content-Range"].startswith("bytes ")
    for query, code, message in [
        ("?offset=-1", 400, b"whole number"),
        ("?length=-5", 400, b"whole number"),
        ("?offset=abc", 400, b"whole number"),
        (f"?offset={10**9}", 416, b"past the end"),
    ]:
        status, body, _ = get(query)
        assert status == code and message in body, (query, status, body)
    status, body, _ = get(headers={"Range": f"bytes={10**9}-"})
    assert status == 416
    status, body, _ = get(headers={"Range": "lines=1-2"})
    assert status == 400 and json.loads(body)["message"].startswith("unsupported Range")


def test_delete_ends_an_agent_and_keeps_its_record(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    poll(lambda: fake_agents.records("start"), what="agent start")
    status, _ = server.request("DELETE", f"/api/agents/sessions/{agent['id']}")
    assert status == 204
    model = sessions(server)[agent["id"]]
    assert model["status"] == "killed"
    assert model["conversation_id"] == agent["conversation_id"]
    status, terms = server.request("GET", "/api/terminals")
    assert terms == []
    status, body = server.request("DELETE", f"/api/agents/sessions/{agent['id']}")
    assert status == 409 and "killed" in body["message"]
    # the pid map is gone: claude ended (it removes it on exit)
    assert not list((fake_agents.home / ".claude" / "sessions").glob("*.json"))


def test_restore_on_start_resumes_agents_not_shells(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    shell = server.new("shell", project)
    kill_backends(server.state_dir)
    server.stop(signal.SIGKILL)
    server = agents_server(env=fake_agents.env, args=["--AgentsApp.restore_on_start=agents"])
    # restored before the first request was served
    models = sessions(server)
    assert models[agent["id"]]["status"] == "running"
    assert models[shell["id"]]["status"] == "interrupted"
    run = poll(lambda: starts_by_pid(fake_agents).get(models[agent["id"]]["pid"]))
    assert without_reporting(run["argv"]) == ["--session-id", agent["conversation_id"]]
    assert run["argv"][-2] == "--settings"


def test_a_kind_whose_cli_is_missing_says_so_and_starts_nothing(
    agents_server, fake_agents, project
):
    """No ``codex`` on the PATH sessions get: the kinds list says so, with what was looked
    for and how to install it; starting one is a 409 naming it, and nothing starts
    (before, a plain shell took its place); an interrupted codex session is not
    restored either, and its record says why."""
    (fake_agents.bin / "codex").unlink()
    server = agents_server(env=fake_agents.env)
    kinds = {k["name"]: k for k in server.request("GET", "/api/agents/kinds")[1]}
    assert kinds["codex"]["available"] is False
    assert kinds["codex"]["unavailable"] == (
        "codex was not found on PATH; install it: npm install -g @openai/codex"
    )
    assert kinds["claude"]["available"] is True and kinds["shell"]["available"] is True
    assert "unavailable" not in kinds["claude"]
    status, body = server.request(
        "POST", "/api/agents/sessions", {"kind": "codex", "cwd": str(project)}
    )
    assert status == 409, body
    assert body["message"].startswith("cannot start a codex session: codex was not found")
    assert sessions(server) == {}
    assert fake_agents.records("start") == []


def test_an_agent_that_fails_at_once_keeps_why(agents_server, fake_agents, project):
    """A CLI that exits with an error right after it starts: its record is ``exited``
    with the code and a reason quoting what it printed, so the panel can say why."""
    codex = fake_agents.bin / "codex"
    # it exits a moment after its last words, as a real CLI does (node tears down for
    # tens of ms): one that exits the instant it writes can lose them in tmux, which
    # closes a dead pane's pty once FIONREAD shows nothing, while the kernel may not yet
    # have moved the bytes from the pty's flip buffer (1 in ~2,000 in a loop here)
    codex.write_text(
        "#!/bin/sh\necho 'codex: error: no model provider configured' >&2\nsleep 0.3\nexit 3\n"
    )
    server = agents_server(env=fake_agents.env)
    model = server.new("codex", project)
    viewer = server.ws(model["name"])
    ended = poll(
        lambda: (s := sessions(server)[model["id"]])["status"] == "exited" and s,
        what="the session to end",
    )
    viewer.close()
    assert ended["exit_code"] == 3
    assert ended["reason"].startswith("codex exited "), ended["reason"]
    assert ended["reason"].endswith(
        "s after it started (code 3): codex: error: no model provider configured"
    ), ended["reason"]


def test_an_early_exit_is_never_listed_without_its_reason(agents_server, fake_agents, project):
    """The exit and its reason are one write. A silent CLI that fails at once, watched by
    nobody, is ended by the server's exit watch, whose reconcile waits up to 3 s for last
    words that never come: a listing during that wait shows the exit with its reason, or
    the session still running, never the exit alone."""
    codex = fake_agents.bin / "codex"
    codex.write_text("#!/bin/sh\nsleep 0.3\nexit 3\n")
    server = agents_server(env=fake_agents.env)
    model = server.new("codex", project)
    ended = poll(
        lambda: (s := sessions(server)[model["id"]])["status"] == "exited" and s,
        interval=0.05,
        what="the session to end",
    )
    assert ended["exit_code"] == 3
    assert ended["reason"] is not None, ended
    assert ended["reason"].startswith("codex exited "), ended["reason"]
    assert ended["reason"].endswith("s after it started (code 3)"), ended["reason"]
