"""The core's second design, end to end: session events on /api/events/subscribe, the
stock terminal manager API and culling, front ends that import no server, an IO loop
that blocking work never holds, and state dirs shared by several backends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from typing import Any

import psutil
import pytest
from tornado.web import HTTPError

from jupyter_agents.clients.cli import main
from jupyter_agents.pytest_plugin import EventClient, ServerProcess, kill_backends, poll
from jupyter_agents.server.terminals import TerminalManager


def status_of(server: ServerProcess, session_id: str) -> str:
    status, model = server.request("GET", f"/api/agents/sessions/{session_id}")
    assert status == 200, model
    return str(model["status"])


def test_events_for_create_kill_crash_restore_and_conversation(
    agents_server, agents_state_dir, fake_agents, tmp_path
):
    server = agents_server(env=fake_agents.env)
    events = EventClient(server)
    try:
        shell, doomed = server.new(), server.new()
        poll(lambda: events.of(shell["id"], "created") and events.of(doomed["id"], "created"))
        assert server.request("DELETE", f"/api/agents/sessions/{doomed['id']}")[0] == 204
        killed = poll(lambda: events.of(doomed["id"], "status"), what="killed event")
        assert (killed[0]["previous_status"], killed[0]["status"]) == ("running", "killed")

        # a backend crash: the next listing reconciles, the event says interrupted
        kill_backends(agents_state_dir)
        server.request("GET", "/api/terminals")
        lost = poll(lambda: events.of(shell["id"], "status"), what="interrupted event")
        assert (lost[0]["previous_status"], lost[0]["status"]) == ("running", "interrupted")
        status, restored = server.request("POST", f"/api/agents/sessions/{shell['id']}/restore")
        assert status == 200 and restored["status"] == "running", restored
        back = poll(lambda: events.of(shell["id"], "status")[1:], what="restored event")
        assert (back[0]["previous_status"], back[0]["status"]) == ("interrupted", "running")

        # /clear rotates claude's conversation id: one conversation event with the new id
        project = tmp_path / "proj"
        project.mkdir()
        claude = server.new(kind="claude", cwd=str(project))
        server.type_line(claude["name"], "/clear", "cleared; conversation")
        server.request("GET", "/api/agents/sessions")  # follows ids now, not in 5 s
        changed = poll(lambda: events.of(claude["id"], "conversation"), what="conversation")
        assert changed[0]["conversation_id"] not in (None, claude["conversation_id"])
        # one event per change: nothing published twice
        assert len(events.of(doomed["id"], "status")) == 1
        assert len(events.of(claude["id"], "conversation")) == 1
    finally:
        events.close()


def test_changes_made_by_the_cli_reach_subscribers(agents_server, agents_state_dir):
    server = agents_server(args=["--AgentsApp.refresh_interval=0.5"])
    events = EventClient(server)
    try:
        assert main(["new", "shell", "--state-dir", str(agents_state_dir)]) == 0
        created = poll(lambda: [e for e in events.events if e["action"] == "created"])
        sid = created[0]["session_id"]
        assert main(["kill", sid, "--state-dir", str(agents_state_dir)]) == 0
        ended = poll(lambda: events.of(sid, "status"), what="CLI kill seen by the server")
        assert ended[0]["status"] == "killed"
    finally:
        events.close()


async def test_stock_terminal_manager_api(jp_serverapp):
    """Code written for jupyter_server_terminals drives our manager unchanged."""
    manager = jp_serverapp.web_app.settings["terminal_manager"]
    assert isinstance(manager, TerminalManager)
    assert manager.cull_inactive_timeout == 0 and manager.cull_interval == 300
    model = manager.create(name="stock1")
    assert set(model) == {"name", "last_activity"} and model["name"] == "stock1"
    second = manager.create()
    assert manager.get_terminal_model("stock1") == manager.get("stock1")
    assert {m["name"] for m in manager.list()} == {"stock1", second["name"]}
    assert set(manager.terminals) == {"stock1", second["name"]}
    await manager.terminate("stock1", force=True)
    assert [m["name"] for m in manager.list()] == [second["name"]]
    with pytest.raises(HTTPError) as e:
        manager.get_terminal_model("stock1")
    assert e.value.status_code == 404
    await manager.terminate_all()
    assert manager.list() == []
    killed = manager.service.store.list(["killed"])
    assert {s.name for s in killed} == {"stock1", second["name"]}


async def test_an_in_process_server_starts_its_background_with_the_first_request(
    jp_serverapp, jp_fetch
):
    """pytest-jupyter's in-process server never runs extension start hooks: events,
    hook listening and culling start with the first request to our routes instead."""
    from jupyter_agents.core.events import SCHEMA_ID

    app = jp_serverapp.extension_manager.extensions["jupyter_agents"].extension_points
    agents = app["jupyter_agents"].app
    seen: list[dict] = []

    async def listener(logger, schema_id, data):
        seen.append(data)

    jp_serverapp.event_logger.add_listener(schema_id=SCHEMA_ID, listener=listener)
    assert agents._started is None  # nothing ran it yet
    r = await jp_fetch("api", "agents", "sessions", method="POST", body=json.dumps({}))
    sid = json.loads(r.body)["id"]
    for _ in range(100):
        if any(d.get("session_id") == sid for d in seen):
            break
        await asyncio.sleep(0.05)
    assert any(d["session_id"] == sid and d["action"] == "created" for d in seen), seen
    assert agents._hooks is not None
    await agents.ensure_started()  # once: a second call starts nothing more
    assert agents._started.done()


def test_culling_ends_an_idle_terminal_and_leaves_a_busy_one(agents_server):
    server = agents_server(
        args=["--TerminalManager.cull_inactive_timeout=4", "--TerminalManager.cull_interval=1"]
    )
    idle, busy = server.new(), server.new()
    # then no viewer: only its transcript shows it is busy
    server.type_line(busy["name"], "while true; do echo tick; sleep 0.5; done", "tick")
    poll(lambda: status_of(server, idle["id"]) == "killed", timeout=30, what="idle culled")
    _, model = server.request("GET", f"/api/agents/sessions/{idle['id']}")
    assert "culled" in model["reason"]
    assert status_of(server, busy["id"]) == "running"
    names = [t["name"] for t in server.request("GET", "/api/terminals")[1]]
    assert names == [busy["name"]]


@pytest.mark.parametrize("what", ["magics", "cli"])
def test_front_ends_import_no_server(what, agents_state_dir):
    code = {
        "magics": "import jupyter_agents.clients.magics, jupyter_agents.clients.widgets",
        "cli": f"from jupyter_agents.clients.cli import main; main(['list', '--state-dir', "
        f"{str(agents_state_dir)!r}])",
    }[what]
    agents_state_dir.mkdir(exist_ok=True)
    probe = (
        f"{code}\nimport sys\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jupyter_server', 'tornado', 'jupyter_server_terminals', 'terminado')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_io_loop_serves_a_terminal_while_50_sessions_are_listed(agents_server):
    server = agents_server()
    models = [server.new() for _ in range(50)]
    client = server.ws(models[0]["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)
    results: list[int] = []

    def hammer(path: str) -> None:
        results.append(server.request("GET", path)[0])

    threads = [
        threading.Thread(target=hammer, args=(p,))
        for _ in range(10)
        for p in ("/api/agents/sessions", "/api/terminals")
    ]
    try:
        for t in threads:
            t.start()
        client.stdin("echo loop-$((6*7))\r")
        client.wait_for("loop-42", timeout=30)  # answered while 20 listings are in flight
        for t in threads:
            t.join(60)
        assert results == [200] * 20
    finally:
        client.close()


def cli_json(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_agents.clients.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if "--json" in args else out.stdout


def test_a_broker_server_on_a_machine_with_tmux_is_never_judged_by_tmux(
    agents_server, agents_state_dir
):
    server = agents_server(args=["--AgentsApp.backend=broker"])
    model = server.new()
    assert model["backend"] == "broker"
    client = server.ws(model["name"])
    try:
        client.wait_for(lambda c: len(c.messages) >= 2)
        state = ["--state-dir", str(agents_state_dir)]
        # every command that only reads, from the CLI (auto: tmux here) and a kernel
        listed = cli_json("list", "--json", *state)
        assert [(s["id"], s["status"]) for s in listed] == [(model["id"], "running")]
        cli_json("show", model["id"], *state)
        cli_json("log", model["id"], "--tail", "100", *state)
        cli_json("reconcile", *state)
        cli_json("gc", *state)
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        try:
            shell.run_line_magic("load_ext", "jupyter_agents")
            table = shell.run_line_magic("agent", f"--state-dir {agents_state_dir} ls")
            assert [s.status for s in table.sessions] == ["running"]
        finally:
            InteractiveShell.clear_instance()
        assert status_of(server, model["id"]) == "running"
        assert not (agents_state_dir / "tmux" / "socket").exists()  # no tmux was started
        client.stdin("echo still-$((40+2))\r")
        client.wait_for("still-42")  # the open tab stayed connected
        broker_pid = int((agents_state_dir / "broker" / "broker.pid").read_text().split()[0])
        cli_json("kill-server", "--yes", *state)
        poll(
            lambda: (
                not psutil.pid_exists(broker_pid)
                or psutil.Process(broker_pid).status() == psutil.STATUS_ZOMBIE
            ),
            what="broker stopped",
        )
        assert status_of(server, model["id"]) == "killed"
    finally:
        client.close()


def test_a_state_dir_with_tmux_and_broker_sessions(agents_server, agents_state_dir):
    broker_server = agents_server(args=["--AgentsApp.backend=broker"])
    on_broker = broker_server.new()
    broker_server.stop()
    tmux_server = agents_server(args=["--AgentsApp.backend=tmux"])
    on_tmux = tmux_server.new()
    listed = {s["id"]: s for s in tmux_server.request("GET", "/api/agents/sessions")[1]}
    assert {sid: (s["backend"], s["status"]) for sid, s in listed.items()} == {
        on_broker["id"]: ("broker", "running"),
        on_tmux["id"]: ("tmux", "running"),
    }
    # both owners die (a reboot): each record is judged by its own backend
    assert main(["kill-server", "--yes", "--state-dir", str(agents_state_dir)]) == 0
    for sid in (on_broker["id"], on_tmux["id"]):
        tmux_server.request("POST", f"/api/agents/sessions/{sid}/restore")
    listed = {s["id"]: s for s in tmux_server.request("GET", "/api/agents/sessions")[1]}
    assert {sid: (s["backend"], s["status"]) for sid, s in listed.items()} == {
        on_broker["id"]: ("broker", "running"),
        on_tmux["id"]: ("tmux", "running"),
    }
    client = tmux_server.ws(listed[on_broker["id"]]["name"])
    try:
        client.wait_for("restored shell session")  # streamed from the broker
        client.stdin("echo both-$((40+2))\r")
        client.wait_for("both-42")
    finally:
        client.close()
