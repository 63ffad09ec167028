"""The ACP proxy (issue 58): a real ACP agent (a fake one on the SDK, speaking stdio
JSON-RPC as the real ones do) held by a proxy that outlives its client. The client here
is the server's own end of it (:mod:`jupyter_agents.acp.client`), dropped and replaced
the way a killed and restarted Jupyter server drops and replaces it; the permission
request is answered where a server answers one (the state dir's pending requests)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_broker import alive

from jupyter_agents.acp.client import Ledger, ProxyLink
from jupyter_agents.acp.journal import Journal
from jupyter_agents.agents.permissions import Answer, RequestFolder
from jupyter_agents.agents.spool import read_spool, spool_path
from jupyter_agents.pytest_plugin import poll

FAKE_ACP = Path(__file__).parent / "fakes" / "fake_acp_agent.py"
SESSION = "1a2b3c4d5e6f7a8b9c0"

pytest.importorskip("acp", reason="the ACP SDK is a test dependency (pip install -e .[test])")


class Proxied:
    """A proxy (``python -m jupyter_agents.acp.proxy``) running the fake ACP agent for
    session :data:`SESSION` of the state dir ``state``; what the agent logs in ``log``."""

    def __init__(self, tmp_path: Path, tools: str = "") -> None:
        self.state = tmp_path / "state"
        (self.state / "spool").mkdir(parents=True)
        self.folder = self.state / "acp" / SESSION
        self.socket = tmp_path / "acp.sock"
        self.log = tmp_path / "fake-acp.jsonl"
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_agents.acp.proxy", "--folder", str(self.folder),
             "--socket", str(self.socket), "--cwd", str(self.cwd), "--state-dir",
             str(self.state), "--session", SESSION, *(["--client-tools", tools] if tools else []),
             "--", sys.executable, str(FAKE_ACP)],
            env={**os.environ, "FAKE_ACP_LOG": str(self.log)},
        )  # fmt: skip
        poll(lambda: self.socket.exists(), timeout=20, what="the proxy's socket")

    def logged(self, event: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in lines if r.get("event") == event]

    def spooled(self) -> list[str]:
        records, _ = read_spool(spool_path(self.state, SESSION), 0)
        return [r["event"] for r in records]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)


@pytest.fixture
def proxied(tmp_path: Path) -> Any:
    p = Proxied(tmp_path)
    yield p
    p.stop()


@pytest.fixture
def tooled(tmp_path: Path) -> Any:
    """A proxy whose agent may use the client tools (``--client-tools fs,terminal``)."""
    p = Proxied(tmp_path, "fs,terminal")
    yield p
    p.stop()


class Server:
    """What a Jupyter server holds of one ACP session: a link, the records it got, and
    the ledger they fold into; ``request`` sends a request with an id of its own."""

    def __init__(self, socket: Path, name: str) -> None:
        self.socket = socket
        self.name = name
        self.records: list[dict[str, Any]] = []
        self.ledger = Ledger()
        self.link: ProxyLink | None = None
        self._n = 0

    def on_record(self, record: dict[str, Any]) -> None:
        if self.ledger.feed(record):
            self.records.append(record)

    async def open(self, after: int = 0) -> None:
        self.link = ProxyLink(self.socket, self.on_record)
        await self.link.open(after)

    def request(self, method: str, params: dict[str, Any]) -> str:
        self._n += 1
        request_id = f"{self.name}-{self._n}"
        assert self.link is not None
        self.link.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def prompt(self, acp_id: str, text: str) -> str:
        content = [{"type": "text", "text": text}]
        return self.request("session/prompt", {"sessionId": acp_id, "prompt": content})

    def answered(self, request_id: str) -> dict[str, Any] | None:
        for record in self.records:
            message = record.get("msg") or {}
            mine = record["from"] == "agent" and message.get("id") == request_id
            if mine and "method" not in message:
                return dict(message)
        return None

    def ready(self) -> dict[str, Any] | None:
        found = [r for r in self.records if r.get("event") == "ready"]
        return found[0] if found else None

    def texts(self) -> list[str]:
        return [
            r["msg"]["params"]["update"]["content"]["text"]
            for r in self.records
            if r["from"] == "agent"
            and (r.get("msg") or {}).get("method") == "session/update"
            and r["msg"]["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ]


async def until(check: Any, timeout: float = 20, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (found := check()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return found


def run_with(servers: list[Server], body: Any) -> None:
    """Run ``body()`` in a loop; every link of ``servers`` is closed after."""

    async def main() -> None:
        try:
            await body()
        finally:
            for server in servers:
                if server.link is not None:
                    await server.link.close()

    asyncio.run(main())


def test_a_client_dropped_mid_stream_and_mid_permission_loses_nothing(proxied):
    """Acceptance 2 at the proxy: the server's end goes while the agent streams a
    prompt; the agent asks permission while no client is there, and that request is a
    pending request of the session at once; a new client attached from seq 0 sees the
    first one's prompt still in flight; the answer reaches the same agent process, the
    stream goes on, and the new client has every record once, none missed."""
    servers: list[Server] = []

    async def body() -> None:
        first = Server(proxied.socket, "first")
        servers.append(first)
        await first.open()
        ready = await until(first.ready, what="the proxy's ACP session")
        assert ready["how"] == "new"
        acp_id = ready["sessionId"]
        prompt = first.prompt(acp_id, "stream 20")
        await until(lambda: len(first.texts()) >= 3, what="the stream started")
        assert first.link is not None
        await first.link.close()  # the server is killed mid-stream

        folder = RequestFolder(proxied.state)
        (request,) = await until(lambda: folder.pending([SESSION]), what="the pending request")
        assert request.tool == "echo fake" and request.summary["command"] == "echo fake"
        assert request.conversation == acp_id

        second = Server(proxied.socket, "second")
        servers.append(second)
        await second.open(after=0)
        await until(lambda: second.ledger.seq >= Journal(proxied.folder).seq, what="the replay")
        assert json.dumps(prompt) in second.ledger.waiting  # still in flight
        folder.answer(request.id, Answer("allow", time.time(), by="test"))
        done = await until(lambda: second.answered(prompt), what="the first client's prompt")
        assert done["result"]["stopReason"] == "end_turn"

        (start,) = proxied.logged("start")
        (answer,) = proxied.logged("permission")
        assert answer["pid"] == start["pid"] == second.ledger.agent_pid
        assert psutil.pid_exists(start["pid"])
        assert answer["outcome"] == {"outcome": "selected", "optionId": "allow"}
        seqs = [r["seq"] for r in second.records]
        assert seqs == list(range(1, len(seqs) + 1))  # each once, none missed
        assert second.texts() == [
            *[f"part-{i} " for i in range(20)],
            "fake acp heard: stream 20",
            "done: stream 20",
        ]
        assert not second.ledger.waiting and folder.pending([SESSION]) == []
        assert proxied.spooled() == [
            "SessionStart",
            "UserPromptSubmit",
            "PermissionRequest",
            "PermissionEnded",
            "Stop",
        ]

    run_with(servers, body)


def ask(proxied: Proxied, *texts: str) -> list[dict[str, Any]]:
    """Prompt the fake agent with each of ``texts`` in turn (client tools: the fake's
    docstring), each once the last was answered; what the agent logged it got back, one
    record per text."""
    servers: list[Server] = []
    got: list[dict[str, Any]] = []

    async def body() -> None:
        server = Server(proxied.socket, "s")
        servers.append(server)
        await server.open()
        acp_id = (await until(server.ready, what="ready"))["sessionId"]
        for text in texts:
            prompt = server.prompt(acp_id, text)
            await until(lambda prompt=prompt: server.answered(prompt), what=text)
            verb = text.split()[0][1:]
            got.append(proxied.logged(verb)[-1])

    run_with(servers, body)
    return got


def offered(proxied: Proxied) -> dict[str, Any]:
    """The client tools the proxy's ``initialize`` offered."""
    (init,) = proxied.logged("initialize")
    return {k: init["client"][k] for k in ("fs", "terminal")}


