"""The pty broker backend: its own guarantees beyond the shared restart suite (which
runs over both backends in test_restart.py and test_websocket.py)."""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jupyter_agents import pytest_plugin
from jupyter_agents.backends.base import SpawnRequest
from jupyter_agents.backends.broker import BrokerBackend
from jupyter_agents.backends.broker.protocol import PREFIX, encode
from jupyter_agents.core.store import SessionStore
from jupyter_agents.pytest_plugin import ServerProcess, TermClient, transcript_bytes
from jupyter_agents.terminal.transcripts import Transcript


@pytest.fixture
def broker(agents_state_dir):
    b = BrokerBackend(agents_state_dir)
    b.start()
    return b  # agents_state_dir's teardown stops it


@pytest.fixture
def no_tmux_server(agents_server, path_without_tmux):
    """A server with ``backend=auto`` and no tmux on PATH (so: the broker)."""

    def start(args: list[str] | None = None) -> ServerProcess:
        return agents_server(env={"PATH": path_without_tmux}, args=args or [])

    return start


def wait_until(check, timeout: float, what: str) -> float:
    """Poll ``check`` until true; the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def broker_pid(state_dir: Path) -> int:
    return int((state_dir / "broker" / "broker.pid").read_text().split()[0])


def replaced(state_dir: Path, old: int) -> bool:
    """Whether a broker other than ``old`` has recorded itself (a new one writes its
    pid file once it listens)."""
    try:
        return broker_pid(state_dir) != old
    except (OSError, ValueError, IndexError):
        return False


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def opened(server: ServerProcess, name: str) -> TermClient:
    client = server.ws(name)
    client.wait_for(lambda c: len(c.messages) >= 2)
    return client


def test_exit_codes_exact_env_and_dead_sessions_held(broker, tmp_path):
    broker.spawn(SpawnRequest("env1", ["/usr/bin/env"], "/", {"ONLY": "this", "LINES": "9"}))
    broker.spawn(SpawnRequest("exit3", ["/bin/sh", "-c", "exit 3"], "/", {}))
    broker.spawn(SpawnRequest("killed", ["/bin/sh", "-c", "kill -9 $$"], "/", {}))
    shell = broker.spawn(SpawnRequest("shell", ["/bin/sh"], str(tmp_path), {}))

    def held():
        return {s.session_id: s for s in broker.list_live()}

    wait_until(lambda: all(held()[s].dead for s in ("env1", "exit3", "killed")), 10, "exits")
    live = held()
    assert (live["exit3"].exit_code, live["killed"].exit_code) == (3, 137)
    assert live["exit3"].dead_since is not None and not live["shell"].dead
    assert live["shell"].pid == shell.pid and psutil.Process(shell.pid).name() == "sh"
    printed = transcript_bytes(broker.state_dir, "env1").decode().split()
    assert sorted(printed) == ["ONLY=this", "TERM=xterm-256color"]  # exactly the given env
    assert oct(broker.transcript_path("exit3").stat().st_mode & 0o777) == "0o700"
    assert oct((broker.transcript_path("exit3") / "0.log").stat().st_mode & 0o777) == "0o600"
    broker.remove("exit3")
    assert "exit3" not in held() and "killed" in held()  # held until removed

    broker.kill_server()
    wait_until(lambda: not alive(shell.pid), 10, "the shell to end with the broker")
    assert broker.list_live() == []
    assert broker.transcript_path("env1").exists()  # transcripts stay


def test_a_broker_started_in_the_background_gives_its_sessions_the_default_signals(
    agents_state_dir,
):
    """A server started in the background (``nohup jupyter lab &``, a service) ignores
    SIGHUP, SIGINT and SIGQUIT, and its broker inherits what it does not handle itself;
    a shell cannot undo an ignored signal, so Ctrl-\\ would not end a command. Each
    session starts with every signal at its default (as tmux's panes do)."""
    from jupyter_agents.backends.broker.protocol import read_frame_sync

    ignored = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)
    before = [signal.signal(sig, signal.SIG_IGN) for sig in ignored]
    try:
        broker = BrokerBackend(agents_state_dir)
        broker.start()  # (its teardown stops it)
    finally:
        for sig, handler in zip(ignored, before, strict=True):
            signal.signal(sig, handler)
    status = Path(f"/proc/{broker_pid(agents_state_dir)}/status").read_text()
    mask = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigIgn:")), 16)
    assert mask & (1 << (signal.SIGQUIT - 1)), "the broker was to inherit an ignored SIGQUIT"
    shell = broker.spawn(SpawnRequest("sh", ["/bin/sh"], "/", {}))
    transcript = Transcript("sh", broker.transcript_path("sh"))

    def sleeping() -> bool:
        """Whether the shell's `sleep` runs in the foreground (a key then reaches it,
        not the shell, which ignores both)."""
        for child in psutil.Process(shell.pid).children():
            try:
                stat = Path(f"/proc/{child.pid}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session tty tpgid
            if "sleep" in stat[: stat.rindex(")")] and fields[2] == fields[5]:
                return True
        return False

    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(broker.socket_path))
        client.sendall(encode({"op": "attach", "sid": "sh"}))
        assert read_frame_sync(client)[0]["op"] == "ok"
        for key, code in ((b"\x03", 130), (b"\x1c", 131)):  # Ctrl-C, Ctrl-\
            client.sendall(encode({"op": "write", "sid": "sh"}, b"sleep 300\r"))
            wait_until(sleeping, 10, "the sleep in the foreground")
            client.sendall(encode({"op": "write", "sid": "sh"}, key))
            wait_until(lambda: not sleeping(), 10, f"{key!r} to end the sleep")
            client.sendall(encode({"op": "write", "sid": "sh"}, b"echo ended-$?\r"))
            ended = f"ended-{code}".encode()
            wait_until(lambda ended=ended: ended in transcript.tail(100_000), 10, str(ended))


