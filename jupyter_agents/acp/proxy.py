"""The ACP proxy: holds an agent's stdio for as long as the agent runs, whether or not a
Jupyter server is there to talk to it.

Run as ``python -m jupyter_agents.acp.proxy --folder DIR -- AGENT_ARGV...``, as the
program of a session (a tmux pane or a broker pty: the same owner as terminals, so it
outlives the server). It starts the agent with pipes for stdin and stdout (stderr goes
to the session's terminal, where the agent's own logs stay readable), journals every
line of JSON-RPC either way (:mod:`jupyter_agents.acp.journal`, in ``DIR``), and serves
one client at a time on ``DIR/socket`` (0600 in the 0700 ``DIR``; a peer running as
another user is hung up on before a byte is sent).

The client's side of the socket, one JSON object per line:

- its first line is ``{"after": N}``: the proxy sends every journal record after ``N``
  that is still kept, then each new record as it is written, in ``seq`` order, each
  once; no record is written between the two (one event loop does both);
- each later line is a JSON-RPC message for the agent: journaled (``from: client``;
  that record is sent back like any other, so what a client gets is the journal),
  then written to the agent's stdin. A line that is not a JSON object, or is longer
  than :data:`~jupyter_agents.acp.journal.MAX_LINE`, ends the connection.

A client that connects while another is attached replaces it (a restarted server
comes back while the old connection is not yet seen closed). The agent runs in a
process group of its own, which is ended whole: when the agent exits (what is left of
its group with it, once its output is read), and on SIGTERM or SIGHUP (SIGTERM, then
SIGKILL after :data:`GRACE` s). Then the proxy journals ``exited`` with the agent's
code, hangs up and exits with that code.

``--client-tools fs,terminal`` (any of them; default none) lets the agent use those
client tools (:mod:`jupyter_agents.acp.tools`): the proxy takes them at its start and
keeps them for its life, and its journal's ``started`` record names them. The
terminals it runs for the agent end with it, whichever way it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from jupyter_agents.acp.clientside import ASK_WAIT, ClientSide
from jupyter_agents.acp.journal import MAX_LINE, MAX_TEXT, Journal, check_folder
from jupyter_agents.acp.tools import TOOLS
from jupyter_agents.backends.broker.protocol import peer_not_ours
from jupyter_agents.core.paths import ensure_private_dir

#: seconds the agent has to end after SIGTERM before SIGKILL
GRACE = 5.0
#: seconds what the agent wrote has to be read once it exited, before whatever of its
#: group still holds its stdout is ended
DRAIN = 2.0
#: bytes read from a pipe or socket at a time
CHUNK = 1 << 16
#: bytes queued for a client before it is hung up on (it reattaches and reads the
#: journal instead: nothing is lost)
CLIENT_BUFFER = 8 << 20
#: seconds between looks for the answers of pending permission requests
POLL = 0.1


class Lines:
    """Splits a byte stream into lines of at most ``limit`` bytes: :meth:`feed` returns
    the whole lines (with their newline) and, for each longer one, its length as an int
    (the line itself is not kept)."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.limit = limit
        self._pending = bytearray()
        self._skipping = 0  # bytes of an overlong line thrown away so far

    def feed(self, data: bytes) -> list[bytes | int]:
        out: list[bytes | int] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                rest = data[start:]
                if self._skipping:
                    self._skipping += len(rest)
                elif len(self._pending) + len(rest) > self.limit:
                    self._skipping = len(self._pending) + len(rest)
                    self._pending.clear()
                else:
                    self._pending += rest
                return out
            piece = data[start : end + 1]
            if self._skipping:
                out.append(self._skipping + len(piece))
                self._skipping = 0
            elif len(self._pending) + len(piece) > self.limit + 1:
                out.append(len(self._pending) + len(piece))
                self._pending.clear()
            else:
                out.append(bytes(self._pending + piece))
                self._pending.clear()
            start = end + 1


