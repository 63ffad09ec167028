"""The CLI, the %agent magics, the Dashboard widget and the example notebook, against
real kernels, real servers and real tmux (fake agent CLIs only)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from jupyter_agents.clients.cli import main
from jupyter_agents.pytest_plugin import TEST_SHELL, kill_backends, poll, transcript_bytes

EXAMPLE = Path(__file__).parent.parent / "examples" / "agents.ipynb"


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    """Run ``jupyter agents ...`` (the installed entry point) and return the result."""
    jupyter = shutil.which("jupyter")
    assert jupyter, "jupyter is not on PATH"
    return subprocess.run(
        [jupyter, "agents", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_cli_round_trip_with_a_live_server(agents_server, agents_state_dir, tmp_path):
    server = agents_server()
    state = ["--state-dir", str(agents_state_dir)]
    made = cli("new", "shell", "--json", *state, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    model = json.loads(made.stdout)
    status, rest = server.request("GET", "/api/agents/sessions")
    assert [m["id"] for m in rest] == [model["id"]]
    assert rest[0]["status"] == "running"
    listed = cli("list", "--json", *state)
    assert listed.returncode == 0
    # the REST model, field for field; last_activity may have moved with the shell's
    # prompt in between (it follows output)
    from_cli = json.loads(listed.stdout)
    assert from_cli[0]["last_activity"] >= rest[0]["last_activity"]
    for model_ in (*from_cli, *rest):
        del model_["last_activity"]
    assert from_cli == rest
    status, terms = server.request("GET", "/api/terminals")
    assert [t["name"] for t in terms] == [model["name"]]

    killed = cli("kill", model["name"], *state)  # by terminal name, or by id
    assert killed.returncode == 0, killed.stderr
    assert not psutil.pid_exists(model["pid"]) or psutil.Process(model["pid"]).status() == "zombie"
    status, rest = server.request("GET", "/api/agents/sessions")
    assert status == 200 and rest[0]["status"] == "killed"
    assert json.loads(cli("list", "--json", *state).stdout)[0]["status"] == "killed"
    table = cli("list", "--wide", *state).stdout
    assert table.splitlines()[0].split()[:5] == ["ID", "NAME", "TITLE", "KIND", "STATUS"]
    assert model["id"] in table and "killed" in table


def test_cli_log_follow_prints_output_as_it_comes_and_ends_with_the_session(
    agents_server, agents_state_dir, tmp_path
):
    server = agents_server()
    state = ["--state-dir", str(agents_state_dir)]
    model = json.loads(cli("new", "shell", "--json", *state, cwd=tmp_path).stdout)
    jupyter = shutil.which("jupyter")
    assert jupyter
    follow = subprocess.Popen(
        [jupyter, "agents", "log", model["id"], "--follow", *state], stdout=subprocess.PIPE
    )
    client = server.ws(model["name"])
    try:
        client.stdin("echo FOLLOW-$((6*7))\r")
        client.wait_for("FOLLOW-42")
        assert follow.poll() is None  # still following a running session
        client.stdin("exit\r")
        out, _ = follow.communicate(timeout=30)  # ends once the session has
    finally:
        follow.kill()
        follow.wait()
        client.close()
    assert follow.returncode == 0
    assert b"FOLLOW-42" in out
    whole = subprocess.run([jupyter, "agents", "log", model["id"], *state], capture_output=True)
    assert out == whole.stdout  # every byte of the transcript, once


def test_cli_restore_all_after_a_reboot_shows_progress(agents_server, agents_state_dir, tmp_path):
    server = agents_server()
    for _ in range(3):
        assert server.request("POST", "/api/agents/sessions", {"kind": "shell"})[0] == 201
    kill_backends(agents_state_dir)
    server.stop(signal.SIGKILL)
    state = ["--state-dir", str(agents_state_dir)]
    # no server running: the CLI reconciles and restores by itself
    assert "interrupted" in cli("list", *state).stdout
    restored = cli("restore", "--all", *state)
    assert restored.returncode == 0, restored.stderr
    assert "[######--------------] 1/3" in restored.stderr
    assert "[####################] 3/3" in restored.stderr
    assert restored.stdout.count("restored ") == 3
    rows = json.loads(cli("list", "--json", *state).stdout)
    assert [r["status"] for r in rows] == ["running"] * 3
    server = agents_server()
    status, terms = server.request("GET", "/api/terminals")
    assert status == 200
    assert sorted(t["name"] for t in terms) == sorted(r["name"] for r in rows)


def test_cli_bad_input_gives_one_line_and_an_exit_code(agents_state_dir, tmp_path, capsys):
    state = ["--state-dir", str(agents_state_dir)]
    # through the installed entry point: a real process, one line, no traceback
    missing = cli("list", "--state-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 3 and "no state dir" in missing.stderr
    assert main(["new", "shell", "--cwd", str(tmp_path), *state]) == 0
    unknown = cli("show", "nope", *state)
    assert unknown.returncode == 3
    assert unknown.stderr.strip().splitlines() == [
        "jupyter agents: no session with id, id prefix or terminal name 'nope'"
    ]
    # the rest through main() in this process (each process costs ~2 s of imports)
    for args, code, message in [
        (["show", "nope"], 3, "no session with id, id prefix or terminal name 'nope'"),
        (["kill", "nope"], 3, "nope"),
        (["new", "bogus"], 1, "unknown session kind 'bogus'"),
        (["new", "shell", "--cwd", str(tmp_path / "missing")], 1, "not an existing directory"),
        (["new", "claude", "--", "--resume", "x"], 1, "restore its session"),
        (["new", "shell", "--", "a; rm -rf x"], 1, "shell syntax"),
        (["restore", "1"], 4, "running"),
        (["restore"], 2, "give a session id or --all"),
        (["frobnicate"], 2, "invalid choice"),
    ]:
        capsys.readouterr()
        try:
            got = main([*args, *state])
        except SystemExit as e:  # argparse's usage errors
            got = e.code
        err = capsys.readouterr().err
        assert got == code, (args, got, err)
        assert message in err, (args, err)
        assert "Traceback" not in err
        if code != 2:
            assert len(err.strip().splitlines()) == 1, err


def test_kernel_session_outlives_kernel_and_server(agents_server, agents_state_dir, tmp_path):
    env = {
        **os.environ,
        "JUPYTER_AGENTS_STATE_DIR": str(agents_state_dir),
        "SHELL": TEST_SHELL[0],
    }
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        out: list[str] = []

        def collect(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("ERROR " + msg["content"]["evalue"])

        code = (
            "%load_ext jupyter_agents\n"
            "t = %agent new shell\n"
            "print('SESSION', t.sessions[0].id, t.sessions[0].pid)"
        )
        kc.execute_interactive(code, output_hook=collect, timeout=60)
        line = next(x for x in "".join(out).splitlines() if x.startswith("SESSION"))
        _, sid, pid = line.split()
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=60)
        assert psutil.pid_exists(int(pid))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    server = agents_server()
    status, model = server.request("GET", f"/api/agents/sessions/{sid}")
    assert (status, model["status"], model["pid"]) == (200, "running", int(pid))
    status, terms = server.request("GET", "/api/terminals")
    assert [t["name"] for t in terms] == [model["name"]]
    server.stop(signal.SIGKILL)
    server = agents_server()
    status, model = server.request("GET", f"/api/agents/sessions/{sid}")
    assert (status, model["status"], model["pid"]) == (200, "running", int(pid))


def test_magics_in_ipython(agents_state_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    monkeypatch.setenv("SHELL", "/bin/bash")
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        made = shell.run_line_magic("agent", "new shell --name demo -- -i")
        session = made.sessions[0]
        assert (session.name, session.cwd, session.argv[-1]) == ("demo", str(tmp_path), "-i")
        listed = shell.run_line_magic("agent", "ls")
        assert "<table" in listed._repr_html_() and "demo" in str(listed)
        shell.run_line_magic("agent", "log demo -n 5")
        for bad, message in [
            ("bogus", "invalid choice"),
            ("kill nope", "no session with id"),
            ("new shell --cwd /nonexistent", "not an existing directory"),
            ("", "which command"),
        ]:
            with pytest.raises(UsageError, match=message):
                shell.run_line_magic("agent", bad)
        killed = shell.run_line_magic("agent", "kill demo")
        assert killed.sessions[0].status == "killed"
        assert "Start, list, resume" in (shell.find_line_magic("agent").__doc__ or "")
    finally:
        InteractiveShell.clear_instance()


def test_dashboard_follows_changes_made_elsewhere(agents_state_dir, tmp_path):
    from jupyter_agents.clients.widgets import Dashboard

    state = ["--state-dir", str(agents_state_dir)]
    assert cli("new", "shell", *state, cwd=tmp_path).returncode == 0
    dashboard = Dashboard(state_dir=str(agents_state_dir), interval=0.5)
    try:
        assert len(dashboard.sessions) == 1
        sid = cli("new", "shell", *state, cwd=tmp_path).stdout.strip()
        started = time.monotonic()
        poll(lambda: any(s["id"] == sid for s in dashboard.sessions), 2.0, interval=0.05)
        seen_after = time.monotonic() - started
        assert seen_after < 2.0
        # both shells have printed before one is killed (a loaded machine can take a
        # while): whichever the dashboard lists first has a tail to show below
        for made in [s["id"] for s in dashboard.sessions]:
            poll(lambda m=made: transcript_bytes(agents_state_dir, m), 30, f"{made}'s output")
        assert cli("kill", sid, *state).returncode == 0
        poll(
            lambda: any(s["id"] == sid and s["status"] == "killed" for s in dashboard.sessions),
            2.0,
            interval=0.05,
        )
        # the other session's row has a kill button that works
        first = dashboard.sessions[0]["id"]
        row = dashboard.rows.children[0]
        button = next(b for b in row.children[1:] if b.description == "kill")
        button.click()
        poll(lambda: dashboard.sessions[0]["status"] == "killed", 10, interval=0.05)
        assert json.loads(cli("show", first, "--json", *state).stdout)["status"] == "killed"
        # the transcript tail of a selected session
        dashboard.selected.value = first
        assert "<pre>" in dashboard.tail.value
    finally:
        dashboard.close()
    assert not dashboard._thread.is_alive() or dashboard._stop.is_set()


#: a cell waiting (at most 60 s) until the fake agents' log at ``{log}`` has two starts
STARTED = """import json as _json, pathlib as _pathlib, time as _time
_log, _until = _pathlib.Path({log!r}), _time.monotonic() + 60
while _time.monotonic() < _until and [
    line for line in (_log.read_text().splitlines() if _log.exists() else [])
    if _json.loads(line)["event"] == "start"
].__len__() < 2:
    _time.sleep(0.1)"""


def test_example_notebook_runs(agents_state_dir, fake_agents, tmp_path, monkeypatch):
    for key, value in {
        **fake_agents.env,
        "JUPYTER_AGENTS_STATE_DIR": str(agents_state_dir),
    }.items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "nb"
    work.mkdir()
    nb = nbformat.read(EXAMPLE, as_version=4)
    # before the notebook goes on (and at its end kills both), both stand-ins have
    # started and logged their argv: under load that took longer than the cells between
    started = nbformat.v4.new_code_cell(STARTED.format(log=str(fake_agents.log)))
    after_codex = next(i for i, c in enumerate(nb.cells) if "%agent new codex" in c.source)
    nb.cells.insert(after_codex + 1, started)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    ).execute()
    nb.cells.remove(started)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert html.count("claude") >= 1 and "codex" in html
    starts = fake_agents.records("start")
    # codex gets only our reporting options (-c notify=..., --no-daemon), claude its id
    assert sorted(r["argv"][:1] for r in starts) == [["--session-id"], ["-c"]]
    assert {r["cwd"] for r in starts} == {str(work)}
    rows = json.loads(cli("list", "--json", "--state-dir", str(agents_state_dir)).stdout)
    assert sorted((r["kind"], r["status"]) for r in rows) == [
        ("claude", "killed"),
        ("codex", "killed"),
    ]