def python(code: str, **terminal: Any) -> str:
    """``/run`` JSON that runs ``code`` in this Python (no shell), with more of
    ``terminal/create``'s fields."""
    return json.dumps({"command": sys.executable, "args": ["-c", code], **terminal})


def test_the_agents_file_and_command_requests_are_refused(proxied, tmp_path):
    """Acceptance 4, by default: an agent's ``fs/write_text_file``, ``fs/read_text_file``
    and ``terminal/create`` get an error saying they are turned off and naming the
    setting; nothing is written and no command runs (it would have made a file); the
    turn goes on; the ``initialize`` offered no client tools."""
    target = tmp_path / "work" / "written.txt"
    marker = tmp_path / "work" / "ran"
    (tmp_path / "work" / "there.txt").write_text("secret")
    write, read, run = ask(
        proxied,
        f"/write {target}",
        f"/read {tmp_path / 'work' / 'there.txt'}",
        "/run " + json.dumps({"command": "touch", "args": [str(marker)]}),
    )
    assert offered(proxied) == {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
    }
    assert write["error"] == read["error"] == run["error"] == -32601, (write, read, run)
    for refused in (write, read, run):
        assert "turned off" in refused["message"] and "acp_client_tools" in refused["message"]
    assert not target.exists() and not marker.exists()


