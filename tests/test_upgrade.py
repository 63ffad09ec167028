"""An upgrade: sessions started by an earlier landed version survive ``pip install`` of
this tree and a restart of the server (issue 35, acceptance 3; issue 55, acceptance 4:
from 57e8010, before the session service was split into parts).

The package is "installed" as pip leaves it: one folder on ``sys.path``
(``PYTHONPATH``, which the sessions inherit, so their hooks import from it too) holding
``jupyter_agents``. First it holds the last landed version (``git archive`` of
:data:`LANDED`), whose servers start a broker shell, a tmux shell and a Claude session
with hooks (the fake CLI, which runs its hooks as the real one does). Then its servers
stop, the folder gets this tree's package in their place, and a server of this tree
starts on the same state dir. Each session is the same process (pid and start time),
its screen comes back, its transcript goes on, and the Claude session's next hook
event, run by a process the old version started, reaches its attention: what live
processes call by name (``python -P -m jupyter_agents.hook``, the broker daemon,
tmux's ``writer.pl``) is still there under that name.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll, transcript_bytes

#: the landed version whose sessions this tree must keep: 57e8010 (stop 56), the last
#: before the session service's parts (issue 55); move it on when a change could break
#: what a version's live processes call
LANDED = "57e8010"
REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "jupyter_agents"


def landed_tree(site: Path) -> None:
    """``site/jupyter_agents`` as :data:`LANDED` had it."""
    probe = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{LANDED}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, (
        f"this checkout lacks the landed version {LANDED} (a shallow clone?): "
        f"`git fetch --unshallow` brings it; {probe.stderr.strip()}"
    )
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", LANDED, "jupyter_agents"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(site)], input=archive.stdout, check=True)


def install_this_tree(site: Path) -> None:
    """What ``pip install`` of this tree does to ``site``: the old package's files go,
    this tree's take their place (built assets left out: the server needs none)."""
    shutil.rmtree(site / "jupyter_agents")
    shutil.copytree(
        PACKAGE,
        site / "jupyter_agents",
        ignore=shutil.ignore_patterns("__pycache__", "labextension", "*.pyc"),
    )


def attention_becomes(server: ServerProcess, sid: str, attention: str) -> None:
    poll(
        lambda: server.model(sid)["attention"] == attention,
        timeout=30,
        what=f"attention {attention!r}",
    )


@pytest.mark.timeout(240)
def test_sessions_of_the_landed_version_survive_an_upgrade(
    tmp_path, fake_agents, path_without_tmux
):
    site = tmp_path / "site"
    site.mkdir()
    landed_tree(site)
    assert not (site / "jupyter_agents" / "sessions" / "refresh.py").exists()  # before it
    state, project = tmp_path / "state", tmp_path / "proj"
    project.mkdir()
    env = {**fake_agents.env, "PYTHONPATH": str(site)}
    servers: list[ServerProcess] = []

    def start(*args: str, path: str | None = None) -> ServerProcess:
        extra = {**env, **({"PATH": path} if path else {})}
        server = ServerProcess(state, tmp_path, env=extra, args=list(args)).start()
        servers.append(server)
        return server

    try:
        # the landed version: a broker shell, then a tmux shell and a claude session
        old = start("--AgentsApp.backend=broker", path=path_without_tmux)
        broker = old.new("shell", project)
        old.type_line(broker["name"], "echo broker-$((6*7))", "broker-42")
        old.stop()
        old = start()
        tmux = old.new("shell", project)
        old.type_line(tmux["name"], "echo tmux-$((6*7))", "tmux-42")
        claude = old.new("claude", project)
        poll(  # its SessionStart hook ran (the landed version's hook)
            lambda: [r for r in fake_agents.records("hook") if r["name"] == "SessionStart"],
            timeout=30,
            what="the claude session's first hook",
        )
        before = {s["id"]: old.model(s["id"]) for s in (broker, tmux, claude)}
        started = {sid: psutil.Process(m["pid"]).create_time() for sid, m in before.items()}
        assert [before[s["id"]]["backend"] for s in (broker, tmux)] == ["broker", "tmux"]
        old.stop()

        install_this_tree(site)
        server = start()
        status, report = server.request("GET", "/api/agents/reconcile")
        assert status == 200 and "restored_on_open" in report  # only this tree says it

        for session, said in ((broker, "broker-42"), (tmux, "tmux-42")):
            sid = session["id"]
            now = server.model(sid)
            assert now["status"] == "running", now
            assert now["pid"] == before[sid]["pid"]  # the same process: and not a reused pid
            assert psutil.Process(now["pid"]).create_time() == started[sid]
            client = server.ws(session["name"])
            client.wait_for(said)  # the screen, replayed
            client.stdin("echo after-$((6*7))\r")
            client.wait_for("after-42")
            client.close()
            written = transcript_bytes(state, sid)  # the transcript goes on
            assert said.encode() in written and b"after-42" in written

        # a hook run by the claude process the landed version started reaches attention
        sid = claude["id"]
        assert server.model(sid)["pid"] == before[sid]["pid"]
        assert psutil.Process(before[sid]["pid"]).create_time() == started[sid]
        client = server.ws(claude["name"])
        client.wait_for("FAKE CLAUDE conversation")
        client.stdin("/perm\r")
        attention_becomes(server, sid, "permission")
        client.stdin("y\r")
        attention_becomes(server, sid, "waiting")
        client.close()
    finally:
        for server in servers:
            server.stop(signal.SIGKILL)
        kill_backends(state)