def test_socket_is_private_and_other_users_are_refused(broker):
    sock_path = str(broker.socket_path)
    assert oct(broker.broker_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(os.stat(sock_path).st_mode & 0o777) == "0o600"
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except OSError as e:\n"
        "    print('refused', e.errno); sys.exit()\n"
        "try:\n"
        f"    s.sendall({encode({'op': 'ping'})!r})\n"
        "    print('reply', len(s.recv(100)))\n"
        "except (ConnectionResetError, BrokenPipeError):  # closed before or after\n"
        "    print('reply 0')\n"
    )
    if os.getuid() != 0:
        pytest.skip("needs root to act as another user")
    run = [sys.executable, "-c", probe, sock_path]
    done = subprocess.run(run, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("refused")  # 0700 dir, 0600 socket
    # even through open permissions, the broker checks the peer's uid (SO_PEERCRED)
    opened_up = {}
    for d in [*reversed(broker.socket_path.parents), broker.socket_path]:
        mode = d.stat().st_mode & 0o777
        if mode & 0o001 == 0 or d == broker.socket_path:
            opened_up[d] = mode
            os.chmod(d, mode | (0o006 if d == broker.socket_path else 0o001))
    try:
        done = subprocess.run(run, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        out = done.stdout
    finally:
        for d, mode in reversed(opened_up.items()):
            os.chmod(d, mode)
    assert out.strip() == "reply 0"  # closed without a word
    assert broker.ping() is not None


FUZZ_COUNT = {"n": 0}


def send_raw(path: str, data: bytes) -> None:
    FUZZ_COUNT["n"] += 1
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(path)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass  # the broker may close first


VALID = [
    encode({"op": "ping"}),
    encode({"op": "list"}),
    encode({"op": "snapshot", "sid": "fz"}),
    encode({"op": "write", "sid": "fz"}, b"echo hi\r"),
    encode({"op": "resize", "sid": "fz", "rows": 30, "cols": 90}),
    encode({"op": "attach", "sid": "fz"}),
]
HEADERS = st.dictionaries(
    st.sampled_from(["op", "sid", "rows", "cols", "argv", "env", "cwd"]),
    st.one_of(
        st.sampled_from(
            ["ping", "list", "spawn", "write", "resize", "attach", "remove", "nope", "fz"]
        ),
        st.integers(-(2**40), 2**40),
        st.booleans(),
        st.none(),
        st.lists(st.text(max_size=5), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.text(max_size=20),
    ),
)


def test_malformed_frames_never_kill_the_broker(broker):
    shell = broker.spawn(SpawnRequest("fz", ["/bin/sh"], "/", {}))
    path = str(broker.socket_path)
    FUZZ_COUNT["n"] = 0

    @settings(
        max_examples=250,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        noise=st.binary(max_size=64),
        cut=st.integers(0, 200),
        pick=st.integers(0, len(VALID) - 1),
        header=HEADERS,
        lengths=st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    )
    def fuzz(noise, cut, pick, header, lengths):
        # a well-formed remove (or a write of noise: a Ctrl-D ends the shell) of the
        # session is a request the broker must carry out, not a bad frame
        assume(not (header.get("sid") == "fz" and header.get("op") in ("remove", "write")))
        send_raw(path, noise)  # random bytes
        send_raw(path, VALID[pick][:cut])  # truncated valid frames
        send_raw(path, PREFIX.pack(*lengths) + noise)  # lying lengths
        raw = json.dumps(header).encode()  # well-framed, ill-typed requests
        send_raw(path, PREFIX.pack(len(raw), len(noise)) + raw + noise)

    fuzz()
    print(f"fuzz: {FUZZ_COUNT['n']} malformed or truncated frames sent")
    assert broker.ping() is not None
    assert "Traceback" not in broker.log_path.read_text()  # every bad frame was handled
    listed = [s.session_id for s in broker.list_live() if s.session_id == "fz"]
    assert listed == ["fz"], broker.log_path.read_text()[-3000:]  # the log says why
    assert alive(shell.pid)


def test_a_bad_frame_is_answered_after_the_requests_before_it_then_hung_up(broker):
    """Requests on one connection are answered in order; a frame that breaks the
    protocol gets an error reply, then the broker hangs up without reading further.
    A peer that has stopped sending (half-closed) still gets every answer, also those
    the broker had to queue: two snapshots of ~900 KB fill the socket's buffers."""
    from jupyter_agents.backends.broker.protocol import read_frame_sync

    printed = 900_000
    script = f"yes 0123456789 | head -c {printed}; sleep 60"
    broker.spawn(SpawnRequest("bad", ["/bin/sh", "-c", script], "/", {}))
    wait_until(lambda: len(transcript_bytes(broker.state_dir, "bad")) >= printed, 30, "the output")
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(broker.socket_path))
        s.sendall(
            encode({"op": "ping"})
            + encode({"op": "snapshot", "sid": "bad"}) * 2
            + encode({"op": "no-such-op"})
            + encode({"op": "ping"})
        )
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.5)  # the broker writes what the socket takes and queues the rest
        replies = []
        with pytest.raises(ConnectionResetError):  # read_frame_sync's EOF
            while True:
                replies.append(read_frame_sync(s))
    assert [r["op"] for r, _ in replies] == ["ok", "ok", "ok", "error"], replies
    assert replies[0][0]["pid"] == broker_pid(broker.state_dir)
    assert all(b"0123456789\r\n" * 1000 in body for _, body in replies[1:3])
    assert replies[3][0]["error"] == "unknown op 'no-such-op'"
    assert broker.ping() is not None


def test_a_client_that_falls_behind_catches_up_from_the_transcript(broker):
    from jupyter_agents.backends.broker.protocol import read_frame_sync

    broker.spawn(SpawnRequest("busy", ["/bin/sh"], "/", {}))
    slow = socket.socket(socket.AF_UNIX)
    slow.connect(str(broker.socket_path))
    slow.sendall(encode({"op": "attach", "sid": "busy"}))
    assert read_frame_sync(slow)[0]["op"] == "ok"
    transcript = Transcript("busy", broker.transcript_path("busy"))
    slow.sendall(encode({"op": "write", "sid": "busy"}, b"seq 1 2000000; echo END-$((1+1))\r"))
    wait_until(lambda: b"END-2" in transcript.tail(100), 60, "the output to end")
    # it asks for a snapshot while far behind; only now does it read what it is owed
    slow.sendall(encode({"op": "snapshot", "sid": "busy"}))
    rss = psutil.Process(int(broker.pid_path.read_text().split()[0])).memory_info().rss
    ops, received = [], bytearray()
    slow.settimeout(10)
    while True:
        header, payload = read_frame_sync(slow)
        ops.append(header["op"])
        if header["op"] != "output":
            break
        received += payload
    full = transcript.tail(sys.maxsize)
    assert len(full) > 14_000_000
    assert "resync" not in ops and ops[-1] == "ok"  # the snapshot came after the catch-up
    assert full.endswith(bytes(received)) and b"\n1999999\r\n2000000\r\n" in received
    assert bytes(received).count(b"\n1000000\r\n") == 1  # every byte exactly once
    assert rss < 120_000_000  # it never held the 14 MB it owed us in memory
    slow.close()


def test_output_is_in_the_transcript_before_a_client_is_sent_it(tmp_path):
    """The broker records a read before it sends it on, so a SIGKILL at any moment
    cannot leave a client with bytes the transcript lacks. It sent first (for the
    echo's sake: a write() of a few microseconds), and the SIGKILL test below once
    found ``BEFORE-42`` on a client's screen and not in the transcript: the broker,
    descheduled between the two on a loaded machine, was killed before it wrote. Each
    send is looked at here, which needs no luck."""
    from jupyter_agents.backends.broker.fanout import HeldPty
    from jupyter_agents.backends.broker.recorder import Recorder
    from jupyter_agents.backends.broker.server import Broker

    broker = Broker(tmp_path)
    recorder = Recorder("s1", tmp_path / "transcripts" / "s1", 1 << 20)
    session = HeldPty("s1", None, recorder)  # type: ignore[arg-type]  # no pty is read
    recorded_at_send: list[bytes] = []

    class Client:
        def send_output(self, sid: str, frame: bytes, offset: int) -> None:
            recorded_at_send.append(transcript_bytes(tmp_path, sid))

    session.clients.add(Client())  # type: ignore[arg-type]
    broker._output(session, b"BEFORE-42\r\n")
    broker._output(session, b"AFTER-42\r\n")
    recorder.close()
    assert recorded_at_send == [b"BEFORE-42\r\n", b"BEFORE-42\r\nAFTER-42\r\n"]


def test_sigkilled_broker_is_replaced_and_sessions_interrupted(no_tmux_server, capsys):
    server = no_tmux_server()
    first = server.request("POST", "/api/terminals", {})[1]["name"]
    server.request("POST", "/api/terminals", {})
    c = opened(server, first)
    c.stdin("echo BEFORE-$((40+2))\r")
    c.wait_for("BEFORE-42")
    c.close()  # no viewer left: only the heartbeat can notice
    _, sessions = server.request("GET", "/api/agents/sessions")
    assert {s["backend"] for s in sessions} == {"broker"}  # auto, no tmux on PATH
    old = broker_pid(server.state_dir)
    store = SessionStore(server.state_dir / "sessions.db")

    os.kill(old, signal.SIGKILL)
    took = wait_until(
        lambda: {s.status for s in store.list()} == {"interrupted"}, 15, "interrupted records"
    )
    # the shells' ends are recorded when they end (the server watches their processes);
    # the heartbeat replaces the broker on its own beat
    said = "the pty broker was gone; started a new one"
    took = max(
        took,
        wait_until(
            lambda: replaced(server.state_dir, old) and said in server.log_path.read_text(),
            15,
            "a new broker",
        ),
    )
    with capsys.disabled():
        print(f"\n[broker] SIGKILLed broker noticed, replaced, reconciled in {took:.1f}s")
    for s in sessions:
        assert (server.state_dir / "transcripts" / s["id"]).is_dir()
    first_id = next(s["id"] for s in sessions if s["name"] == first)
    assert b"BEFORE-42" in transcript_bytes(server.state_dir, first_id)

    new = server.request("POST", "/api/terminals", {})[1]["name"]
    c2 = opened(server, new)
    c2.stdin("echo AFTER-$((6*7))\r")
    c2.wait_for("AFTER-42")
    c2.close()


def test_hung_broker_is_ended_and_replaced(no_tmux_server):
    server = no_tmux_server(
        ["--BrokerBackend.heartbeat_interval=0.5", "--BrokerBackend.ping_timeout=0.5"]
    )
    server.request("POST", "/api/terminals", {})
    store = SessionStore(server.state_dir / "sessions.db")
    shell = store.list()[0].pid
    old = broker_pid(server.state_dir)
    os.kill(old, signal.SIGSTOP)
    try:
        wait_until(lambda: store.list()[0].status == "interrupted", 20, "interrupted record")
    finally:
        if alive(old):
            os.kill(old, signal.SIGCONT)
    wait_until(lambda: not alive(old) and not alive(shell), 10, "the hung broker to end")
    wait_until(lambda: replaced(server.state_dir, old), 10, "a new broker")


def read_all(client: TermClient, stop: threading.Event, seen: list[int]) -> None:
    """Read (and drop) every frame the viewer gets, as a browser tab would, until stopped."""
    client.ws.settimeout(0.5)
    while not stop.is_set():
        try:
            seen[0] += len(client.ws.recv())
        except Exception:  # timeout, or closed at the end
            continue


def flood_finished(transcript: Transcript, size: int) -> bool:
    return transcript.size() >= size and b"FLOOD-2-DONE" in transcript.tail(200)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_flood_does_not_starve_others_or_grow_the_broker(no_tmux_server, capsys):
    server = no_tmux_server()
    flood = server.request("POST", "/api/terminals", {})[1]["name"]
    typing = server.request("POST", "/api/terminals", {})[1]["name"]
    sessions = {s["name"]: s["id"] for s in server.request("GET", "/api/agents/sessions")[1]}
    broker = psutil.Process(broker_pid(server.state_dir))
    # a client of the broker that never reads: its queue must stay bounded
    stalled = socket.socket(socket.AF_UNIX)
    stalled.connect(str(server.state_dir / "broker" / "socket"))
    stalled.sendall(encode({"op": "attach", "sid": sessions[flood]}))
    viewer = opened(server, flood)  # a viewer that reads everything the server sends
    stop, seen = threading.Event(), [0]
    reader = threading.Thread(target=read_all, args=(viewer, stop, seen), daemon=True)
    reader.start()
    term = opened(server, typing)
    transcript = pytest_plugin.transcript(server.state_dir, sessions[flood])

    size = 200_000_000
    viewer.stdin(f"yes $(printf '%0100d' 0) | head -c {size}; echo FLOOD-$((1+1))-DONE\r")
    latencies, rss = [], []
    started = time.monotonic()
    while not flood_finished(transcript, size):
        n = len(latencies)
        t = time.monotonic()
        term.stdin(f"k{n:05d}")
        term.wait_for(f"k{n:05d}", timeout=60)
        latencies.append(time.monotonic() - t)
        term.stdin("\x15")  # erase the line
        rss.append(broker.memory_info().rss)
        time.sleep(0.05)
        assert time.monotonic() - started < 240, "the flood did not finish"
    took = time.monotonic() - started
    stop.set()
    reader.join()
    viewer.close()
    term.stdin("echo CALM-$((20+22))\r")
    term.wait_for("CALM-42")
    rss.append(broker.memory_info().rss)
    late = opened(server, flood)  # a new viewer sees the screen after the flood
    assert "FLOOD-2-DONE" in late.messages[1][1]
    late.close()
    with capsys.disabled():
        print(
            f"\n[broker] 200 MB flood in {took:.1f}s; interactive echo during it: "
            f"{len(latencies)} samples, median {statistics.median(latencies) * 1000:.0f} ms, "
            f"worst {max(latencies) * 1000:.0f} ms; broker peak RSS {max(rss) / 1e6:.1f} MB; "
            f"its viewer had read {seen[0] / 1e6:.1f} MB of frames by then"
        )
    assert transcript.size() > size  # every byte was written (the last 32 MiB kept)
    assert max(rss) < 200e6
    stalled.close()
    term.close()


def test_debug_attach_command(broker):
    from ptyprocess import PtyProcess

    shell = broker.spawn(SpawnRequest("att", ["/bin/sh"], "/", {"PS1": "$ "}))
    client = PtyProcess.spawn(broker.debug_attach_command("att"), dimensions=(24, 80))
    seen = b""

    def read_until(text: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 10
        while text not in seen:
            left = deadline - time.monotonic()
            assert left > 0, seen
            if select.select([client.fd], [], [], left)[0]:
                seen += client.read(4096)

    # it takes the alternate screen once attached: keys typed now reach the session
    read_until(b"\x1b[?1049h")
    client.write(b"echo ATT-$((1+1))\r")
    read_until(b"ATT-2")
    client.write(b"\x1d")  # Ctrl-] detaches
    # the main screen back, and why it left (tmux's words)
    read_until(b"\x1b[?1049l[detached (from session att)]")
    wait_until(lambda: not client.isalive(), 10, "the attach client to leave")
    assert client.exitstatus == 0
    assert alive(shell.pid)


class _Recorder:
    """A stream listener that records what it is told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_output(self, data: str) -> None:
        self.events.append(("output", data))

    def on_output_lost(self) -> None:
        self.events.append(("lost", None))

    def on_exit(self, exit_code: int | None) -> None:
        self.events.append(("exit", exit_code))


class _Transport:
    """Enough of a transport for a :class:`FrameReader` fed by hand."""

    def __init__(self) -> None:
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


_STREAM_FRAMES = [
    encode({"op": "ok"}),  # the attach reply
    encode({"op": "output"}, b"a1"),
    encode({"op": "output"}, b"b2\xe2\x82"),  # a character split across frames
    encode({"op": "output"}, b"\xac"),
    encode({"op": "ok"}, b"SNAP"),  # the snapshot's reply, between output
    encode({"op": "output"}, b"c3"),
    encode({"op": "output"}, b"d4"),
    encode({"op": "exit", "exit_code": 3}),
]


def _feed_stream(reads: list[bytes]) -> list[tuple[str, object]]:
    """A :class:`BrokerStream` whose connection brings ``reads`` (handed to its frame
    reader by hand, before its own connection is tried): what its listener was told,
    in order, the snapshot as ``("snapshot", text)``."""
    import asyncio

    from jupyter_agents.backends.broker.client import BrokerStream
    from jupyter_agents.backends.broker.protocol import FrameReader

    async def run() -> list[tuple[str, object]]:
        listener = _Recorder()
        stream = BrokerStream(Path("/nonexistent/socket"), "s1", listener)
        stream.snapshot(lambda text: listener.events.append(("snapshot", text)))
        gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reader = FrameReader(stream._dispatch, gone, stream._release_output)
        reader.connection_made(_Transport())  # type: ignore[arg-type]
        for data in reads:
            reader.data_received(data)
        events = list(listener.events)
        assert stream._task is not None  # its own connection fails: no broker is there
        await asyncio.wait([stream._task], timeout=30)
        stream.close()
        return events

    return asyncio.run(run())


def test_broker_output_of_one_read_is_one_piece_in_order():
    """Output frames that one read brings go on as one piece (one websocket message),
    never past a reply or the end between them, and no byte is lost or moved."""
    events = _feed_stream([b"".join(_STREAM_FRAMES)])
    assert events == [
        ("output", "a1b2€"),
        ("snapshot", "SNAP"),
        ("output", "c3d4"),
        ("exit", 3),
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=sum(map(len, _STREAM_FRAMES))), max_size=12))
def test_broker_output_split_into_any_reads_arrives_whole_and_in_order(cuts):
    whole = b"".join(_STREAM_FRAMES)
    bounds = sorted({0, len(whole), *cuts})
    events = _feed_stream([whole[a:b] for a, b in itertools.pairwise(bounds)])
    snapshot = events.index(("snapshot", "SNAP"))
    before = "".join(str(d) for kind, d in events[:snapshot] if kind == "output")
    after = "".join(str(d) for kind, d in events[snapshot + 1 : -1] if kind == "output")
    assert (before, after, events[-1]) == ("a1b2€", "c3d4", ("exit", 3))
    assert all(kind == "output" for kind, _ in events[:snapshot] + events[snapshot + 1 : -1])
