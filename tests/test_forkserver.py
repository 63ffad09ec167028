"""Test servers forked from the worker's warm interpreter
(:mod:`jupyter_agents.pytest_forkserver`) behave as ``python -m jupyter_server`` does:
the same exit codes, the test's environment and PYTHONPATH, their own log, and none
outlives the fork server."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import psutil
import pytest

from jupyter_agents.pytest_forkserver import ForkedProcess, ForkServer
from jupyter_agents.pytest_plugin import FORK_SERVER, ServerProcess, free_port, kill_backends

FAKES = Path(__file__).parent / "fakes"

pytestmark = pytest.mark.skipif(
    os.environ.get("JUPYTER_AGENTS_TEST_FORK") == "0",
    reason="JUPYTER_AGENTS_TEST_FORK=0: servers start fresh, no fork server",
)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 0), (signal.SIGKILL, -9)])
def test_a_forked_server_ends_as_a_fresh_one_would(tmp_path: Path, sig: int, code: int) -> None:
    server = ServerProcess(tmp_path / "state", tmp_path, env={"PYTHONPATH": str(FAKES)})
    try:
        server.start()
        assert isinstance(server.proc, ForkedProcess)
        assert psutil.Process(server.proc.pid).ppid() == FORK_SERVER.pid
        assert server.request("GET", "/api/terminals")[0] == 200
        assert server.proc.poll() is None
        server.proc.send_signal(sig)
        assert server.proc.wait(20) == code
        assert server.proc.poll() == code
    finally:
        server.stop(signal.SIGKILL)
        kill_backends(tmp_path / "state")
    assert b"Jupyter Server" in server.log_path.read_bytes()  # its own log


def test_the_test_environment_and_pythonpath_reach_the_server(tmp_path: Path) -> None:
    """tests/fakes/authorizers.py is importable only through the PYTHONPATH given."""
    server = ServerProcess(
        tmp_path / "state",
        tmp_path,
        env={"PYTHONPATH": str(FAKES)},
        args=["--ServerApp.authorizer_class=authorizers.ReadOnly"],
    )
    try:
        server.start()
        assert isinstance(server.proc, ForkedProcess)
        assert server.request("GET", "/api/terminals")[0] == 200
        assert server.request("POST", "/api/terminals", {})[0] == 403  # read only
        # the state dir it was given ($JUPYTER_AGENTS_STATE_DIR), its working directory
        # (/proc/<pid>/environ still shows the fork server's: it is read from exec time)
        assert (tmp_path / "state" / "sessions.db").exists()
        assert psutil.Process(server.proc.pid).cwd() == str(tmp_path)
    finally:
        server.stop(signal.SIGKILL)
        kill_backends(tmp_path / "state")


def test_closing_the_fork_server_ends_the_servers_still_running(tmp_path: Path) -> None:
    forks = ForkServer()
    env = {"PATH": "/usr/bin:/bin", "JUPYTER_AGENTS_STATE_DIR": str(tmp_path / "state")}
    try:
        version = forks.spawn(["--version"], env, tmp_path, tmp_path / "v.log")
        assert version.wait(30) == 0
        assert (tmp_path / "v.log").read_text().strip()[:1].isdigit()  # what it printed
        args = [f"--port={free_port()}", "--ServerApp.port_retries=0", "--no-browser"]
        server = forks.spawn([*args, "--allow-root"], env, tmp_path, tmp_path / "s.log")
        with pytest.raises(subprocess.TimeoutExpired):
            server.wait(1)
    finally:
        pid = forks.pid
        forks.close()
        kill_backends(tmp_path / "state")
    assert pid is not None and not psutil.pid_exists(pid)
    assert server.wait(5) == -signal.SIGKILL
    assert not psutil.pid_exists(server.pid)


def test_a_new_child_with_a_reused_pid_is_not_taken_for_the_old_one() -> None:
    """The kernel hands out a pid again once its process was reaped (pid_max is 32768
    here, fewer than the processes of a suite run). The fork server reports the old
    child's exit before it forks the new one; the new child with that pid runs, whatever
    the old one's exit code was. A fork server that speaks so (those two lines, then
    nothing until its stdin closes) stands in for the wrap-around no test can force."""
    import sys

    lines = '{"exited": 4242, "returncode": 1}\n{"pid": 4242}\n'
    script = f"import sys; sys.stdout.write({lines!r}); sys.stdout.flush(); sys.stdin.read()"
    server = ForkServer()
    server._proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    reader = threading.Thread(target=server._read, args=(server._proc,), daemon=True)
    reader.start()
    try:
        with server._changed:
            assert server._changed.wait_for(lambda: server._replies, timeout=20)
            assert server._replies.pop(0) == {"pid": 4242}
        assert ForkedProcess(server, 4242, []).poll() is None  # was 1: the old child's
    finally:
        server.close()


def test_a_server_whose_port_another_process_took_starts_on_another(tmp_path: Path) -> None:
    """The port :func:`free_port` picked can be taken before the server binds it (a
    full run met a listener that answered in bytes that are not HTTP): the server
    exits, saying so, and starts again on a new port."""
    server = ServerProcess(tmp_path / "state", tmp_path)
    taken, first_log = server.port, server.log_path
    listener = socket.create_server(("127.0.0.1", taken))

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f")

    threading.Thread(target=answer, daemon=True).start()
    try:
        server.start()
        assert server.port != taken
        assert server.request("GET", "/api/terminals")[0] == 200
        assert f"port {taken} is not available" in first_log.read_text()
    finally:
        listener.close()
        server.stop(signal.SIGKILL)
        kill_backends(tmp_path / "state")
