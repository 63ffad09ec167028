"""Security: every route authenticated and authorized like terminals, private state,
no secrets in logs, and a fuzz run of >= 10,000 hostile inputs against a real server."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_agents.core.launch import NAME_PATTERN
from jupyter_agents.pytest_plugin import TOKEN
from jupyter_agents.server.handlers import handlers
from jupyter_agents.server.websocket import TermSocket
from jupyter_agents.sharing.auth import VIEW_RESOURCE

FUZZ_SCALE = float(os.environ.get("JUPYTER_AGENTS_FUZZ_SCALE", "1"))


def every_route(session_id: str, name: str) -> list[tuple[str, str]]:
    """(method, path) for every method of every route we serve."""
    found = []
    for pattern, handler, _ in handlers(None, None, None, None):  # type: ignore[arg-type]
        path = pattern.replace(r"(\w+)", name if "terminals" in pattern else session_id, 1)
        path = path.replace(r"([\w.]+)", "xterm.js").replace(r"([\w-]+)", "no-such-token")
        path = path.replace("\\.", ".")
        for method in ("GET", "POST", "DELETE"):
            socket = method == "GET" and issubclass(handler, TermSocket)
            if method.lower() in vars(handler) or socket:
                found.append((method, path))
    return found


#: the routes that ask no Jupyter credential (each checked on its own above)
PUBLIC = ("/agents/act/", "/agents/sw.js")


class DenyAll(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return resource not in ("terminals", VIEW_RESOURCE)


def tmux_sessions(state: Path) -> set[str]:
    out = subprocess.run(
        ["tmux", "-S", str(state / "tmux" / "socket"), "list-sessions", "-F", "#{session_name}"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return set(out.split())


async def test_every_route_is_authorized_and_authenticated(
    jp_serverapp, jp_fetch, jp_ws_fetch, tmp_path
):
    r = await jp_fetch("api", "agents", "sessions", method="POST", body=json.dumps({}))
    model = json.loads(r.body)
    before = tmux_sessions(tmp_path / "st")
    routes = every_route(model["id"], model["name"])
    assert len(routes) >= 14, routes
    # no token: 403 everywhere (the watch and requests pages and their assets: a
    # redirect to log in), but on the answer links, which ask no credential but their
    # own token (jupyter_agents/server/act.py): a wrong one is 404, whatever the method;
    # and the service worker's script, the same code for anyone
    public = await jp_fetch("agents", "sw.js", headers={"Authorization": ""})
    assert public.code == 200 and b"notificationclick" in public.body
    for method, path in routes:
        if path == "/agents/sw.js":
            continue
        if path.startswith(PUBLIC):
            with pytest.raises(HTTPClientError) as e:
                await jp_fetch(
                    *path.strip("/").split("/"),
                    method=method,
                    body="" if method == "POST" else None,
                    headers={"Authorization": ""},
                    follow_redirects=False,
                )
            assert e.value.code == 404, (method, path, e.value.code)
            continue
        with pytest.raises(HTTPClientError) as e:
            if path.endswith("socket") or "websocket" in path:
                await jp_ws_fetch(*path.strip("/").split("/"), headers={"Authorization": ""})
            else:
                await jp_fetch(
                    *path.strip("/").split("/"),
                    method=method,
                    body="{}" if method == "POST" else None,
                    headers={"Authorization": "token wrong"},
                    follow_redirects=False,
                )
        pages = ("/agents/view/", "/agents/requests")
        page = path.startswith(pages) and not path.endswith("socket")
        assert e.value.code == (302 if page else 403), (method, path, e.value.code)
        if page:
            assert "/login?" in e.value.response.headers["Location"]
    # authenticated, but the authorizer denies the terminals resource: 403 everywhere
    jp_serverapp.web_app.settings["authorizer"] = DenyAll(parent=jp_serverapp)
    for method, path in routes:
        if path.startswith(PUBLIC):
            continue
        with pytest.raises(HTTPClientError) as e:
            if path.endswith("socket") or "websocket" in path:
                await jp_ws_fetch(*path.strip("/").split("/"))
            else:
                await jp_fetch(
                    *path.strip("/").split("/"),
                    method=method,
                    body="{}" if method == "POST" else None,
                )
        assert e.value.code == 403, (method, path, e.value.code)
    assert tmux_sessions(tmp_path / "st") == before  # nothing spawned, nothing killed
    store_model = jp_serverapp.web_app.settings["terminal_manager"].service.get(model["id"])
    assert store_model.status == "running"


FAKES = Path(__file__).parent / "fakes"
#: what a user with ``read`` on ``terminals`` only gets: the lists and records, never
#: output (stock asks ``execute`` for the websocket, the only way it shows output)
READ_ONLY = {
    "/api/terminals": 200,
    "/api/agents/sessions": 200,
    "/api/agents/sessions/{id}": 200,
    "/api/agents/kinds": 200,
    "/api/agents/reconcile": 200,
    "/api/agents/sessions/{id}/log": 403,
    "/api/agents/sessions/{id}/log?offset=0&length=10": 403,
    "/api/agents/sessions/{id}/export?format=txt": 403,
    "/api/agents/sessions/{id}/export?format=html": 403,
    "/api/agents/search?q=secret-output": 403,
    "/api/agents/sessions/{id}/conversation": 403,
    "/api/agents/sessions/{id}/conversation?format=jsonl": 403,
    "/api/agents/sessions/{id}/worktree": 403,
}


def test_read_alone_lists_sessions_but_never_shows_output(agents_server):
    """A deployment granting only ``read`` (tests/fakes/authorizers.py): listing works;
    the log, export and search, which show output, need ``execute`` as the websocket
    does; nothing is started or changed."""
    owner = agents_server()
    status, model = owner.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201
    owner.type_line(model["name"], "echo secret-$((6*7))-output", "secret-42-output")
    owner.stop()  # detaches: the shell lives on
    reader = agents_server(
        env={"PYTHONPATH": str(FAKES)},
        args=["--ServerApp.authorizer_class=authorizers.ReadOnly"],
    )
    for path, expected in READ_ONLY.items():
        status, body = reader.request("GET", path.format(id=model["id"]))
        assert status == expected, (path, status, body)
        if status == 403:
            assert b"secret" not in json.dumps(body).encode(), (path, body)
    assert reader.request("GET", f"/api/agents/sessions/{model['id']}")[1]["status"] == "running"
    for method, path in (
        ("POST", "/api/agents/sessions"),
        ("POST", "/api/terminals"),
        ("DELETE", f"/api/agents/sessions/{model['id']}"),
    ):
        assert reader.request(method, path, {} if method == "POST" else None)[0] == 403, path
    with pytest.raises(Exception, match="403"):
        reader.ws(model["name"])
    sessions = reader.request("GET", "/api/agents/sessions")[1]
    assert [(s["id"], s["status"]) for s in sessions] == [(model["id"], "running")]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_is_private_and_tokens_never_logged(agents_server, agents_state_dir):
    server = agents_server(env={"JUPYTER_TOKEN": TOKEN, "JUPYTERHUB_API_TOKEN": "hub-secret-xyz"})
    status, model = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201
    client = server.ws(model["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)
    client.stdin("env | grep -c -E 'TOKEN|hub-secret' ; echo checked\r")
    client.wait_for("\r0\r\nchecked")  # grep counted no token in the session's env
    client.close()
    assert mode(agents_state_dir) == 0o700
    for sub in ("tmux", "transcripts"):
        assert mode(agents_state_dir / sub) == 0o700
    socket = agents_state_dir / "tmux" / "socket"
    assert stat.S_ISSOCK(socket.stat().st_mode) and mode(socket) & 0o077 == 0
    transcript = agents_state_dir / "transcripts" / model["id"]
    assert mode(transcript) == 0o700
    segments = list(transcript.iterdir())
    assert segments and all(mode(p) == 0o600 for p in segments)
    assert not list((agents_state_dir / "tmux").glob("env-*"))  # env files read, deleted
    server.request("DELETE", f"/api/agents/sessions/{model['id']}")
    server.stop()
    log = server.log_path.read_text()
    assert "jupyter_agents: spawned" in log
    assert TOKEN not in log and "hub-secret-xyz" not in log


def test_state_dir_of_another_user_is_refused(agents_server, agents_state_dir, tmp_path):
    agents_state_dir.mkdir(mode=0o700)
    os.chown(agents_state_dir, 65534, 65534)
    server = agents_server()
    status, _ = server.request("POST", "/api/terminals", {})
    assert status == 404  # terminals unavailable: nothing was spawned there
    assert "belongs to uid 65534, not to you" in server.log_path.read_text()
    assert not (agents_state_dir / "tmux").exists()


# -- fuzz ----------------------------------------------------------------------------

PWNED = "/tmp/jupyter-agents-fuzz-pwned"
hostile = st.sampled_from(
    [f"; touch {PWNED}", f"$(touch {PWNED})", f"`touch {PWNED}`", "../../etc/passwd", "#{pane_pid}",
     "\x00", "\x1b]0;x\x07", "a\nb", "%s%n", "' OR 1=1 --", "🙂" * 50, "x" * 5000, ";", "\\"]
)  # fmt: skip
text = st.one_of(st.text(max_size=40), hostile)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=8,
)


def bad_name(sentinel: str) -> st.SearchStrategy[object]:
    """Names that can never start a session: invalid ones, or the live sentinel's."""
    return st.one_of(
        st.just(sentinel),
        text.filter(lambda s: not NAME_PATTERN.fullmatch(s)),
        json_value.filter(lambda v: v is not None and not isinstance(v, str)),
    )