def test_the_setting_lets_the_agent_write_read_and_run(tooled, tmp_path):
    """Acceptance 4, allowed (``--client-tools fs,terminal``, what the setting gives a
    proxy): ``initialize`` offers them; a write lands (its bytes in the file, a missing
    folder made); a read returns the file, and a window of its lines; a command runs
    without a shell, in the working directory, with the env asked for, its stdout and
    stderr and exit status reaching the agent; each request and its answer is in the
    journal."""
    work = tmp_path / "work"
    target = work / "made" / "new.txt"
    (work / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 6)))
    code = (
        "import os, sys; print(os.getcwd()); print('to stderr', file=sys.stderr, flush=True);"
        " print(os.environ['FAKE_ASKED']); sys.exit(3)"
    )
    write, read, window, run, shell = ask(
        tooled,
        f"/write {target}",
        f"/read {target}",
        f"/read {work / 'lines.txt'} 2 2",
        "/run " + python(code, env={"FAKE_ASKED": "given"}),
        "/run " + json.dumps({"command": "echo", "args": ["a;b", "$(id)", "*"]}),
    )
    assert offered(tooled) == {
        "fs": {"readTextFile": True, "writeTextFile": True},
        "terminal": True,
    }
    assert write["result"] == "written", write
    assert target.read_bytes() == b"written by the fake ACP agent\n"
    assert read["result"] == {"content": "written by the fake ACP agent\n"}, read
    assert window["result"] == {"content": "line 2\nline 3\n"}, window
    assert run["result"] == {
        "exit": {"exitCode": 3},
        "output": f"{work.resolve()}\nto stderr\ngiven\n",
        "truncated": False,
        "exitStatus": {"exitCode": 3},
    }, run
    assert shell["result"]["output"] == "a;b $(id) *\n"  # no shell saw it
    said = [json.loads(line) for line in Journal(tooled.folder).after(0)]
    messages = [(r["from"], r["msg"]) for r in said if "msg" in r]
    asked = {
        m["id"]: m["method"]
        for side, m in messages
        if side == "agent" and "id" in m and "method" in m
    }
    answered = {m["id"] for side, m in messages if side == "client" and "method" not in m}
    methods = sorted(
        m for i, m in asked.items() if i in answered and "/" in m and "session" not in m
    )
    assert methods == sorted(
        ["fs/write_text_file", "fs/read_text_file", "fs/read_text_file"]
        + 2 * ["terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"]
    ), methods
    started = next(r for r in said if r.get("event") == "started")
    assert started["client_tools"] == ["fs", "terminal"]


