"""Acceptance: terminals survive the Jupyter server (real servers, real tmux or pty
broker; broker servers run without tmux on PATH)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from jupyter_agents.backends.base import SpawnRequest
from jupyter_agents.pytest_plugin import ServerProcess, TermClient, open_backend, transcript_bytes

pytestmark = pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)


def shell_pid(client: TermClient, tag: str) -> int:
    client.stdin(f"echo {tag}-$((6*7))-pid=$$\r")
    client.wait_for(lambda c: re.search(rf"{tag}-42-pid=(\d+)", c.text) is not None)
    m = re.search(rf"{tag}-42-pid=(\d+)", client.text)
    assert m is not None
    return int(m.group(1))


def replayed(client: TermClient) -> bool:
    """The client got ``setup`` and its replay."""
    return len(client.messages) >= 2


def new_terminal(server: ServerProcess, body: dict | None = None) -> str:
    status, model = server.request("POST", "/api/terminals", body or {})
    assert status == 200, model
    return str(model["name"])


def type_then_kill_server(server: ServerProcess, keys: str, wait: str) -> tuple[str, str]:
    """In a new terminal type ``keys``, wait for ``wait``, SIGKILL the server.
    Returns the terminal's (name, session id)."""
    name = new_terminal(server)
    c = server.ws(name)
    c.wait_for(replayed)
    c.stdin(keys)
    c.wait_for(wait)
    c.close()
    _, sessions = server.request("GET", "/api/agents/sessions")
    server.stop(signal.SIGKILL)
    return name, sessions[0]["id"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_terminal_survives_server_restart(agents_server, sig):
    server = agents_server()
    name = new_terminal(server)
    client = server.ws(name)
    client.wait_for(replayed)
    pid = shell_pid(client, "MARK")
    client.close()

    server.stop(sig)
    server2 = agents_server()
    status, terms = server2.request("GET", "/api/terminals")
    assert status == 200
    assert [t["name"] for t in terms] == [name]

    client2 = server2.ws(name)
    client2.wait_for("MARK-42")
    assert client2.messages[0] == ["setup", {}]
    replay = client2.messages[1]
    assert replay[0] == "stdout" and f"MARK-42-pid={pid}" in replay[1]
    assert replay[1].startswith("\x1bc")  # drawn from a reset: nothing doubled on reconnect
    assert shell_pid(client2, "AGAIN") == pid
    client2.close()


def test_fifty_terminals_survive(agents_server, agents_backend):
    server = agents_server()
    names = [new_terminal(server) for _ in range(50)]
    assert names == [str(i) for i in range(1, 51)]
    for name in names:
        c = server.ws(name)
        c.stdin(f"echo out-{name}-$((1+1))\r")
        c.wait_for(f"out-{name}-2")
        c.close()
    _, before = server.request("GET", "/api/agents/sessions")
    pids = {s["name"]: s["pid"] for s in before}

    server.stop(signal.SIGKILL)
    server2 = agents_server()
    _, terms = server2.request("GET", "/api/terminals")
    assert sorted(t["name"] for t in terms) == sorted(names)
    _, after = server2.request("GET", "/api/agents/sessions")
    assert {s["name"]: s["pid"] for s in after} == pids
    assert {s["status"] for s in after} == {"running"}
    _, report = server2.request("GET", "/api/agents/reconcile")
    assert sorted(a["kind"] for a in report["actions"]) == ["reattach"] * 50
    live = {s.pid for s in open_backend(server2.state_dir, agents_backend).list_live()}
    assert set(pids.values()) == live  # no phantom running record
    for name in names:
        c = server2.ws(name)
        c.wait_for(replayed)
        replay = c.messages[1]
        assert replay[0] == "stdout" and f"out-{name}-2" in replay[1], (replay, c.log_tail())
        c.close()


def test_backend_killed_marks_interrupted(agents_server, agents_backend):
    server = agents_server()
    name, sid = type_then_kill_server(server, "echo BEFORE-$((2+3))\r", "BEFORE-5")
    open_backend(server.state_dir, agents_backend).kill_server()

    server2 = agents_server()
    assert server2.request("GET", "/api/terminals") == (200, [])
    _, record = server2.request("GET", f"/api/agents/sessions/{sid}")
    assert record["status"] == "interrupted"
    assert b"BEFORE-5" in transcript_bytes(server.state_dir, sid)
    # the name is free again: a new terminal with it is a new shell
    assert server2.request("GET", f"/api/terminals/{name}")[0] == 404


def test_hand_made_session_is_orphaned_not_killed(agents_server, agents_backend):
    server = agents_server()
    new_terminal(server)
    backend = open_backend(server.state_dir, agents_backend)  # one made by hand, not by us
    env = {"PATH": os.environ["PATH"]}
    backend.spawn(SpawnRequest("handmade", ["sleep", "1000"], "/", env))
    server.stop(signal.SIGKILL)
    server2 = agents_server()
    _, sessions = server2.request("GET", "/api/agents/sessions")
    by_id = {s["id"]: s for s in sessions}
    assert by_id["handmade"]["status"] == "orphaned"
    assert [t["name"] for t in server2.request("GET", "/api/terminals")[1]] == ["1"]
    time.sleep(0.5)
    held = {s.session_id: s for s in backend.list_live()}
    assert "handmade" in held and not held["handmade"].dead


def test_output_while_server_down_is_in_transcript_and_replay(agents_server):
    server = agents_server()
    name, sid = type_then_kill_server(server, "sleep 2; echo LATE-$((40+2))\r", "sleep 2")
    deadline = time.monotonic() + 10
    while b"LATE-42" not in transcript_bytes(server.state_dir, sid):
        assert time.monotonic() < deadline, "LATE-42 never reached the transcript"
        time.sleep(0.2)
    server2 = agents_server()
    c2 = server2.ws(name)
    c2.wait_for(replayed)
    assert "LATE-42" in c2.messages[1][1]
    c2.close()


def test_environment_is_scrubbed(agents_server, agents_backend):
    server = agents_server(
        env={
            "CLAUDECODE": "1",
            "CLAUDE_CODE_CHILD_SESSION": "1",
            "JUPYTER_TOKEN": "leaked-secret",
            "KEEP_ME": "kept",
        }
    )
    c = server.ws(new_terminal(server))
    c.stdin(
        'echo "ENV[${CLAUDECODE-unset}][${CLAUDE_CODE_CHILD_SESSION-unset}]'
        '[${JUPYTER_TOKEN-unset}][$KEEP_ME][$TERM]"\r'
    )
    c.wait_for(lambda c: re.search(r"ENV\[\w+\].*\]\r\n", c.text) is not None)
    line = re.search(r"ENV(\[.*\])\r\n", c.text).group(1)
    terms = ["tmux-256color", "screen-256color"] if agents_backend == "tmux" else ["xterm-256color"]
    assert line in [f"[unset][unset][unset][kept][{term}]" for term in terms]
    c.close()


def test_two_servers_share_one_state_dir(agents_server):
    a = agents_server()
    b = agents_server()
    name = new_terminal(a)
    assert [t["name"] for t in b.request("GET", "/api/terminals")[1]] == [name]
    name_b = new_terminal(b)
    assert name_b != name
    assert sorted(t["name"] for t in a.request("GET", "/api/terminals")[1]) == sorted(
        [name, name_b]
    )
    ca, cb = a.ws(name), b.ws(name)
    for c in (ca, cb):
        c.wait_for(replayed)
    ca.stdin("echo SHARED-$((3*3))\r")
    cb.wait_for("SHARED-9")
    cb.stdin("echo FROM-B-$((4*4))\r")
    ca.wait_for("FROM-B-16")
    ca.close()
    cb.close()

    # concurrent reconciles and spawns from both servers never sweep a live session
    import threading

    errors: list[object] = []

    def hammer(server: ServerProcess, spawn: bool) -> None:
        for _ in range(15):
            for method, path in (("POST", "/api/agents/reconcile"), ("GET", "/api/terminals")):
                status, body = server.request(method, path, {} if method == "POST" else None)
                if status != 200:
                    errors.append(body)
            if spawn:
                status, body = server.request("POST", "/api/terminals", {})
                if status != 200:
                    errors.append(body)

    threads = [
        threading.Thread(target=hammer, args=(s, sp)) for s in (a, b) for sp in (True, False)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _, sessions = a.request("GET", "/api/agents/sessions")
    assert len(sessions) == 32
    assert {s["status"] for s in sessions} == {"running"}
    assert len({s["name"] for s in sessions}) == 32


def pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_delete_ends_the_process_tree(agents_server):
    server = agents_server()
    name = new_terminal(server)
    c = server.ws(name)
    c.stdin("sleep 1000 & echo CHILD=$!\r")
    c.wait_for(lambda c: re.search(r"CHILD=(\d+)", c.text) is not None)
    child = int(re.search(r"CHILD=(\d+)", c.text).group(1))
    shell = shell_pid(c, "SHELL")
    status, _ = server.request("DELETE", f"/api/terminals/{name}")
    assert status == 204
    c.wait_for(lambda c: ["disconnect", 1] in c.messages)
    deadline = time.monotonic() + 10
    while (pid_alive(shell) or pid_alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(shell) and not pid_alive(child)
    _, sessions = server.request("GET", "/api/agents/sessions")
    assert sessions[0]["status"] == "killed"


@pytest.mark.parametrize("mode", ["detach", "kill"])
def test_on_shutdown(agents_server, mode):
    server = agents_server(args=[f"--AgentsApp.on_shutdown={mode}"])
    c = server.ws(new_terminal(server))
    pid = shell_pid(c, "P")
    c.close()
    server.stop(signal.SIGTERM)
    time.sleep(0.5)
    assert pid_alive(pid) == (mode == "detach")


def test_session_environment_never_appears_on_a_command_line(agents_server):
    import psutil

    server = agents_server(env={"SOME_API_KEY": "value-only-in-the-env-4711"})
    c = server.ws(new_terminal(server))
    c.stdin('echo "KEY=$SOME_API_KEY"\r')
    c.wait_for("KEY=value-only-in-the-env-4711")
    for proc in psutil.process_iter(["cmdline"]):
        assert "value-only-in-the-env-4711" not in " ".join(proc.info["cmdline"] or [])
    assert not list(server.state_dir.glob("*/env-*"))  # tmux: read and deleted
    c.close()
