"""ACP sessions through a real Jupyter server (issue 58): a session of a kind that speaks
the Agent Client Protocol, started with ``mode: acp``, whose proxy runs under the same
owner as terminals (tmux, or the broker) and so outlives the server; prompts over REST,
its permission request a pending request like a hook's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import jupyter_agents
from jupyter_agents.acp import journal_folder
from jupyter_agents.acp.journal import Journal
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll

FAKE_ACP = Path(__file__).parent / "fakes" / "fake_acp_agent.py"

pytest.importorskip("acp", reason="the ACP SDK is a test dependency (pip install -e .[test])")


def configure(tmp_path: Path, **settings: Any) -> None:
    """The ``fakeacp`` kind: the fake ACP agent, which speaks ACP as it is; more
    ``c.AgentsApp`` ``settings`` if given."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    kinds = {"fakeacp": {"command": [sys.executable, str(FAKE_ACP)], "acp": []}}
    app = {"agents": kinds, **settings}
    (config / "jupyter_server_config.json").write_text(json.dumps({"AgentsApp": app}))


def records(state_dir: Path, session_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Journal(journal_folder(state_dir, session_id)).after(0)]


def texts(state_dir: Path, session_id: str) -> list[str]:
    out = []
    for record in records(state_dir, session_id):
        message = record.get("msg") or {}
        update = (message.get("params") or {}).get("update") or {}
        if record["from"] == "agent" and update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"]["text"])
    return out