def test_paths_outside_the_working_directory_are_refused(tooled, tmp_path):
    """Confined to the session's working directory: an absolute path outside it, one
    that climbs out with ``..``, a write or read through a symbolic link that points
    out, a write to a file hard-linked from outside, a relative path and a command's
    ``cwd`` outside are each refused saying why, and nothing outside changes (no file,
    no command run); a symbolic link that stays inside works."""
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("secret")
    (work / "out").symlink_to(outside)
    (work / "secret-link").symlink_to(secret)
    os.link(secret, work / "hard.txt")
    (work / "inner").mkdir()
    (work / "in").symlink_to(work / "inner")
    marker = outside / "ran"
    got = ask(
        tooled,
        f"/write {outside / 'a.txt'}",
        f"/write {work / '..' / 'outside' / 'b.txt'}",
        f"/write {work / 'out' / 'c.txt'}",
        f"/write {work / 'secret-link'}",
        f"/read {work / 'secret-link'}",
        f"/read {work / 'out' / 'secret.txt'}",
        f"/write {work / 'hard.txt'}",
        "/write relative.txt",
        "/run " + json.dumps({"command": "touch", "args": ["ran"], "cwd": str(outside)}),
        f"/write {work / 'in' / 'd.txt'}",
    )
    *refused, inside = got
    for record, why in zip(
        refused,
        ["outside"] * 6 + ["other hard link", "not absolute", "outside"],
        strict=True,
    ):
        assert record.get("error") == -32602 and why in record["message"], record
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert secret.read_text() == "secret" and not marker.exists()
    assert inside["result"] == "written", inside
    assert (work / "inner" / "d.txt").read_text() == "written by the fake ACP agent\n"


def test_a_huge_output_or_file_is_bounded(tooled, tmp_path):
    """Bounded: a command printing 5 MiB keeps the last ``outputByteLimit`` bytes (its
    tail, whole characters) and says ``truncated``; without a limit it keeps at most
    1 MiB; a read of a 3 MiB file returns at most 1 MiB of whole lines and says where
    to read on."""
    big = tmp_path / "work" / "big.txt"
    big.write_text("".join(f"{i:07d} ééé\n" for i in range(300_000)))
    loud = (
        "import sys\nfor i in range(50_000): sys.stdout.write('é' * 50 + '\\n')\nprint('the end')"
    )
    limited, unlimited, read = ask(
        tooled,
        "/run " + python(loud, output_byte_limit=1001),
        "/run " + python(loud),
        f"/read {big}",
    )
    assert limited["result"]["truncated"] is True and limited["result"]["exit"] == {"exitCode": 0}
    output = limited["result"]["output"]
    assert output.endswith("é\nthe end\n") and len(output.encode()) <= 1001
    assert len(output.encode()) >= 1000  # (a cut character dropped, no more)
    assert unlimited["result"]["truncated"] is True
    assert (1 << 20) - 2 <= len(unlimited["result"]["output"].encode()) <= 1 << 20
    content = read["result"]["content"]
    kept, note = content.rsplit("\n", 1)[0], content.rsplit("\n", 2)[-1]
    assert len(kept.encode()) <= 1 << 20
    lines = kept.split("\n")
    assert lines[0] == "0000000 ééé" and lines[-1] == f"{len(lines) - 1:07d} ééé"  # whole
    assert note == f"[jupyter-agents: cut at {1 << 20} bytes; read on with line={len(lines) + 1}]"
    assert read["result"]["_meta"] == {
        "jupyter-agents": {"truncated": True, "nextLine": len(lines) + 1}
    }


def test_a_terminals_process_group_ends_on_kill_and_with_the_proxy(tooled, tmp_path):
    """``terminal/kill`` ends a command (the agent gets its signal and its output so
    far); one left running ends with the proxy, with the child it started (its whole
    process group)."""
    pids = tmp_path / "work" / "pids"
    up = "import time; print('up', flush=True); time.sleep(300)"
    family = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(300)"
    )
    killed, left = ask(tooled, "/kill " + python(up), "/leave " + python(family))
    assert killed["result"]["exit"] == {"signal": "SIGKILL"}, killed
    assert killed["result"]["output"] == "up\n"
    assert left["result"] == "term-2", left
    poll(lambda: pids.exists() and len(pids.read_text().split()) == 2, what="its pids")
    running = [psutil.Process(int(pid)) for pid in pids.read_text().split()]
    assert all(p.is_running() for p in running)
    tooled.stop()
    _gone, alive = psutil.wait_procs(running, timeout=10)
    assert alive == [], alive


