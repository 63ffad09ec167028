"""The ACP proxy (issue 58): a real ACP agent (a fake one on the SDK, stdio JSON-RPC as
the real ones speak it) held by a proxy that outlives its client; the client here is
the server's own end of it (:mod:`jupyter_agents.acp.client`), killed and replaced the
way a restarted Jupyter server replaces it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_agents.acp.client import Ledger, ProxyLink, refusal
from jupyter_agents.acp.journal import Journal
from jupyter_agents.pytest_plugin import poll

FAKE_ACP = Path(__file__).parent / "fakes" / "fake_acp_agent.py"

pytest.importorskip("acp", reason="the ACP SDK is a test dependency (pip install -e .[test])")


class Proxied:
    """A proxy (``python -m jupyter_agents.acp.proxy``) running the fake ACP agent, its
    journal in ``folder``, what the agent logs in ``log``."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "acp"
        self.socket = tmp_path / "acp.sock"
        self.log = tmp_path / "fake-acp.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_agents.acp.proxy", "--folder", str(self.folder),
             "--socket", str(self.socket), "--", sys.executable, str(FAKE_ACP)],
            env={**os.environ, "FAKE_ACP_LOG": str(self.log)},
        )  # fmt: skip
        poll(lambda: self.socket.exists(), timeout=20, what="the proxy's socket")

    def logged(self, event: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in lines if r.get("event") == event]

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
            message = record.get("msg")
            if record.get("from") == "agent" and isinstance(message, dict):
                answer = refusal(message)
                if answer is not None and self.link is not None:
                    self.link.send(answer)

    async def open(self, after: int = 0) -> None:
        self.link = ProxyLink(self.socket, self.on_record)
        await self.link.open(after)

    def request(self, method: str, params: dict[str, Any]) -> str:
        self._n += 1
        request_id = f"{self.name}-{self._n}"
        assert self.link is not None
        self.link.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def answered(self, request_id: str) -> dict[str, Any] | None:
        for record in self.records:
            message = record.get("msg") or {}
            if (
                record["from"] == "agent"
                and message.get("id") == request_id
                and "method" not in message
            ):
                return message
        return None

    def updates(self) -> list[dict[str, Any]]:
        return [
            r["msg"]["params"]["update"]
            for r in self.records
            if r["from"] == "agent" and r.get("msg", {}).get("method") == "session/update"
        ]


async def until(check: Any, timeout: float = 20, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (found := check()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return found


async def started(server: Server, cwd: Path) -> str:
    """initialize and session/new through ``server``; the ACP session id."""
    init = server.request(
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
        },
    )
    await until(lambda: server.answered(init), what="initialize")
    new = server.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    reply = await until(lambda: server.answered(new), what="session/new")
    return str(reply["result"]["sessionId"])


def test_a_client_killed_mid_permission_and_mid_stream_loses_nothing(proxied, tmp_path):
    """Acceptance 2 at the proxy: the server's end dies while the agent streams a prompt
    and then asks permission; a new one attached from seq 0 has the request pending
    with its id, its answer reaches the same agent process, and the stream goes on with
    every record once, none missed."""

    links: list[Server] = []

    async def run() -> None:
        first = Server(proxied.socket, "first")
        links.append(first)
        await first.open()
        acp_id = await started(first, tmp_path)
        prompt = first.request(
            "session/prompt",
            {"sessionId": acp_id, "prompt": [{"type": "text", "text": "stream 20"}]},
        )
        await until(lambda: len(first.updates()) >= 3, what="the stream started")
        await first.link.close()  # the server is killed mid-stream
        # the agent goes on meanwhile: the rest of the stream, then the permission request
        await until(lambda: proxied.logged("start"), what="the agent's start")
        journal = Journal(proxied.folder)
        await until(
            lambda: any(b"session/request_permission" in line for line in journal.after(0)),
            what="the permission request, asked while no client was there",
        )

        second = Server(proxied.socket, "second")
        links.append(second)
        await second.open(after=0)
        await until(lambda: second.ledger.asked, what="the pending request")
        (asked,) = second.ledger.asked.values()
        first_asked = [
            r
            for r in first.records
            if (r.get("msg") or {}).get("method") == "session/request_permission"
        ]
        assert first_asked == []  # asked after the first went
        assert prompt in {json.loads(k) for k in second.ledger.waiting}  # still in flight
        allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
        second.link.send({"jsonrpc": "2.0", "id": asked["id"], "result": allow})
        done = await until(
            lambda: second.answered(prompt), what="the first server's prompt answered"
        )
        assert done["result"]["stopReason"] == "end_turn"
        (answer,) = proxied.logged("permission")
        (start,) = proxied.logged("start")
        assert answer["pid"] == start["pid"] == asked_pid(second)
        assert answer["outcome"] == {"outcome": "selected", "optionId": "allow"}
        seqs = [r["seq"] for r in second.records]
        assert seqs == list(range(1, len(seqs) + 1))  # each once, none missed
        parts = [
            u["content"]["text"]
            for u in second.updates()
            if u["sessionUpdate"] == "agent_message_chunk"
        ]
        assert parts[:20] == [f"part-{i} " for i in range(20)]
        assert parts[20:] == ["fake acp heard: stream 20", "done: stream 20"]
        assert not second.ledger.asked and not second.ledger.waiting

    def asked_pid(server: Server) -> int:
        assert server.ledger.agent_pid is not None
        assert psutil.Process(server.ledger.agent_pid).is_running()
        return server.ledger.agent_pid

    async def main() -> None:
        try:
            await run()
        finally:
            for server in links:
                if server.link is not None:
                    await server.link.close()

    asyncio.run(main())
