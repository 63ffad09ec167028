"""JupyterHub: two real system users behind a real hub and configurable-http-proxy,
each with their own single-user server running jupyter_agents (examples/jupyterhub).

Needs root, the hub venv and configurable-http-proxy that `.ci/run` installs
(HUB_VENV below; `npm install -g configurable-http-proxy`)."""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.pytest_plugin import TermClient, free_ports, transcript_bytes

HUB_VENV = Path(os.environ.get("JUPYTER_AGENTS_HUB_VENV", "/opt/jupyter-agents-hub"))
EXAMPLE = Path(__file__).parent.parent / "examples" / "jupyterhub" / "jupyterhub_config.py"
FAKE_AGENT = Path(__file__).parent / "fakes" / "fake_agent.py"
USERS = ("ja-alice", "ja-bob")
PASSWORD = "hub-test-password"

pytestmark = [
    pytest.mark.hub,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.geteuid() != 0
        or not (HUB_VENV / "bin" / "jupyterhub").exists()
        or shutil.which("configurable-http-proxy") is None,
        reason="needs root, the hub venv and configurable-http-proxy (.ci/run installs them)",
    ),
]


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv], capture_output=True, text=True, check=False
    )


def state_dir(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir) / ".local" / "share" / "jupyter" / "agents"


def reset_users(users: tuple[str, ...] = USERS) -> None:
    for user in users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", user], check=True)
        subprocess.run(["pkill", "-KILL", "-u", user], check=False)
        home = Path(pwd.getpwnam(user).pw_dir)
        shutil.rmtree(home / ".local" / "share" / "jupyter", ignore_errors=True)
        for name in ("fake-agents.jsonl", ".claude", "proj"):
            path = home / name
            if path.is_dir():
                shutil.rmtree(path)
            path.unlink(missing_ok=True)