@pytest.fixture
def fuzz_server(agents_server):
    server = agents_server()
    status, sentinel = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201
    return server, sentinel


def check(status: int, allowed: set[int]) -> None:
    assert status < 500, status
    assert status in allowed, status


def fuzz(n: int):
    return settings(
        max_examples=max(1, int(n * FUZZ_SCALE)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )


@pytest.mark.timeout(600)
def test_fuzz_rest_and_websocket(fuzz_server, agents_state_dir):
    server, sentinel = fuzz_server
    counts = {"requests": 0, "frames": 0}

    @fuzz(3000)
    @given(body=st.dictionaries(st.sampled_from(["name", "cwd", "x"]), json_value, max_size=3),
           name=bad_name(sentinel["name"]))  # fmt: skip
    def terminals_post(body, name):
        body["name"] = name
        status, _ = server.request("POST", "/api/terminals", json.dumps(body).encode())
        counts["requests"] += 1
        check(status, {200, 400})

    @fuzz(3000)
    @given(kind=st.one_of(st.sampled_from(["shell", "claude", "codex"]), json_value),
           cwd=json_value, args=json_value, name=bad_name(sentinel["name"]),
           extra=st.dictionaries(text, json_value, max_size=2))  # fmt: skip
    def agents_post(kind, cwd, args, name, extra):
        body = {**extra, "kind": kind, "cwd": cwd, "args": args, "name": name}
        status, _ = server.request("POST", "/api/agents/sessions", json.dumps(body).encode())
        counts["requests"] += 1
        check(status, {400, 409})

    @fuzz(2000)
    @given(query=st.dictionaries(st.sampled_from(["offset", "length", "x"]), text, max_size=3),
           sid=st.one_of(st.just(sentinel["id"]), text),
           tail=st.sampled_from(["", "/log", "/restore", "/adopt", "/x"]))  # fmt: skip
    def routes(query, sid, tail):
        path = "/api/agents/sessions/" + urllib.parse.quote(sid, safe="") + tail
        method = "POST" if tail in ("/restore", "/adopt") else "GET"
        if query:
            path += "?" + urllib.parse.urlencode(query)
        status, _ = server.request(method, path, b"{}" if method == "POST" else None)
        counts["requests"] += 1
        check(status, {200, 400, 404, 405, 409, 416})

    terminals_post()
    agents_post()
    routes()

    client = server.ws(sentinel["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)

    @fuzz(2500)
    @given(frame=st.one_of(
        json_value.map(json.dumps),
        st.lists(json_value, max_size=5).map(json.dumps),
        st.tuples(st.sampled_from(["set_size", "stdin", "x"]), json_value, json_value).map(
            lambda t: json.dumps(list(t))),
        text,
    ))  # fmt: skip
    def frames(frame):
        if frame.startswith('["stdin"'):
            return  # typing random text into the shell is not the point here
        client.ws.send(frame)
        counts["frames"] += 1

    frames()
    client.stdin("echo still-$((20+1))\r")
    client.wait_for("still-21")
    client.close()
    total = counts["requests"] + counts["frames"]
    print(f"fuzz: {counts['requests']} requests, {counts['frames']} frames, {total} inputs")
    assert total >= 10_000 * FUZZ_SCALE * 0.95
    records = server.request("GET", "/api/agents/sessions")[1]
    assert [(r["id"], r["status"], r["pid"]) for r in records] == [
        (sentinel["id"], "running", sentinel["pid"])
    ]  # nothing spawned, nothing lost
    assert not Path(PWNED).exists()
    assert server.proc is not None and server.proc.poll() is None


# -- another user on the same host -------------------------------------------------------

#: the other user: ``nobody``
OTHER_UID = 65534

#: a listener another user planted where our backend's socket is: it binds ``argv[1]``;
#: with ``argv[3] == "file"`` the socket file is the other user's, with ``"peer"`` the
#: file stays ours but the process listening becomes the other user; every connection's
#: bytes are appended to ``argv[2]``. Prints "ready" once listening.
PLANTED = f"""
import os, socket, sys
path, log, how = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
if how == "file":
    os.chown(path, {OTHER_UID}, {OTHER_UID})
os.setgid({OTHER_UID}); os.setuid({OTHER_UID})
s.listen(8)
print("ready", flush=True)
while True:
    conn, _ = s.accept()
    conn.settimeout(2)
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except OSError:
        pass
    with open(log, "ab") as f:
        f.write(b"CONNECTION " + data + b"\\n")
"""


def needs_root() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to act as another user")


def test_a_state_dir_others_could_replace_is_refused_at_start(agents_server, tmp_path):
    """A state dir under a folder anyone can write to (no sticky bit): another user could
    rename it away while the server runs and plant theirs. The server refuses it at
    start, naming the folder and a safe place, and creates nothing there; a state dir
    right under /tmp (sticky) starts as always."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    state = shared / "alice"
    server = agents_server(env={"JUPYTER_AGENTS_STATE_DIR": str(state)})
    status, body = server.request("POST", "/api/terminals", {})
    assert status == 404, body  # no terminals: nothing was spawned there
    log = server.log_path.read_text()
    assert f"refusing the state dir {state}: its parent {shared} is not safe" in log
    assert "anyone can write to it" in log and "such as /" in log
    assert not state.exists()

    safe = Path(f"/tmp/jupyter-agents-test-{os.getpid()}-{tmp_path.name}")
    try:
        server = agents_server(env={"JUPYTER_AGENTS_STATE_DIR": str(safe / "st")})
        status, model = server.request("POST", "/api/terminals", {})
        assert status == 200, model
        server.request("DELETE", f"/api/terminals/{model['name']}")
    finally:
        from jupyter_agents.pytest_plugin import kill_backends

        kill_backends(safe / "st")
        subprocess.run(["rm", "-rf", str(safe)], check=False)


@pytest.mark.parametrize(
    ("agents_backend", "how"),
    [("tmux", "file"), ("broker", "file"), ("broker", "peer")],
    indirect=["agents_backend"],
)
def test_a_planted_backend_socket_gets_nothing(agents_server, agents_state_dir, tmp_path, how):
    """Another user's listener where our tmux or broker socket belongs (the socket file
    is theirs, or the process listening runs as them): the server never connects to it
    (no frame, no environment, no keystroke reaches it), says why in its log, and
    answers with a clear 503 instead of starting a terminal there."""
    needs_root()
    server = agents_server()  # the backend's folders exist, ours
    status, _ = server.request("POST", "/api/terminals", {})
    assert status == 200
    server.stop()
    from jupyter_agents.pytest_plugin import kill_backends

    kill_backends(agents_state_dir)
    if server.extra_args and "--AgentsApp.backend=broker" in server.extra_args:
        from jupyter_agents.backends.broker.protocol import broker_paths

        path = broker_paths(agents_state_dir)[0]
    else:
        path = agents_state_dir / "tmux" / "socket"
    path.unlink(missing_ok=True)
    os.chmod(path.parent, 0o711)  # the planted listener (nobody) binds as root first
    got = tmp_path / "planted.log"
    got.touch()
    os.chmod(got, 0o666)
    planted = subprocess.Popen(
        [sys.executable, "-c", PLANTED, str(path), str(got), how],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert planted.stdout is not None and planted.stdout.readline().strip() == "ready"
        os.chmod(path.parent, 0o700)
        server.extra_env["ANTHROPIC_API_KEY"] = "sk-secret-for-the-test"
        server.start()
        # the broker is asked at start: terminals are off (404, the log says why); tmux
        # is asked when a session starts: a 503 saying why
        status, body = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
        assert status in (404, 503), body
        if status == 503:
            assert "refusing the tmux socket" in body["message"], body
        status, body = server.request("POST", "/api/terminals", {})
        assert status in (404, 503), body
    finally:
        planted.kill()
        planted.wait()
        planted.stdout.close()  # type: ignore[union-attr]
        server.stop()
        path.unlink(missing_ok=True)
    assert got.read_bytes() == b"", got.read_bytes()[:300]  # not even a connection
    log = server.log_path.read_text()
    assert "not connecting to" in log
    assert ("belongs to uid 65534" if how == "file" else "runs as uid 65534") in log
