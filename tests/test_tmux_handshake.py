"""tmux 3.3a to 3.6 crashes when a session is made or ends while a control client is
still identifying itself: it writes the news (``%sessions-changed``) through the
client's control state, which is NULL until the client is done (control_write; fixed in
tmux 3.7, e5a2a25, GitHub issue 4980), and every session of the server ends with it.
So the backend's own spawns and removes wait while one of its control clients starts
(``TmuxBackend.handshake_gate``). The order is forced: the control client's tmux is a
wrapper that says it started and waits until the test lets it go on; every tmux the
backend runs is logged in order."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

from jupyter_agents.backends.base import SpawnRequest
from jupyter_agents.backends.tmux import TmuxBackend
from jupyter_agents.pytest_plugin import poll

WRAPPER = """#!{python}
import os, sys
args = sys.argv[1:]
def note(what):
    with open({log!r}, "a") as f:
        f.write(what + "\\n")
if "-C" in args:
    note("control client started")
    with open({go!r}) as fifo:  # until the test lets it go on
        fifo.read()
    note("control client goes on")
elif "new-session" in args:
    note("new-session")
os.execv({tmux!r}, [{tmux!r}, *args])
"""


@pytest.fixture
def wrapped(tmp_path: Path):
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("needs tmux")
    log, go = tmp_path / "tmux.log", tmp_path / "go"
    os.mkfifo(go)
    wrapper = tmp_path / "tmux"
    wrapper.write_text(WRAPPER.format(python=sys.executable, log=str(log), go=str(go), tmux=tmux))
    wrapper.chmod(0o755)
    backend = TmuxBackend(tmp_path / "st", tmux_command=str(wrapper))
    backend.start()
    yield backend, log, go
    backend.kill_server()


def test_no_session_is_made_while_a_control_client_starts(wrapped) -> None:
    backend, log, go = wrapped
    backend.spawn(SpawnRequest("first", ["sleep", "600"], "/", {}))

    async def scenario() -> None:
        replied = asyncio.get_running_loop().create_future()
        # a stream's first command starts the control client, which waits in the wrapper
        backend.control().command("display-message -p hi", lambda ok, _: replied.set_result(ok))
        await asyncio.to_thread(
            poll, lambda: "control client started" in log.read_text(), 10, "the client start"
        )
        # meanwhile a spawn (a second tab restored as the page loads)
        spawn = threading.Thread(
            target=backend.spawn, args=(SpawnRequest("second", ["sleep", "600"], "/", {}),)
        )
        spawn.start()
        await asyncio.to_thread(spawn.join, 2)  # not gated, it is done by now
        with open(go, "w") as fifo:
            fifo.write("go")
        await asyncio.to_thread(spawn.join)
        assert await asyncio.wait_for(replied, 10)
        await backend.detach_streams()

    asyncio.run(scenario())
    said = log.read_text().splitlines()
    assert said == [
        "new-session",  # "first"
        "control client started",
        "control client goes on",
        "new-session",  # "second", only once the client is attached
    ], said
    assert {"first", "second"} <= {s.session_id for s in backend.list_live()}
