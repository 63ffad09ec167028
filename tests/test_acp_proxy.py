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

    def __init__(self, tmp_path: Path) -> None:
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
             str(self.state), "--session", SESSION, "--", sys.executable, str(FAKE_ACP)],
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


def test_the_agents_file_and_command_requests_are_refused(proxied, tmp_path):
    """Acceptance 4: an agent's ``fs/write_text_file`` and ``terminal/create`` get an
    error saying they are turned off, nothing is written, and the turn goes on; the
    ``initialize`` offered no client tools."""
    servers: list[Server] = []
    target = tmp_path / "work" / "written.txt"

    async def body() -> None:
        server = Server(proxied.socket, "s")
        servers.append(server)
        await server.open()
        acp_id = (await until(server.ready, what="ready"))["sessionId"]
        for text in (f"/write {target}", "/run"):
            prompt = server.prompt(acp_id, text)
            await until(lambda prompt=prompt: server.answered(prompt), what=text)
        (init,) = proxied.logged("initialize")
        offered = {k: init["client"][k] for k in ("fs", "terminal")}
        assert offered == {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        (write,) = proxied.logged("write")
        (run,) = proxied.logged("run")
        assert write["error"] == run["error"] == -32601, (write, run)
        assert "turned off" in write["message"] and "turned off" in run["message"]
        assert not target.exists()

    run_with(servers, body)


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
    script = "sleep 300 & echo started; exit 7" if how == "it exits" else "sleep 300 & wait"
    proxy = subprocess.Popen(
        [sys.executable, "-m", "jupyter_agents.acp.proxy", "--folder", str(folder),
         "--socket", str(tmp_path / "p.sock"), "--", "/bin/sh", "-c", script],
    )  # fmt: skip
    try:
        poll(lambda: folder.exists() and group_left(folder), what="the agent's group")
        if how == "SIGTERM":
            proxy.send_signal(signal.SIGTERM)
        code = proxy.wait(30)
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
    assert code == (7 if how == "it exits" else 128 + signal.SIGTERM)
    assert group_left(folder) == []
    last = json.loads(list(Journal(folder).after(0))[-1])
    assert (last["event"], last["code"]) == ("exited", code)