def pending(server: ServerProcess, session_id: str) -> list[dict[str, Any]]:
    status, listed = server.request("GET", "/api/agents/requests")
    assert status == 200, listed
    return [r for r in listed if r["session_id"] == session_id]


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_an_acp_session_goes_on_through_kill_9_mid_stream_and_mid_permission(
    agents_server, agents_state_dir, tmp_path
):
    """Acceptance 2: the server is SIGKILLed while the agent streams a prompt, and again
    while its permission request waits; after each restart the session is the same
    process, the request is pending with the same id, its answer reaches the same agent,
    the first server's prompt is answered, and the journal has every event once."""
    configure(tmp_path)
    log = tmp_path / "fake-acp.jsonl"
    env = {"FAKE_ACP_LOG": str(log)}
    server = agents_server(env=env)
    status, made = server.request(
        "POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp"}
    )
    assert status == 201, made
    assert made["mode"] == "acp"
    sid, pid = made["id"], made["pid"]
    conversation = poll(
        lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"],
        what="the ACP session id as the conversation id",
    )
    status, sent = server.request(
        "POST", f"/api/agents/sessions/{sid}/prompt", {"text": "stream 30"}
    )
    assert status == 202, sent
    prompt = sent["prompt"]
    poll(lambda: len(texts(agents_state_dir, sid)) >= 3, what="the stream started")
    server.stop(signal.SIGKILL)  # mid-stream

    server = agents_server(env=env)
    (request,) = poll(lambda: pending(server, sid), timeout=30, what="the permission request")
    assert request["tool"] == "echo fake" and request["command"] == "echo fake"
    server.stop(signal.SIGKILL)  # mid-permission

    server = agents_server(env=env)
    (again,) = pending(server, sid)
    assert again["id"] == request["id"]
    status, answered = server.request(
        "POST", f"/api/agents/requests/{again['id']}", {"decision": "allow"}
    )
    assert status == 200, answered

    def prompt_answered() -> dict[str, Any] | None:
        for record in records(agents_state_dir, sid):
            message = record.get("msg") or {}
            if record["from"] == "agent" and message.get("id") == prompt and "result" in message:
                return dict(message)
        return None

    done = poll(prompt_answered, timeout=30, what="the first server's prompt answered")
    assert done["result"]["stopReason"] == "end_turn"
    session = server.request("GET", f"/api/agents/sessions/{sid}")[1]
    assert (session["status"], session["pid"], session["conversation_id"]) == (
        "running",
        pid,
        conversation,
    )
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    starts = [r["pid"] for r in lines if r["event"] == "start"]
    allowed = [r for r in lines if r["event"] == "permission"]
    assert len(starts) == 1 and [a["pid"] for a in allowed] == starts
    assert allowed[0]["outcome"] == {"outcome": "selected", "optionId": "allow"}
    seqs = [r["seq"] for r in records(agents_state_dir, sid)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert texts(agents_state_dir, sid) == [
        *[f"part-{i} " for i in range(30)],
        "fake acp heard: stream 30",
        "done: stream 30",
    ]
    poll(
        lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["attention"] == "waiting",
        what="attention waiting after the turn",
    )


def test_a_kind_without_acp_and_a_terminal_session_say_so(agents_server, tmp_path):
    """400 for ``mode: acp`` of a kind that has none, or an unknown mode; 409 for a
    prompt to a terminal session; 400 for an empty prompt."""
    configure(tmp_path)
    server = agents_server()
    status, said = server.request("POST", "/api/agents/sessions", {"kind": "shell", "mode": "acp"})
    assert status == 400 and "no ACP mode" in said["message"], said
    status, said = server.request("POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "x"})
    assert status == 400 and "mode must be" in said["message"], said
    status, shell = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201 and shell["mode"] == "terminal"
    status, said = server.request(
        "POST", f"/api/agents/sessions/{shell['id']}/prompt", {"text": "hi"}
    )
    assert status == 409 and "terminal session" in said["message"], said
    status, said = server.request(
        "POST", f"/api/agents/sessions/{shell['id']}/prompt", {"text": ""}
    )
    assert status == 400, said


def cli(tmp_path: Path, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter agents ARGS`` in a process of its own, with the server's config (the
    ``fakeacp`` kind) and state dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "config")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(jupyter_agents.__file__).parent.parent), env.get("PYTHONPATH")])
    )
    return subprocess.run(
        [sys.executable, "-m", "jupyter_agents.clients.cli", *args, "--state-dir", str(state_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_and_the_magic_start_acp_sessions_the_server_drives(
    agents_server, agents_state_dir, tmp_path, monkeypatch
):
    """``jupyter agents new KIND --mode acp`` and ``%agent new KIND --mode acp`` start
    the kind's ACP agent: the server, which did not start them, readies each and takes
    its prompt. A kind with no ACP mode is refused by both with the REST API's words
    (exit 1, no traceback), an unknown mode and ``--attach`` (no terminal) as usage
    errors (exit 2); terminal stays the default."""
    configure(tmp_path)
    server = agents_server()
    work = tmp_path / "work"
    work.mkdir()
    done = cli(tmp_path, agents_state_dir, "new", "fakeacp", "--mode", "acp", "--cwd", str(work),
               "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert (made["kind"], made["mode"], made["cwd"]) == ("fakeacp", "acp", str(work))

    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    shell: Any = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        (magic,) = shell.run_line_magic("agent", f"new fakeacp --mode acp --cwd {work}").sessions
        assert magic.mode == "acp"
        (plain,) = shell.run_line_magic("agent", f"new shell --cwd {work}").sessions
        assert plain.mode == "terminal"
        status, rest = server.request(
            "POST", "/api/agents/sessions", {"kind": "shell", "mode": "acp"}
        )
        assert status == 400, rest
        with pytest.raises(UsageError) as refused:
            shell.run_line_magic("agent", "new shell --mode acp")
        assert str(refused.value) == f"%agent new: {rest['message']}"
        with pytest.raises(UsageError, match="invalid choice: 'tty'"):
            shell.run_line_magic("agent", "new fakeacp --mode tty")
    finally:
        InteractiveShell.clear_instance()
    for sid in (made["id"], magic.id):
        poll(lambda sid=sid: server.model(sid)["conversation_id"], timeout=30,
             what="the server readies the ACP session")  # fmt: skip
        take_a_turn(server, agents_state_dir, sid, f"hello {sid}")
    turns = cli(tmp_path, agents_state_dir, "turns", made["id"])
    assert turns.returncode == 0 and f"done: hello {made['id']}" in turns.stdout, turns

    refused_cli = cli(tmp_path, agents_state_dir, "new", "shell", "--mode", "acp")
    assert refused_cli.returncode == 1
    assert refused_cli.stderr == f"jupyter agents: {rest['message']}\n"
    assert rest["message"] == "shell sessions have no ACP mode; use mode 'terminal' (the default)"
    unknown = cli(tmp_path, agents_state_dir, "new", "fakeacp", "--mode", "tty")
    assert unknown.returncode == 2 and "invalid choice: 'tty'" in unknown.stderr
    attach = cli(tmp_path, agents_state_dir, "new", "fakeacp", "--mode", "acp", "--attach")
    assert attach.returncode == 2
    assert "an ACP session has no terminal to attach to" in attach.stderr
    for failed in (refused_cli, unknown, attach):
        assert "Traceback" not in failed.stderr, failed.stderr
    listed = {s["id"]: s["mode"] for s in server.request("GET", "/api/agents/sessions")[1]}
    assert listed == {made["id"]: "acp", magic.id: "acp", plain.id: "terminal"}


def take_a_turn(server: ServerProcess, state_dir: Path, session_id: str, text: str) -> None:
    """Prompt ``text``, allow its permission request over REST, wait for the answer."""
    status, sent = server.request(
        "POST", f"/api/agents/sessions/{session_id}/prompt", {"text": text}
    )
    assert status == 202, sent
    (request,) = poll(lambda: pending(server, session_id), timeout=30, what="its request")
    status, _ = server.request(
        "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
    )
    assert status == 200
    poll(lambda: f"done: {text}" in texts(state_dir, session_id), timeout=30, what="its answer")


def readies(state_dir: Path, session_id: str) -> list[dict[str, Any]]:
    return [r for r in records(state_dir, session_id) if r.get("event") == "ready"]


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_a_reboot_then_restore_resumes_the_acp_session_by_its_id(
    agents_server, agents_state_dir, tmp_path
):
    """Acceptance 3: after a reboot (owner and server killed) the session is
    interrupted; a restore starts the agent again under a new proxy, which resumes the
    ACP session by its id (``session/resume``: the fake offers it) and says so; the
    conversation id is the same, the journal goes on, and the next turn works."""
    configure(tmp_path)
    log = tmp_path / "fake-acp.jsonl"
    env = {"FAKE_ACP_LOG": str(log)}
    server = agents_server(env=env)
    made = server.request("POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp"})[1]
    sid = made["id"]
    conversation = poll(
        lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"],
        what="its conversation id",
    )
    take_a_turn(server, agents_state_dir, sid, "before")

    kill_backends(agents_state_dir)  # a reboot
    server.stop(signal.SIGKILL)
    server = agents_server(env=env)
    assert server.request("GET", f"/api/agents/sessions/{sid}")[1]["status"] == "interrupted"
    status, restored = server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and restored["status"] == "running", restored
    ready = poll(lambda: readies(agents_state_dir, sid)[1:], what="the new proxy's ready")
    assert ready[0]["how"] == "resumed" and ready[0]["sessionId"] == conversation
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["session"] for r in lines if r["event"] == "resume"] == [conversation]
    take_a_turn(server, agents_state_dir, sid, "after")
    session = server.request("GET", f"/api/agents/sessions/{sid}")[1]
    assert session["conversation_id"] == conversation and session["reason"] is None
    seqs = [r["seq"] for r in records(agents_state_dir, sid)]
    assert seqs == list(range(1, len(seqs) + 1))  # one journal, both proxies


def test_a_restore_that_cannot_resume_says_why(agents_server, agents_state_dir, tmp_path):
    """Acceptance 3, the other way: an agent that offers neither resume nor load gets a
    new ACP session, and the session's reason says why (the old id named)."""
    configure(tmp_path)
    env = {"FAKE_ACP_RESUME": "0"}
    server = agents_server(env=env)
    sid = server.request("POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp"})[1][
        "id"
    ]
    old = poll(
        lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"],
        what="its conversation id",
    )
    kill_backends(agents_state_dir)
    server.stop(signal.SIGKILL)
    server = agents_server(env=env)
    status, restored = server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200, restored

    def moved() -> dict[str, Any] | None:
        session = server.request("GET", f"/api/agents/sessions/{sid}")[1]
        return session if session["conversation_id"] not in (None, old) else None

    session = poll(moved, what="a new conversation")
    assert session["reason"] == (
        f"the agent offers neither resume nor load of {old}; a new conversation began"
    )
    ready = readies(agents_state_dir, sid)[-1]
    assert ready["how"] == "new" and ready["sessionId"] == session["conversation_id"]


def test_a_new_conversation_is_never_listed_without_why(tmp_path):
    """The proxy's SessionStart names the new conversation and why the old one did not go
    on: both are written in one change. Written in two (the id, then the reason), a
    listing between them showed the new id with no reason (a full run of 2026-12-07);
    here every change the tracker makes is looked at, which needs no luck."""
    import logging

    from jupyter_agents.agents.attention import AttentionTracker
    from jupyter_agents.agents.kinds import make_kinds
    from jupyter_agents.agents.spool import spool_path
    from jupyter_agents.core.records import Session
    from jupyter_agents.core.store import SessionStore

    old, new = "1fe42143-8451-470a-8d0e-64e96fcc3b43", "2ab53254-9562-481b-9e1f-75f07add4c54"
    store = SessionStore(tmp_path / "sessions.db")
    store.add(
        Session(
            id="s1", name="1", status="running", backend="tmux", kind="claude",
            mode="acp", conversation_id=old,
        )
    )  # fmt: skip
    note = f"the agent offers neither resume nor load of {old}; a new conversation began"
    spool = spool_path(tmp_path, "s1")
    spool.parent.mkdir()
    line = {"t": 1.0, "event": "SessionStart", "conversation": new, "note": note}
    spool.write_text(json.dumps(line) + "\n")
    seen: list[tuple[str | None, str | None]] = []

    def change(session_id: str, action: Any = None, **fields: Any) -> Session | None:
        fields.pop("was", None)
        store.update(session_id, **fields)
        after = store.get(session_id)
        seen.append((after.conversation_id, after.reason))
        return after

    tracker = AttentionTracker(
        tmp_path, store, make_kinds(["bash"], {}), change, logging.getLogger("t")
    )
    tracker.apply_spool()
    assert (new, note) in seen
    assert all(reason == note for conversation, reason in seen if conversation == new), seen
    store.close()


def test_an_acp_sessions_turns_come_from_its_journal(agents_server, agents_state_dir, tmp_path):
    """Its turns (``/turns``, what the turns view reads) are the journal's, in order: the
    prompt, the streamed reply's chunks, the plan, the tool call, its end with its
    output, the answer, the turn's end; a page from an event's id goes on from there."""
    configure(tmp_path)
    server = agents_server()
    sid = server.request("POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp"})[1][
        "id"
    ]
    poll(lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"])
    take_a_turn(server, agents_state_dir, sid, "look")
    status, page = server.request("GET", f"/api/agents/sessions/{sid}/turns")
    assert status == 200, page
    shown = [
        (e["type"], e.get("text") or e.get("title") or e.get("output") or e.get("stop_reason"))
        for e in page["events"]
    ]
    assert shown == [
        ("user_message", "look"),
        ("agent_message", "fake acp heard: look"),
        ("plan", None),
        ("tool_call", "echo fake"),
        ("tool_call", "echo fake"),  # the call its permission request asks about
        ("tool_call_update", "fake"),
        ("agent_message", "done: look"),
        ("turn_end", "end_turn"),
    ], shown
    plan, call, asked = page["events"][2], page["events"][3], page["events"][4]
    assert asked["tool_call_id"] == call["tool_call_id"]  # one row: the same call
    assert [e["content"] for e in plan["entries"]] == ["Run the command", "Say what it printed"]
    assert (call["tool_kind"], call["status"], call["input"]) == (
        "execute",
        "pending",
        {"command": "echo fake"},
    )
    after = page["events"][3]["id"]
    status, rest = server.request("GET", f"/api/agents/sessions/{sid}/turns?after={after}")
    assert [e["type"] for e in rest["events"]] == [t for t, _ in shown[4:]]


def test_a_call_named_only_by_its_update_says_what_it_runs(
    agents_server, agents_state_dir, tmp_path
):
    """Claude's ACP adapter announces a shell call as "Terminal" with no input and names
    the command in a later update: the turns carry that update as the same call with
    its title, kind and input (what a reader puts on the call's row), and leave out
    what the update does not say (no ``tool_kind`` "other" over the real one)."""
    configure(tmp_path)
    server = agents_server()
    sid = server.request("POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp"})[1][
        "id"
    ]
    poll(lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"])
    status, _ = server.request("POST", f"/api/agents/sessions/{sid}/prompt", {"text": "/named"})
    assert status == 202

    def ended() -> list[dict[str, Any]]:
        events = server.request("GET", f"/api/agents/sessions/{sid}/turns")[1]["events"]
        return events if events and events[-1]["type"] == "turn_end" else []

    events = poll(ended, timeout=30, what="the turn's end")
    first, named, done = (e for e in events if e["type"].startswith("tool_call"))
    assert (first["type"], first["title"]) == ("tool_call", "Terminal")
    assert "input" not in first
    assert named["type"] == "tool_call" and named["tool_call_id"] == first["tool_call_id"]
    assert (named["title"], named["tool_kind"], named["input"], named["status"]) == (
        "printf named",
        "execute",
        {"command": "printf named"},
        "in_progress",
    )
    assert "locations" not in named  # (not in the update: a reader keeps what it has)
    assert (done["type"], done["output"]) == ("tool_call_update", "named")


def test_a_notebook_cell_takes_the_name_and_input_a_later_event_gives_its_call() -> None:
    """The notebook export's code cell of a call announced with no input shows the
    command a later event of the same call gives (as the turns view's row does)."""
    from jupyter_agents.sessions.export import _cell

    calls: dict[str, Any] = {}
    plan: list[dict[str, Any]] = []
    base = {"type": "tool_call", "at": None, "tool_call_id": "c1", "status": "pending"}
    cell = _cell({**base, "id": "0:1:1:0", "tool": "Terminal", "title": "Terminal"}, calls, plan)
    assert cell is not None and cell.source == ""
    again = {**base, "id": "0:2:1:0", "tool": "printf named", "title": "printf named"}
    assert _cell({**again, "input": {"command": "printf named"}}, calls, plan) is None
    assert cell.source == "printf named"
    assert cell.metadata["title"] == "printf named"


def test_acp_client_tools_lets_a_new_sessions_agent_write_files(
    agents_server, agents_state_dir, tmp_path
):
    """Acceptance 4 through a server: with ``c.AgentsApp.acp_client_tools = ["fs"]`` the
    proxy of a new ACP session lets its agent write a file in the session's working
    directory (its bytes land there), while ``terminal/create`` is still refused (not
    allowed) and runs nothing; the journal's ``started`` record names what it allows."""
    configure(tmp_path, acp_client_tools=["fs"])
    log = tmp_path / "fake-acp.jsonl"
    work = tmp_path / "work"
    work.mkdir()
    server = agents_server(env={"FAKE_ACP_LOG": str(log)})
    status, made = server.request(
        "POST", "/api/agents/sessions", {"kind": "fakeacp", "mode": "acp", "cwd": str(work)}
    )
    assert status == 201, made
    sid = made["id"]
    poll(lambda: server.request("GET", f"/api/agents/sessions/{sid}")[1]["conversation_id"])

    def logged(event: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        return [r for r in lines if r["event"] == event]

    marker = work / "ran"
    run = json.dumps({"command": "touch", "args": [str(marker)]})
    for text, event in ((f"/write {work / 'note.txt'}", "write"), (f"/run {run}", "run")):
        status, sent = server.request("POST", f"/api/agents/sessions/{sid}/prompt", {"text": text})
        assert status == 202, sent
        poll(lambda event=event: logged(event), timeout=30, what=f"the agent's {event}")
    (write,), (ran,) = logged("write"), logged("run")
    assert write["result"] == "written", write
    assert (work / "note.txt").read_bytes() == b"written by the fake ACP agent\n"
    assert ran["error"] == -32601 and "turned off" in ran["message"], ran
    assert not marker.exists()
    (started,) = [r for r in records(agents_state_dir, sid) if r.get("event") == "started"]
    assert started["client_tools"] == ["fs"]