class Proxy:
    """One agent's proxy (see the module's docstring)."""

    def __init__(
        self,
        folder: Path,
        argv: Sequence[str],
        socket_path: Path | None = None,
        cwd: str | None = None,
        state_dir: Path | None = None,
        session_id: str | None = None,
        resume: str | None = None,
        ask_wait: float = ASK_WAIT,
        tools: Sequence[str] = (),
    ) -> None:
        self.folder = check_folder(folder)
        self.argv = list(argv)
        self.socket_path = socket_path or self.folder / "socket"
        self.journal = Journal(self.folder)
        self.clientside = ClientSide(
            self._send_to_agent,
            cwd or os.getcwd(),
            state_dir=state_dir,
            session_id=session_id,
            resume=resume,
            ask_wait=ask_wait,
            on_ready=lambda ready: self._send(self.journal.append("proxy", event="ready", **ready)),
            tools=tools,
        )
        self._client: asyncio.StreamWriter | None = None
        self._agent: asyncio.subprocess.Process | None = None
        self._polling: asyncio.Task[None] | None = None

    async def run(self) -> int:
        """Start the agent, serve clients until it exits; its exit code (128 + the
        signal's number for one killed by a signal)."""
        ensure_private_dir(self.socket_path.parent)
        self.socket_path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o600)
        try:
            self._agent = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own group: ended whole (a CLI relaunches itself)
            )
        except OSError as e:
            self.journal.append("proxy", event="failed", argv=self.argv, error=str(e))
            print(f"jupyter-agents acp proxy: cannot start {self.argv[0]}: {e}", file=sys.stderr)
            server.close()
            return 127
        self.journal.append(
            "proxy",
            event="started",
            pid=self._agent.pid,
            argv=self.argv,
            client_tools=sorted(self.clientside.tools.allowed),
        )
        self.clientside.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self._end_agent)
        reading = asyncio.get_running_loop().create_task(self._read_agent())
        await self._exited()
        # what it wrote before it ended is read; a process it left behind that still
        # holds its stdout (a CLI's relaunched self) is ended with its group
        try:
            await asyncio.wait_for(asyncio.shield(reading), DRAIN)
        except asyncio.TimeoutError:
            self._signal_group(signal.SIGKILL)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        self._signal_group(signal.SIGKILL)  # nothing of it outlives the proxy
        code = await self._agent.wait()  # (its pipes are closed now: asyncio waits for them)
        code = 128 - code if code < 0 else code
        self.clientside.close()
        if self._polling is not None:
            self._polling.cancel()
        self._send(self.journal.append("proxy", event="exited", code=code))
        server.close()
        if self._client is not None:
            self._client.close()
        self.socket_path.unlink(missing_ok=True)
        return code

    async def _exited(self) -> None:
        """Until the agent's own process exits, whether or not its pipes are closed
        (``Process.wait`` waits for both; a child of its may hold them): a pidfd where
        the platform has one, else its return code looked at every 0.2 s."""
        agent = self._agent
        assert agent is not None
        try:
            fd = os.pidfd_open(agent.pid)
        except (AttributeError, OSError):  # none here, or it is gone already
            while agent.returncode is None:
                await asyncio.sleep(0.2)
            return
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not ended.done():
                ended.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await ended
        finally:
            loop.remove_reader(fd)
            os.close(fd)

    async def _read_agent(self) -> None:
        """Journal (and pass on) each line the agent writes, until its stdout closes."""
        assert self._agent is not None and self._agent.stdout is not None
        lines = Lines()
        while data := await self._agent.stdout.read(CHUNK):
            for line in lines.feed(data):
                self._from_agent(line)

    def _signal_group(self, sig: int) -> None:
        """Send ``sig`` to the agent's process group (it leads it: started in a session
        of its own)."""
        if self._agent is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._agent.pid, sig)

    def _from_agent(self, line: bytes | int) -> None:
        if isinstance(line, int):
            self._send(self.journal.append("proxy", event="dropped", side="agent", bytes=line))
            return
        message = _object(line)
        if message is None:
            text = line.decode(errors="replace").rstrip("\n")[:MAX_TEXT]
            self._send(self.journal.append("agent", text=text))
            return
        self._send(self.journal.append_message("agent", line))
        self.clientside.on_agent(message)
        if self.clientside.poll() and self._polling is None:
            self._polling = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """Look for the answers of pending requests while any waits."""
        try:
            while self.clientside.poll():
                await asyncio.sleep(POLL)
        finally:
            self._polling = None

    def _send_to_agent(self, message: dict[str, object]) -> None:
        """What the proxy's client part sends the agent: journaled as the client's."""
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        self._send(self.journal.append_message("client", line))
        agent = self._agent
        if agent is not None and agent.stdin is not None and agent.returncode is None:
            with contextlib.suppress(ConnectionError):
                agent.stdin.write(line)

    def _send(self, record: bytes) -> None:
        client = self._client
        if client is None or client.is_closing():
            return
        if client.transport.get_write_buffer_size() > CLIENT_BUFFER:
            client.close()  # it reads the journal when it comes back
            return
        client.write(record)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None and peer_not_ours(sock) is not None:
            writer.close()
            return
        lines = Lines()
        attached = False
        try:
            while data := await reader.read(CHUNK):
                for line in lines.feed(data):
                    message = None if isinstance(line, int) else _object(line)
                    if message is None:
                        return
                    if not attached:
                        after = message.get("after")
                        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
                            return
                        self._attach(writer, after)
                        attached = True
                    elif writer is self._client:
                        assert isinstance(line, bytes)
                        self.clientside.on_client(message)
                        await self._to_agent(line)
                    else:
                        return  # replaced by a newer client
        except ConnectionError:
            pass
        finally:
            if self._client is writer:
                self._client = None
            writer.close()

    def _attach(self, writer: asyncio.StreamWriter, after: int) -> None:
        """Make ``writer`` the client, with every record after ``after`` queued to it
        (from the journal, then live: nothing is written between the two)."""
        if self._client is not None:
            self._client.close()
        for record in self.journal.after(after):
            writer.write(record)
        self._client = writer

    async def _to_agent(self, line: bytes) -> None:
        """Journal ``line`` and write it to the agent; the client's next line is read
        once the agent has taken this one (its pipe is the only buffer)."""
        agent = self._agent
        if agent is None or agent.stdin is None or agent.returncode is not None:
            return
        self._send(self.journal.append_message("client", line))  # (the client has all)
        with contextlib.suppress(ConnectionError):
            agent.stdin.write(line if line.endswith(b"\n") else line + b"\n")
            await agent.stdin.drain()

    def _end_agent(self) -> None:
        """End the agent's process group: SIGTERM, then SIGKILL after :data:`GRACE` s."""
        agent = self._agent
        if agent is None or agent.returncode is not None:
            return
        self._signal_group(signal.SIGTERM)

        def kill() -> None:
            if agent.returncode is None:
                self._signal_group(signal.SIGKILL)

        asyncio.get_running_loop().call_later(GRACE, kill)


