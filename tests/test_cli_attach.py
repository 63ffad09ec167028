"""``jupyter agents attach`` on a real pty: it says how to leave, the detach key leaves
with exit 0 and the session running and the terminal as it was, with the hint and why
the client left, on both backends and inside a tmux of our own; it refuses to run
inside a session of ours."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from jupyter_agents.backends.base import DETACH_KEY
from jupyter_agents.pytest_plugin import poll

BACKENDS = ["tmux", "broker"]


def env_for(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The CLI's environment: the broker is the backend where tmux is not on PATH. No
    ``$SHELL``, as under a service manager or CI: the session runs the user's login shell
    (root's bash, whose prompt names the folder :meth:`Pty.attached` waits for), not
    ``sh``. An empty ``$HOME``: the shell reads only the system's start-up files (Debian's
    prompt names the folder), not this machine's ``~/.bashrc``, whose ``pyenv rehash``
    waits on a lock that a shell killed mid-rehash by an earlier test leaves behind."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "SHELL")}
    home = request.getfixturevalue("tmp_path") / "home"
    home.mkdir(exist_ok=True)
    env["HOME"] = str(home)
    if backend == "broker":
        env["PATH"] = request.getfixturevalue("path_without_tmux")
    return env


def jupyter_agents(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    jupyter = shutil.which("jupyter")
    assert jupyter
    return subprocess.run(
        [jupyter, "agents", *args], capture_output=True, text=True, env=env, timeout=60
    )


def start_shell(state: Path, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    made = jupyter_agents(
        "new", "shell", "--json", "--cwd", str(cwd), "--state-dir", str(state), env=env
    )
    assert made.returncode == 0, made.stderr
    model: dict[str, object] = json.loads(made.stdout)
    return model


def status_of(state: Path, session_id: str, env: dict[str, str]) -> str:
    shown = jupyter_agents("show", session_id, "--json", "--state-dir", str(state), env=env)
    return str(json.loads(shown.stdout)["status"])


class Pty:
    """A child process on a real pty of 80x24 (``pty.fork``), read into :attr:`seen`."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes the command
            os.execvpe(argv[0], argv, env)
        self.pid, self.fd, self.seen = pid, fd, b""
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    def attached(self, cwd: Path) -> None:
        """Wait for the hint, then for the session's screen (its prompt names ``cwd``):
        keys typed before the attach client took the terminal may be flushed with it."""
        hint = b"detach with Ctrl-]"
        self.read_until(hint)
        # the screen may come in the same read as the hint: look from the hint's end
        self.read_until(str(cwd).encode(), since=self.seen.index(hint) + len(hint))

    def read_until(self, wanted: bytes, timeout: float = 20, since: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while wanted not in self.seen[since:]:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {wanted!r}; saw {self.seen[-2000:]!r}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the pty
                    chunk = b""
                assert chunk, f"the pty closed before {wanted!r}; saw {self.seen[-2000:]!r}"
                self.seen += chunk

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = 20) -> int:
        """Read to the end; the exit status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError:
                    time.sleep(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise AssertionError(f"still attached after {timeout} s; saw {self.seen[-2000:]!r}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_attach_says_how_to_leave_and_the_key_detaches(
    backend, agents_state_dir, tmp_path, request
):
    env = env_for(backend, request)
    model = start_shell(agents_state_dir, tmp_path, env)
    sid = str(model["id"])
    jupyter = shutil.which("jupyter")
    assert jupyter
    term = Pty([jupyter, "agents", "attach", sid, "--state-dir", str(agents_state_dir)], env)
    term.attached(tmp_path)
    term.write(b"echo typed-$((6*7))\r")
    term.read_until(b"typed-42")  # keys reach the session
    term.write(DETACH_KEY)
    assert term.wait() == 0
    assert status_of(agents_state_dir, sid, env) == "running"
    # the key never reached the program: bash would have shown it at its prompt
    again = Pty([jupyter, "agents", "attach", sid, "--state-dir", str(agents_state_dir)], env)
    again.attached(tmp_path)
    again.write(b"echo $((1+1))-after\r")
    again.read_until(b"2-after", since=len(again.seen))
    again.write(DETACH_KEY)
    assert again.wait() == 0
    assert b"^]" not in again.seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_attach_inside_a_tmux_of_our_own(backend, agents_state_dir, tmp_path, request):
    env = env_for(backend, request)
    model = start_shell(agents_state_dir, tmp_path, env)
    sid = str(model["id"])
    jupyter = shutil.which("jupyter")
    tmux = shutil.which("tmux")
    assert jupyter and tmux
    socket = tmp_path / "own-tmux"
    done = tmp_path / "exit-status"
    outer = [tmux, "-S", str(socket), "-f", "/dev/null"]
    command = (
        f"{jupyter} agents attach {sid} --state-dir {agents_state_dir}; echo $? > {done}; sleep 30"
    )
    try:
        subprocess.run(
            [
                *outer,
                "new-session",
                "-d",
                "-x",
                "80",
                "-y",
                "24",
                "env",
                f"PATH={env['PATH']}",
                "sh",
                "-c",
                command,
            ],
            check=True,
            env={**os.environ, "TMUX": ""},
            timeout=20,
        )

        def screen() -> str:
            shown = subprocess.run(
                [*outer, "capture-pane", "-p", "-t", "0"], capture_output=True, text=True
            )
            return shown.stdout

        poll(lambda: str(tmp_path) in screen() or None, timeout=30)  # the session's prompt
        subprocess.run([*outer, "send-keys", "-t", "0", "-l", "echo in-own-$((3*3))"], check=True)
        subprocess.run([*outer, "send-keys", "-t", "0", "Enter"], check=True)
        poll(lambda: "in-own-9" in screen() or None, timeout=20)
        subprocess.run([*outer, "send-keys", "-t", "0", "C-]"], check=True)
        poll(lambda: (done.exists() and done.read_text().strip()) or None, timeout=20)
        assert done.read_text().strip() == "0"
        assert status_of(agents_state_dir, sid, env) == "running"
        # the terminal as it was, the hint on it, and why the client left (both backends)
        left = screen()
        assert f"attaching to {sid}" in left and "detach with Ctrl-]" in left, left
        assert f"[detached (from session {sid})]" in left, left
        assert "in-own-9" not in left, left  # the session's screen is gone with it
    finally:
        subprocess.run([*outer, "kill-server"], capture_output=True)


def test_attach_to_an_ended_session_says_what_to_do(agents_state_dir, tmp_path, request):
    env = env_for("tmux", request)
    sid = str(start_shell(agents_state_dir, tmp_path, env)["id"])
    assert (
        jupyter_agents("kill", sid, "--state-dir", str(agents_state_dir), env=env).returncode == 0
    )
    got = jupyter_agents("attach", sid, "--state-dir", str(agents_state_dir), env=env)
    assert got.returncode == 4
    assert got.stderr.count("\n") == 1
    assert f"jupyter agents restore {sid}" in got.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_attach_starts_and_attaches(backend, agents_state_dir, tmp_path, request):
    env = env_for(backend, request)
    jupyter = shutil.which("jupyter")
    assert jupyter
    argv = [jupyter, "agents", "new", "shell", "--attach", "--cwd", str(tmp_path)]
    term = Pty([*argv, "--state-dir", str(agents_state_dir)], env)
    term.attached(tmp_path)
    term.write(b"echo new-$((5*5))\r")
    term.read_until(b"new-25")
    term.write(DETACH_KEY)
    assert term.wait() == 0
    listed = jupyter_agents("list", "--json", "--state-dir", str(agents_state_dir), env=env)
    assert [m["status"] for m in json.loads(listed.stdout)] == ["running"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_attach_from_inside_a_session_is_refused(backend, agents_state_dir, tmp_path, request):
    """``attach`` typed into the session it names would feed the session's output back
    in as its input without end (tmux: 4 KB to 31.5 MB in 10 s, issue 54); typed into
    another session it would run one inside the other. Both are refused, saying why, and
    nothing reaches either transcript but the command and its refusal."""
    from jupyter_agents.pytest_plugin import transcript_bytes

    env = env_for(backend, request)
    sid = str(start_shell(agents_state_dir, tmp_path, env)["id"])
    other = str(start_shell(agents_state_dir, tmp_path, env)["id"])
    state = str(agents_state_dir)
    jupyter = shutil.which("jupyter")
    for target, said in ((sid, f"is session {sid} itself"), (other, "one session in another")):
        line = f"{jupyter} agents attach {target} --state-dir {state}; echo exit-$?-{target}"
        typed = jupyter_agents("send", sid, line, "--state-dir", state, env=env)
        assert typed.returncode == 0, typed.stderr
        ended = f"exit-4-{target}".encode()
        poll(
            lambda ended=ended: ended in transcript_bytes(agents_state_dir, sid),
            timeout=30,
            what=f"attach {target} refused inside {sid}",
        )
        shown = transcript_bytes(agents_state_dir, sid).decode(errors="replace")
        assert said in shown, shown[-2000:]
    assert len(transcript_bytes(agents_state_dir, sid)) < 16_384
    assert b"agents attach" not in transcript_bytes(agents_state_dir, other)
    assert status_of(agents_state_dir, sid, env) == "running"
    assert status_of(agents_state_dir, other, env) == "running"
    for session in (sid, other):
        jupyter_agents("kill", session, "--state-dir", state, env=env)


def test_new_shell_from_a_terminal_or_into_a_pipe_is_the_same_shell(
    agents_state_dir, tmp_path, request
):
    """`jupyter agents new shell` typed in a terminal and `$(jupyter agents new shell)`
    (its output into a pipe, its input still the terminal) start the same shell: same
    $0, PATH and login state (issue 54, item 16; before, the pipe's was a login shell,
    whose /etc/profile reset PATH so that `jupyter` was not found inside)."""
    from jupyter_agents.pytest_plugin import transcript_bytes

    env = {**env_for("tmux", request), "SHELL": "/bin/bash"}
    jupyter = shutil.which("jupyter")
    assert jupyter
    new = [jupyter, "agents", "new", "shell", "--json", "--cwd", str(tmp_path)]
    new += ["--state-dir", str(agents_state_dir)]
    typed = Pty(new, env)  # input and output a terminal
    assert typed.wait() == 0
    shown = typed.seen.decode().replace("\r\n", "\n")
    in_terminal = json.loads(shown[shown.index("{") :])
    master, slave = pty.openpty()
    try:  # output into a pipe, input the terminal
        piped = subprocess.run(new, stdin=slave, capture_output=True, text=True, env=env)
    finally:
        os.close(slave)
        os.close(master)
    assert piped.returncode == 0, piped.stderr
    into_pipe = json.loads(piped.stdout)
    said = {}
    for model in (in_terminal, into_pipe):
        sid = str(model["id"])
        probe = 'echo "SAID $0 $(shopt -q login_shell && echo login || echo no-login) $PATH END"'
        sent = jupyter_agents("send", sid, probe, "--state-dir", str(agents_state_dir), env=env)
        assert sent.returncode == 0, sent.stderr
        line = poll(
            lambda sid=sid: next(
                (
                    found
                    for found in transcript_bytes(agents_state_dir, sid).decode().splitlines()
                    if found.startswith("SAID ") and found.rstrip().endswith(" END")
                ),
                None,
            ),
            timeout=30,
            what=f"{sid}'s answer",
        )
        said[sid] = line.strip()
        jupyter_agents("kill", sid, "--state-dir", str(agents_state_dir), env=env)
    first, second = said.values()
    assert first == second, said
    assert " no-login " in first and f" {env['PATH']} END" in first, first
