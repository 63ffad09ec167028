"""The CLI's small things, each observable: ``reconcile`` prints what changed, ``wait``
says it timed out, ``kill-server`` asks, ``--version``, ``send`` types a prompt (as a
bracketed paste where the program asked for one) on both backends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_agents import __version__
from jupyter_agents.pytest_plugin import kill_backends, poll, transcript_bytes

#: a session program that asks for bracketed paste, then prints what it read raw
PASTE_PROBE = """
import os, sys, time, tty
sys.stdout.write("\\x1b[?2004hREADY\\r\\n"); sys.stdout.flush()
tty.setraw(0)
got = b""
while not got.endswith(b"\\r"):
    got += os.read(0, 1024)
sys.stdout.write("GOT " + repr(got) + "\\r\\n"); sys.stdout.flush()
time.sleep(60)
"""


def run(
    *args: str, env: dict[str, str] | None = None, stdin: int | None = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    jupyter = shutil.which("jupyter")
    assert jupyter
    return subprocess.run(
        [jupyter, "agents", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        stdin=stdin,
        timeout=60,
    )


def shell(state: Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    made = run("new", "shell", "--cwd", str(cwd), "--state-dir", str(state), env=env)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def status(state: Path, sid: str) -> str:
    return str(json.loads(run("show", sid, "--json", "--state-dir", str(state)).stdout)["status"])


def test_version():
    got = run("--version")
    assert (got.returncode, got.stdout.strip()) == (0, f"jupyter agents {__version__}")


def test_reconcile_prints_only_what_changed(agents_state_dir, tmp_path):
    state = ["--state-dir", str(agents_state_dir)]
    sid = shell(agents_state_dir, tmp_path)
    first = run("reconcile", *state)
    assert first.stdout.strip() == "nothing changed (1 session running as recorded)"
    assert "reattached" not in run("reconcile", *state).stdout
    kill_backends(agents_state_dir)  # a reboot
    changed = run("reconcile", *state).stdout.splitlines()
    assert len(changed) == 1 and sid in changed[0] and "interrupted" in changed[0]
    assert run("reconcile", *state).stdout.startswith("nothing changed")


def test_wait_says_it_timed_out(agents_state_dir, tmp_path):
    sid = shell(agents_state_dir, tmp_path)
    got = run("wait", sid, "--timeout", "0.5", "--state-dir", str(agents_state_dir))
    assert got.returncode == 7
    assert got.stderr.strip().splitlines() == [
        f"jupyter agents: wait: timed out after 0.5 s; session {sid} did not need you"
    ]


def test_kill_server_asks_on_a_terminal_and_needs_yes_otherwise(agents_state_dir, tmp_path):
    state = ["--state-dir", str(agents_state_dir)]
    sid = shell(agents_state_dir, tmp_path)
    refused = run("kill-server", *state)  # stdin is not a terminal
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert status(agents_state_dir, sid) == "running"
    # on a terminal it asks; "n" keeps everything
    code = (
        "import pty, os, sys\n"
        "pid, fd = pty.fork()\n"
        "if pid == 0:\n"
        f"    os.execvp('jupyter', ['jupyter', 'agents', 'kill-server', *{state!r}])\n"
        "seen = b''\n"
        "while b'[y/N]' not in seen:\n"
        "    seen += os.read(fd, 1024)\n"
        "os.write(fd, sys.argv[1].encode() + b'\\r')\n"
        "while True:\n"
        "    try:\n"
        "        chunk = os.read(fd, 1024)\n"
        "    except OSError:\n"
        "        break\n"
        "    if not chunk:\n"
        "        break\n"
        "    seen += chunk\n"
        "print(seen.decode(errors='replace'))\n"
        "sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
    )
    no = subprocess.run(
        [sys.executable, "-c", code, "n"], capture_output=True, text=True, timeout=60
    )
    assert no.returncode == 1 and "nothing stopped" in no.stdout, no.stdout
    assert status(agents_state_dir, sid) == "running"
    yes = subprocess.run(
        [sys.executable, "-c", code, "y"], capture_output=True, text=True, timeout=60
    )
    assert yes.returncode == 0 and "1 sessions marked killed" in yes.stdout, yes.stdout
    assert status(agents_state_dir, sid) == "killed"


@pytest.mark.parametrize("backend", ["tmux", "broker"])
def test_send_types_a_prompt_without_attaching(backend, agents_state_dir, tmp_path, request):
    env = {}
    if backend == "broker":
        env["PATH"] = request.getfixturevalue("path_without_tmux")
    state = ["--state-dir", str(agents_state_dir)]
    sid = shell(agents_state_dir, tmp_path, env)
    sent = run("send", sid, "echo sent-$((6*7))", *state, env=env)
    assert sent.returncode == 0, sent.stderr
    poll(lambda: b"sent-42" in transcript_bytes(agents_state_dir, sid), timeout=15)
    # a program that asked for bracketed paste gets the text as one paste, then Enter
    config = tmp_path / "config"
    config.mkdir()
    probe = [sys.executable, "-c", PASTE_PROBE]
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {"agents": {"probe": {"command": probe}}}})
    )
    env["JUPYTER_CONFIG_DIR"] = str(config)
    made = run("new", "probe", "--cwd", str(tmp_path), *state, env=env)
    assert made.returncode == 0, made.stderr
    pid = made.stdout.strip()
    poll(lambda: b"READY" in transcript_bytes(agents_state_dir, pid), timeout=15)
    sent = run("send", pid, "two\nlines", *state, env=env)
    assert sent.returncode == 0 and sent.stdout.startswith("pasted"), sent.stderr
    want = rb"GOT b'\x1b[200~two\nlines\x1b[201~\r'"
    poll(lambda: want in transcript_bytes(agents_state_dir, pid), timeout=15)
    bad = run("send", pid, "a\x1bb", *state, env=env)
    assert bad.returncode == 2 and "control characters" in bad.stderr