def test_another_user_cannot_reach_the_proxy(proxied):
    """Acceptance 5: the proxy's socket is 0600 in private folders; and where those were
    opened up, the proxy still hangs up on a peer of another uid (``SO_PEERCRED``)
    before it sends a byte of the journal."""
    if os.getuid() != 0:
        pytest.skip("needs root to act as another user")
    assert oct(proxied.socket.stat().st_mode & 0o777) == "0o600"
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except OSError as e:\n"
        "    print('refused', e.errno); sys.exit()\n"
        "try:\n"
        "    s.sendall(b'{\"after\": 0}\\n')\n"
        "    s.settimeout(10)\n"
        "    print('reply', len(s.recv(100)))\n"
        "except (ConnectionResetError, BrokenPipeError):  # closed before or after\n"
        "    print('reply 0')\n"
    )
    run = [sys.executable, "-c", probe, str(proxied.socket)]
    done = subprocess.run(run, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused"), done.stdout
    opened_up = {}
    for d in [*reversed(proxied.socket.parents), proxied.socket]:
        mode = d.stat().st_mode & 0o777
        if mode & 0o001 == 0 or d == proxied.socket:
            opened_up[d] = mode
            os.chmod(d, mode | (0o006 if d == proxied.socket else 0o001))
    try:
        done = subprocess.run(run, capture_output=True, text=True, check=False)
    finally:
        for d, mode in reversed(opened_up.items()):
            os.chmod(d, mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "reply 0", done.stdout  # connected, then hung up on


def group_left(folder: Path) -> list[int]:
    """The live processes of the agent's process group (the journal's ``started``
    pid leads it)."""
    started = [json.loads(line) for line in Journal(folder).after(0)]
    (leader,) = [r["pid"] for r in started if r.get("event") == "started"]
    left = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == leader and proc.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return left


@pytest.mark.parametrize("how", ["it exits", "SIGTERM"])
def test_the_agents_whole_process_group_ends_with_it(tmp_path, how):
    """A CLI that relaunches itself (Gemini CLI's node does) leaves a child that holds
    its stdout: the proxy ends the agent's whole process group, when the agent exits
    and when the proxy is told to end, and so ends itself (it waited forever on the
    child's stdout, and the child ran on)."""
    folder = tmp_path / "acp"
    child = tmp_path / "child.pid"  # the agent's child, written before the agent goes on
    script = f"sleep 300 & echo $! > {child}; " + ("exit 7" if how == "it exits" else "wait")
    proxy = subprocess.Popen(
        [sys.executable, "-m", "jupyter_agents.acp.proxy", "--folder", str(folder),
         "--socket", str(tmp_path / "p.sock"), "--", "/bin/sh", "-c", script],
    )  # fmt: skip
    try:
        if how == "SIGTERM":
            poll(lambda: child.exists() and child.read_text().strip(), what="the child")
            proxy.send_signal(signal.SIGTERM)
        code = proxy.wait(30)
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
    assert code == (7 if how == "it exits" else 128 + signal.SIGTERM)
    # (the child ran: the agent wrote its pid first; an "it exits" agent may be gone
    # before a test could see its group, so the child is what is looked at)
    pid = int(child.read_text())
    poll(lambda: not alive(pid), what="the agent's child ended")
    assert group_left(folder) == []
    last = json.loads(list(Journal(folder).after(0))[-1])
    assert (last["event"], last["code"]) == ("exited", code)


def test_at_most_16_terminals_are_kept(tooled):
    """Bounded: 16 terminals are kept until released; a 17th forgets the oldest whose
    command exited, and one more while all 16 run is refused saying so; every command
    left running ends with the proxy."""
    done = json.dumps({"command": "true"})
    sleeping = json.dumps({"command": "sleep", "args": ["297.5"]})
    got = ask(tooled, f"/leave {done}", *[f"/leave {sleeping}"] * 17)
    assert [r.get("result") for r in got[:-1]] == [f"term-{i}" for i in range(1, 18)]
    assert got[-1]["error"] == -32603 and "16 terminals are running" in got[-1]["message"]

    def sleepers() -> list[psutil.Process]:
        return [
            p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "297.5"]
        ]

    assert len(sleepers()) == 16
    tooled.stop()
    poll(lambda: not sleepers(), timeout=10, what="the commands ended with the proxy")
