"""Lifecycle under faults: pid reuse, backend crash mid-output, a store writer killed
mid-transaction, stale processes of crashed sessions, and a restart torture run."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import produced_lines, producer_config

from jupyter_agents.core.procs import SESSION_MARKER, MarkedProcess, ProcessIdentity, session_marker
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore, new_session_id
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll, transcript_bytes


@pytest.fixture
def bystander():
    """A real process that is not ours (its pid may show up in records by reuse)."""
    proc = subprocess.Popen(["sleep", "1000"])
    yield proc
    proc.kill()
    proc.wait()


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def sessions(server: ServerProcess) -> dict[str, dict]:
    status, body = server.request("GET", "/api/agents/sessions")
    assert status == 200
    return {s["id"]: s for s in body}


def test_a_reused_pid_is_never_signalled(agents_server, agents_state_dir, bystander, tmp_path):
    created = psutil.Process(bystander.pid).create_time()
    server = agents_server(args=["--AgentsApp.on_shutdown=kill"])
    victims = []
    for _ in range(3):
        status, model = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
        assert status == 201
        victims.append(model)
    # the records now name the bystander's pid, with another create time (pid reuse)
    store = SessionStore(agents_state_dir / "sessions.db")
    for v in victims:
        store.update(v["id"], pid=bystander.pid, pid_created=created - 1000)

    # reconcile (twice: at GET and explicitly), kill, gc, shutdown with on_shutdown=kill
    assert server.request("POST", "/api/agents/reconcile")[0] == 200
    assert server.request("GET", "/api/terminals")[0] == 200
    assert server.request("DELETE", f"/api/agents/sessions/{victims[0]['id']}")[0] == 204
    assert alive(bystander)
    assert sessions(server)[victims[0]["id"]]["status"] == "killed"
    status, _ = server.request("DELETE", f"/api/terminals/{victims[1]['name']}")
    assert status == 204 and alive(bystander)
    from jupyter_agents.config import open_sessions

    service = open_sessions(str(agents_state_dir))
    wrong = MarkedProcess(ProcessIdentity(bystander.pid, created - 1000), victims[0]["id"], [])
    assert service.gc([wrong]) == [] and alive(bystander)
    assert all(m.identity.pid != bystander.pid for m in service.stale_processes())
    service.close()
    server.stop(signal.SIGTERM)  # on_shutdown=kill ends the last one's tree: not the bystander
    assert alive(bystander)
    assert store.get(victims[2]["id"]).status == "killed"


def test_gc_lists_and_ends_only_processes_of_ended_sessions(
    agents_server, agents_state_dir, bystander, tmp_path
):
    server = agents_server()
    live = server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    ended = server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    assert server.request("DELETE", f"/api/agents/sessions/{ended['id']}")[0] == 204
    # a daemon the ended session left behind (like codex's app-server), and one of the
    # live session: both carry their session's marker in their environment
    marker = session_marker
    daemon = subprocess.Popen(
        ["sleep", "999"],
        env={**os.environ, SESSION_MARKER: marker(ended["id"], str(agents_state_dir))},
        start_new_session=True,
    )
    helper = subprocess.Popen(
        ["sleep", "998"],
        env={**os.environ, SESSION_MARKER: marker(live["id"], str(agents_state_dir))},
        start_new_session=True,
    )
    try:
        jupyter = [
            sys.executable,
            "-m",
            "jupyter_agents.clients.cli",
            "--state-dir",
            str(agents_state_dir),
        ]
        listed = subprocess.run([*jupyter, "gc", "--json"], capture_output=True, text=True)
        assert listed.returncode == 0, listed.stderr
        stale = json.loads(listed.stdout)
        assert [(s["identity"]["pid"], s["session_id"]) for s in stale] == [
            (daemon.pid, ended["id"])
        ]
        assert alive(daemon)  # listing never kills
        killed = subprocess.run([*jupyter, "gc", "--kill"], capture_output=True, text=True)
        assert killed.returncode == 0 and "ended 1" in killed.stdout, killed.stdout
        daemon.wait(timeout=10)
        assert alive(helper) and alive(bystander)
    finally:
        for proc in (daemon, helper):
            proc.kill()
            proc.wait()


def test_backend_crash_mid_output_keeps_transcripts(agents_server, agents_state_dir, tmp_path):
    producer_config(tmp_path, count=100000, interval=0.002)
    server = agents_server()
    status, model = server.request("POST", "/api/agents/sessions", {"kind": "producer"})
    assert status == 201, model

    def transcript() -> bytes:
        return transcript_bytes(agents_state_dir, model["id"])

    deadline = time.monotonic() + 15
    while len(produced_lines(transcript())) < 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    kill_backends(agents_state_dir)  # mid-output
    # recorded when its process ends (the server watches it), not by a listing
    poll(lambda: sessions(server)[model["id"]]["status"] == "interrupted", what="interrupted")
    lines = produced_lines(transcript())
    assert len(lines) >= 200
    assert lines == list(range(1, len(lines) + 1))  # no gap, nothing doubled
    # new sessions work (a new tmux server)
    status, fresh = server.request("POST", "/api/terminals", {})
    client = server.ws(fresh["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)
    client.stdin("echo after-crash-$((40+2))\r")
    client.wait_for("after-crash-42")
    client.close()


def _write_forever(db: str, ready: Any) -> None:
    """A writer (in a forked child): add and end sessions until killed."""
    store = SessionStore(db)
    ready.set()
    while True:
        sid = new_session_id()
        store.add(Session(id=sid, name=sid, status="running", backend="tmux", argv=["x"] * 50))
        store.update(
            sid,
            status=random.choice(["exited", "killed", "interrupted"]),
            expect=("running",),
            last_activity="later",
            exit_code=1,
        )
        store.list(["running"])


@pytest.mark.timeout(300)
def test_store_survives_a_writer_killed_200_times(tmp_path):
    """A writer is SIGKILLed at a random moment 200 times (each forked from this
    process, which holds no connection: a fresh interpreter per writer cost most of
    the test's time on a loaded machine); the store opens whole every time after."""
    db = tmp_path / "sessions.db"
    SessionStore(db).close()
    rng = random.Random(5)
    forked = multiprocessing.get_context("fork")
    for _ in range(200):
        ready = forked.Event()
        writer = forked.Process(target=_write_forever, args=(str(db), ready), daemon=True)
        writer.start()
        assert ready.wait(60), "the writer never opened the store"
        time.sleep(rng.uniform(0, 0.02))
        writer.kill()
        writer.join(30)
    store = SessionStore(db)  # opens: no error, schema current
    assert store._query("PRAGMA integrity_check")[0][0] == "ok"
    records = store.list()
    assert len(records) > 200
    # every record is whole: a status from the set, its argv intact; a crash left at most
    # the last transaction's row still running
    assert {r.status for r in records} <= {"running", "exited", "killed", "interrupted"}
    assert all(r.argv == ["x"] * 50 for r in records)
    assert sum(r.status == "running" for r in records) <= 200
    assert all(r.exit_code == 1 for r in records if r.status != "running")


def tmux_live(state_dir: Path) -> set[str]:
    """Names of the tmux sessions of ``state_dir`` whose process is alive."""
    out = subprocess.run(
        ["tmux", "-S", str(state_dir / "tmux" / "socket"), "list-panes", "-a", "-F",
         "#{session_name} #{pane_dead}"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return {line.split()[0] for line in out.splitlines() if line.endswith(" 0")}


@pytest.mark.timeout(900)
def test_restart_torture(agents_state_dir, tmp_path):
    """Sessions are created, deleted and listed while the server is SIGKILLed at random
    moments; afterwards nothing is lost, doubled or a phantom, transcripts are whole."""
    cycles = int(os.environ.get("JUPYTER_AGENTS_TORTURE_CYCLES", "50"))
    count = 60
    producer_config(tmp_path, count=count, interval=0.05)
    rng = random.Random(7)
    created: dict[str, dict] = {}  # session id -> model, for every 201
    deleted: set[str] = set()  # ids whose DELETE answered 204
    doomed: set[str] = set()  # ids a DELETE was sent for (maybe killed mid-way)

    def work(srv: ServerProcess, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                live = [m for sid, m in created.items() if sid not in deleted]
                op = rng.random()
                if len(live) < 20 or op < 0.3:
                    status, model = srv.request(
                        "POST", "/api/agents/sessions", {"kind": "producer"}
                    )
                    if status == 201:
                        created[model["id"]] = model
                elif op < 0.5:
                    victim = rng.choice(live)["id"]
                    doomed.add(victim)
                    if srv.request("DELETE", f"/api/agents/sessions/{victim}")[0] == 204:
                        deleted.add(victim)
                else:
                    srv.request("GET", "/api/terminals")
            except OSError:
                return  # the server was killed under us

    server: ServerProcess | None = ServerProcess(agents_state_dir, tmp_path).start()
    try:
        for _ in range(20):  # the 20 sessions under torture (more come and go)
            status, model = server.request("POST", "/api/agents/sessions", {"kind": "producer"})
            assert status == 201
            created[model["id"]] = model
        server.stop(signal.SIGKILL)
        for _ in range(cycles):
            server = ServerProcess(agents_state_dir, tmp_path).start()
            stop = threading.Event()
            worker = threading.Thread(target=work, args=(server, stop))
            worker.start()
            time.sleep(rng.uniform(0.05, 0.6))
            server.stop(signal.SIGKILL)  # during a create, a delete or a listing
            stop.set()
            worker.join()
        time.sleep(count * 0.05 + 2)  # let every producer finish its output
        server = ServerProcess(agents_state_dir, tmp_path).start()
        records = sessions(server)  # reconciled at start, before this request
        live = tmux_live(agents_state_dir)
        running = {sid for sid, m in records.items() if m["status"] == "running"}
        orphaned = {sid for sid, m in records.items() if m["status"] == "orphaned"}
        assert set(created) <= set(records)  # nothing acknowledged is lost
        assert live <= set(records)  # nothing live is unrecorded
        assert running <= live  # no phantom running
        assert all(records[sid]["status"] == "killed" for sid in deleted)
        # the rest run on; a DELETE cut short by the kill leaves its session running (not
        # reached), killed (process ended) or, once KILL_GRACE has passed with the process
        # still alive, orphaned: recorded either way, for the user to kill or adopt
        untouched = set(created) - doomed
        assert all(records[sid]["status"] == "running" for sid in untouched)
        assert all(
            records[sid]["status"] in ("running", "killed", "orphaned") for sid in doomed - deleted
        )
        names = [records[sid]["name"] for sid in running]
        assert len(names) == len(set(names))  # no duplicate live names
        for sid in untouched:  # whole transcripts
            data = transcript_bytes(agents_state_dir, sid)
            assert produced_lines(data) == list(range(1, count + 1)), sid
        print(
            f"torture: {cycles} kills, {len(created)} sessions acknowledged, {len(deleted)} "
            f"deleted, {len(records)} records, {len(orphaned)} orphaned, "
            f"{len(untouched)} complete transcripts checked"
        )
        assert len(created) >= 20
    finally:
        if server is not None:
            server.stop(signal.SIGKILL)


def test_orphans_are_adopted_or_killed_on_request(agents_server, agents_state_dir):
    server = agents_server()
    assert server.request("POST", "/api/terminals", {})[0] == 200  # starts our tmux server
    sock = str(agents_state_dir / "tmux" / "socket")
    for name in ("handmade", "stray"):
        subprocess.run(
            ["tmux", "-S", sock, "new-session", "-d", "-s", name, "sleep 1000"], check=True
        )
    assert server.request("POST", "/api/agents/reconcile")[0] == 200  # a listing only reads
    records = sessions(server)
    assert records["handmade"]["status"] == records["stray"]["status"] == "orphaned"
    pid = records["stray"]["pid"]
    status, body = server.request("POST", "/api/agents/sessions/1/adopt")
    assert status == 404
    status, adopted = server.request("POST", "/api/agents/sessions/handmade/adopt")
    assert (status, adopted["status"]) == (200, "running"), adopted
    status, terms = server.request("GET", "/api/terminals")
    assert adopted["name"] in {t["name"] for t in terms}
    status, body = server.request("POST", "/api/agents/sessions/handmade/adopt")
    assert status == 409 and "not orphaned" in body["message"]
    assert server.request("DELETE", "/api/agents/sessions/stray")[0] == 204
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert "stray" not in tmux_live(agents_state_dir)
    assert sessions(server)["stray"]["status"] == "killed"


def test_a_store_held_by_another_process_is_a_503_and_the_refresh_goes_on(
    agents_server, agents_state_dir
):
    """Another process holds the store's write lock past SQLite's busy timeout (10 s; a
    person's ``sqlite3`` shell in a transaction, a stuck CLI): a write answers 503 naming
    the lock, not 500, and the server's refresh tick, which met the same lock, logs it and
    goes on: the orphan made meanwhile is recorded by a later tick, with no reconcile
    asked. (An SQLite error ended the refresh loop for good, unlogged, and was a 500.)"""
    server = agents_server(args=["--AgentsApp.refresh_interval=0.5"])
    status, shell = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201
    holder = sqlite3.connect(agents_state_dir / "sessions.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        sock = str(agents_state_dir / "tmux" / "socket")
        subprocess.run(
            ["tmux", "-S", sock, "new-session", "-d", "-s", "handmade", "sleep 1000"], check=True
        )
        status, body = server.request(
            "PATCH", f"/api/agents/sessions/{shell['id']}", {"title": "while locked"}
        )
        assert status == 503 and "database is locked" in body["message"], (status, body)
        poll(  # the tick that found the orphan could not record it
            lambda: "refresh failed" in server.log_path.read_text(errors="replace"),
            what="the refresh tick to meet the lock",
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    poll(
        lambda: sessions(server).get("handmade", {}).get("status") == "orphaned",
        what="a later tick to record the orphan made while the store was locked",
    )
    assert sessions(server)[shell["id"]]["title"] is None  # the refused write changed nothing


def read_until(server: ServerProcess, stop: threading.Event, answers: list[int]) -> None:
    """GET sessions, shares and terminals in turn until ``stop``; each status into
    ``answers`` (a request the stopping server drops is no answer)."""
    paths = ["/api/agents/sessions", "/api/agents/shares", "/api/terminals"]
    n = 0
    while not stop.is_set():
        with contextlib.suppress(OSError):  # the server went away under this request
            answers.append(server.request("GET", paths[n % 3])[0])
        n += 1


def test_stop_under_load_exits_cleanly_and_shuts_kernels_down(agents_server):
    """SIGTERM while 20 threads read sessions, shares and terminals: the store closes
    only after the statement in flight (it segfaulted 1 stop in 30), so the server exits
    0 and goes on to shut its kernel down. Five stops."""
    for _ in range(5):
        server = agents_server()
        assert server.request("POST", "/api/agents/sessions", {"kind": "shell"})[0] == 201
        status, kernel = server.request("POST", "/api/kernels", {"name": "python3"})
        assert status == 201, kernel
        assert server.proc is not None
        proc = server.proc
        kernels = [
            p for p in psutil.Process(proc.pid).children() if "ipykernel" in " ".join(p.cmdline())
        ]
        assert len(kernels) == 1
        stop = threading.Event()
        answers: list[int] = []
        threads = [
            threading.Thread(target=read_until, args=(server, stop, answers)) for _ in range(20)
        ]
        for t in threads:
            t.start()
        while len(answers) < 200:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        finally:
            stop.set()
            for t in threads:
                t.join(40)
        server.stop()
        assert code == 0, server.log_path.read_text()[-3000:]
        assert not kernels[0].is_running() or kernels[0].status() == psutil.STATUS_ZOMBIE
        # every answer was an answer: the stock ones or, during the drain, a 503
        assert set(answers) <= {200, 503}, sorted(set(answers))