def _object(line: bytes) -> dict[str, object] | None:
    """``line`` parsed if it is one JSON object (a JSON-RPC message is), else None."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_agents.acp.proxy",
        description="Hold an ACP agent's stdio and journal it (jupyter-agents).",
    )
    parser.add_argument("--folder", required=True, type=Path, help="the journal's folder")
    parser.add_argument("--socket", type=Path, help="where to listen (default: FOLDER/socket)")
    parser.add_argument("--cwd", help="the ACP session's working directory (default: ours)")
    parser.add_argument("--state-dir", type=Path, help="where pending requests and spool are")
    parser.add_argument("--session", help="the jupyter-agents session id (with --state-dir)")
    parser.add_argument("--resume", help="the conversation (ACP session) id to go on with")
    parser.add_argument("--ask-wait", type=float, default=ASK_WAIT, help="seconds a "
                        "permission request waits for a person before it is cancelled")  # fmt: skip
    parser.add_argument("--client-tools", default="", help="the client tools the agent may "
                        f"use, comma-separated, of {','.join(TOOLS)} (default: none)")  # fmt: skip
    parser.add_argument("agent", nargs=argparse.REMAINDER, help="-- the agent's argv")
    args = parser.parse_args(argv)
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    if not agent:
        parser.error("the agent's argv is missing (after --)")
    tools = [t for t in args.client_tools.split(",") if t]
    if not set(tools) <= set(TOOLS):
        parser.error(f"--client-tools: choose from {','.join(TOOLS)}")
    proxy = Proxy(
        args.folder,
        agent,
        args.socket,
        cwd=args.cwd,
        state_dir=args.state_dir,
        session_id=args.session,
        resume=args.resume,
        ask_wait=args.ask_wait,
        tools=tools,
    )
    return asyncio.run(proxy.run())


if __name__ == "__main__":
    sys.exit(main())