class Hub:
    """A running JupyterHub (the example config plus test ports, an admin token and
    ``config``, lines appended to the hub's config file) for ``users``."""

    def __init__(
        self,
        work: Path,
        users: tuple[str, ...] = USERS,
        config: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        self.work = work
        self.extra_env = env or {}
        self.users = users
        # the proxy's, its API's and the hub's: three different ports (chosen one after
        # another, the proxy's API once got the proxy's own: the hub then asked the
        # proxy's public side for its routes, got 404 and did not start)
        self.port, api_port, self.hub_port = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin = secrets.token_hex(16)
        self.log_path = work / "hub.log"
        self.proc: subprocess.Popen[bytes] | None = None
        (work / "config.py").write_text(
            f"c = get_config()\nload_subconfig({str(EXAMPLE)!r})\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{api_port}'\n"
            "c.JupyterHub.cleanup_servers = True\n" + config
        )

    def start(self) -> None:
        bin_dir = self.work / "bin"
        env = {
            "PATH": f"{bin_dir}:{HUB_VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "JUPYTER_AGENTS_HUB_URL": self.url,
            "JUPYTER_AGENTS_HUB_PORT": str(self.hub_port),
            "JUPYTER_AGENTS_HUB_DIR": str(self.work),
            "JUPYTER_AGENTS_HUB_USERS": " ".join(self.users),
            "JUPYTER_AGENTS_HUB_PASSWORD": PASSWORD,
            "JUPYTER_AGENTS_HUB_ADMIN_TOKEN": self.admin,
            **self.extra_env,
        }
        self.log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(HUB_VENV / "bin" / "jupyterhub"), "-f", str(self.work / "config.py")],
            cwd=self.work, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.api("GET", "/hub/api/")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError("hub did not start:\n" + self.log_path.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()
        subprocess.run(["pkill", "-f", f"configurable-http-proxy.*{self.port}"], check=False)

    def api(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"token {token or self.admin}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def login(self, user: str, jar: http.cookiejar.CookieJar | None = None) -> int:
        """Log in through the hub's login form (its cookies into ``jar``); returns the
        status of the POST."""
        jar = http.cookiejar.CookieJar() if jar is None else jar
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect())
        opener.open(self.url + "/hub/login").read()
        xsrf = next(c.value for c in jar if c.name == "_xsrf")
        form = urllib.parse.urlencode({"username": user, "password": PASSWORD, "_xsrf": xsrf})
        try:
            opener.open(self.url + "/hub/login", data=form.encode())
        except urllib.error.HTTPError as e:
            assert any(c.name.startswith("jupyterhub-session") for c in jar), list(jar)
            return e.code
        return 200

    def wait_server(self, user: str, ready: bool) -> dict[str, Any]:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            _status, model = self.api("GET", f"/hub/api/users/{user}")
            server = model.get("servers", {}).get("")
            if (bool(server and server.get("ready")) == ready) and not (server or {}).get(
                "pending"
            ):
                return model
            time.sleep(0.5)
        raise RuntimeError(
            f"{user}'s server not ready={ready}:\n" + self.log_path.read_text()[-3000:]
        )

    def start_server(self, user: str, options: dict[str, Any] | None = None) -> None:
        """Start ``user``'s server (with ``options``, the spawner's ``user_options``;
        without, the hub reuses those of the last start) and wait until it is ready."""
        body = None if options is None else {"user_options": options}
        status, _ = self.api("POST", f"/hub/api/users/{user}/server", body)
        assert status in (201, 202), status
        self.wait_server(user, ready=True)

    def stop_server(self, user: str) -> None:
        status, _ = self.api("DELETE", f"/hub/api/users/{user}/server")
        assert status in (202, 204), status
        self.wait_server(user, ready=False)

    def token(self, user: str) -> str:
        status, model = self.api("POST", f"/hub/api/users/{user}/tokens", {"expires_in": 3600})
        assert status == 201, model
        return str(model["token"])

    def user_api(
        self, user: str, token: str, method: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        return self.api(method, f"/user/{user}{path}", body, token=token)

    def ws(self, user: str, token: str, name: str) -> TermClient:
        url = f"ws://127.0.0.1:{self.port}/user/{user}/terminals/websocket/{name}"
        return TermClient(url, token=token)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture
def hub() -> Iterator[Hub]:
    with running_hub() as running:
        yield running


@contextlib.contextmanager
def running_hub(
    users: tuple[str, ...] = USERS, config: str = "", env: dict[str, str] | None = None
) -> Iterator[Hub]:
    """A started :class:`Hub` for ``users`` (system users, reset first), with fake agent
    CLIs on PATH and ``env`` for the example config (``JUPYTER_AGENTS_HUB_*``); stopped
    and every process of those users killed afterwards."""
    reset_users(users)
    work = Path(tempfile.mkdtemp(prefix="ja-hub-"))
    work.chmod(0o755)
    bin_dir = work / "bin"
    bin_dir.mkdir(mode=0o755)
    for name in ("claude", "codex"):
        script = bin_dir / name
        script.write_text(
            f'#!/bin/sh\nexec "{HUB_VENV / "bin" / "python"}" "{FAKE_AGENT}" {name} "$@"\n'
        )
        script.chmod(0o755)
    hub = Hub(work, users, config, env)
    try:
        hub.start()
        yield hub
    finally:
        hub.stop()
        for user in users:
            subprocess.run(["pkill", "-KILL", "-u", user], check=False)
        shutil.rmtree(work, ignore_errors=True)


def singleuser_pid(user: str) -> int:
    """The pid of ``user``'s running single-user server."""
    found = subprocess.run(
        ["pgrep", "-u", user, "-f", "jupyterhub-singleuser"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert len(found) == 1, found
    return int(found[0])


def typed(client: TermClient, line: str, expect: str) -> str:
    """Type ``line`` into ``client``'s terminal and wait for ``expect`` in what arrives
    after it (so never in output from before); returns that output."""
    client.wait_for(lambda c: len(c.messages) >= 2)
    start = len(client.text)
    client.stdin(line + "\r")
    client.wait_for(lambda c: expect in c.text[start:])
    return client.text[start:]


def test_two_users_isolated_restart_and_pod_restart(hub: Hub) -> None:
    alice, bob = USERS
    for user in USERS:
        assert hub.login(user) == 302  # logged in through the hub's form
        hub.start_server(user)
    tokens = {user: hub.token(user) for user in USERS}

    # each opens terminals; alice also an agent that gets a message
    terms = {}
    for user in USERS:
        status, model = hub.user_api(user, tokens[user], "POST", "/api/terminals", {})
        assert status == 200, model
        terms[user] = model["name"]
    proj = Path(pwd.getpwnam(alice).pw_dir) / "proj"
    as_user(alice, "mkdir", "-p", str(proj))
    status, agent = hub.user_api(
        alice, tokens[alice], "POST", "/api/agents/sessions", {"kind": "claude", "cwd": "proj"}
    )
    assert status == 201, agent
    client = hub.ws(alice, tokens[alice], agent["name"])
    typed(client, "hello-from-alice", "claude heard: hello-from-alice")
    client.close()
    client = hub.ws(alice, tokens[alice], terms[alice])
    typed(client, "env | grep -c -E 'JUPYTERHUB_API_TOKEN|JPY_API_TOKEN'; echo END", "\r0\r\nEND")
    client.close()

    # 1. isolation: REST, websocket, filesystem, tmux socket
    for path in (
        "/api/terminals",
        "/api/agents/sessions",
        f"/api/agents/sessions/{agent['id']}/log",
    ):
        status, _ = hub.user_api(bob, tokens[alice], "GET", path)
        assert status == 403, (path, status)
    status, _ = hub.user_api(alice, tokens[bob], "GET", f"/api/agents/sessions/{agent['id']}/log")
    assert status == 403
    with pytest.raises(Exception, match="403"):
        hub.ws(bob, tokens[alice], terms[bob])
    status, listed = hub.user_api(bob, tokens[bob], "GET", "/api/agents/sessions")
    assert [s["name"] for s in listed] == [terms[bob]]  # bob sees only his own
    alice_state = state_dir(alice)
    transcript = alice_state / "transcripts" / agent["id"]
    assert b"hello-from-alice" in transcript_bytes(alice_state, agent["id"])
    assert as_user(bob, "cat", str(transcript / "0.log")).returncode != 0
    assert as_user(bob, "ls", str(transcript)).returncode != 0
    assert as_user(bob, "ls", str(alice_state)).returncode != 0
    sock = alice_state / "tmux" / "socket"
    assert as_user(bob, "tmux", "-S", str(sock), "list-sessions").returncode != 0
    assert as_user(alice, "tmux", "-S", str(sock), "list-sessions").returncode == 0
    assert (alice_state.stat().st_mode & 0o777, alice_state.stat().st_uid) == (
        0o700, pwd.getpwnam(alice).pw_uid,
    )  # fmt: skip

    # 2. stop and start alice's server through the hub API: same processes
    status, before = hub.user_api(alice, tokens[alice], "GET", "/api/agents/sessions")
    hub.stop_server(alice)
    hub.start_server(alice)
    status, after = hub.user_api(alice, tokens[alice], "GET", "/api/agents/sessions")
    assert status == 200
    assert [(s["id"], s["status"], s["pid"]) for s in after] == [
        (s["id"], "running", s["pid"]) for s in before
    ]

    # 3. pod restart: backend and server gone, the state dir kept; restore_on_start=agents
    singleuser = singleuser_pid(alice)
    server_token = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{singleuser}/environ").read_text().split("\0")
        if "=" in item
    )["JUPYTERHUB_API_TOKEN"]
    hub.stop_server(alice)
    assert as_user(alice, "tmux", "-S", str(sock), "kill-server").returncode == 0
    hub.start_server(alice)
    status, models = hub.user_api(alice, tokens[alice], "GET", "/api/agents/sessions")
    by_id = {s["id"]: s for s in models}
    # a string, not a tuple: pytest shortens the repr of a tuple message to one line
    runs_log = Path(pwd.getpwnam(alice).pw_dir) / "fake-agents.jsonl"
    assert by_id[agent["id"]]["status"] == "running", "\n".join(
        [
            json.dumps(by_id[agent["id"]], indent=1),
            "fake agents' runs:",
            *runs_log.read_text().splitlines(),
            "the hub's log:",
            *hub.log_path.read_text().splitlines()[-60:],
        ]
    )
    assert by_id[agent["id"]]["conversation_id"] == agent["conversation_id"]
    runs = [json.loads(line) for line in runs_log.read_text().splitlines()]
    resumed = [r for r in runs if r["event"] == "start" and r["pid"] == by_id[agent["id"]]["pid"]]
    assert len(resumed) == 1
    argv = resumed[0]["argv"]  # resumed, with this session's own hooks (--settings)
    assert argv[:3] == ["--resume", agent["conversation_id"], "--settings"] and len(argv) == 4
    assert resumed[0]["cwd"] == str(proj)
    shells = [s for s in models if s["kind"] == "shell"]
    assert [s["status"] for s in shells] == ["interrupted"]  # shells are not auto-restored

    # 4. no hub or user token in any log
    hub.stop()
    log = hub.log_path.read_text()
    assert "jupyter_agents: spawned" in log and "restored claude session" in log
    for secret in (server_token, *tokens.values(), hub.admin):
        assert secret not in log
