"""The behaviour clients rely on from jupyter_server_terminals' suite, against our
terminals (pytest-jupyter in-process server, real tmux). pytest-jupyter enables the
stock extension too: ours must win."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_agents.server.terminals import TerminalManager


async def post(jp_fetch, body):
    r = await jp_fetch("api", "terminals", method="POST", body=json.dumps(body))
    return json.loads(r.body)


async def test_ours_replaces_stock(jp_serverapp, jp_fetch, tmp_path):
    assert isinstance(jp_serverapp.web_app.settings["terminal_manager"], TerminalManager)
    assert jp_serverapp.web_app.settings["terminals_available"] is True
    assert not jp_serverapp.extension_manager.extensions["jupyter_server_terminals"].enabled
    model = await post(jp_fetch, {})
    assert model["name"] == "1"
    out = subprocess.run(
        ["tmux", "-S", str(tmp_path / "st" / "tmux" / "socket"), "ls", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(out.stdout.split()) == 1  # the shell lives in our tmux, not in the server


async def test_list_create_get_delete(jp_fetch):
    r = await jp_fetch("api", "terminals")
    assert json.loads(r.body) == []
    first = await post(jp_fetch, {})
    second = await post(jp_fetch, {"name": "named"})
    assert first["name"] == "1" and second["name"] == "named"
    assert set(first) == {"name", "last_activity"}
    r = await jp_fetch("api", "terminals", "named")
    assert json.loads(r.body)["name"] == "named"
    names = [t["name"] for t in json.loads((await jp_fetch("api", "terminals")).body)]
    assert names == ["1", "named"]
    r = await jp_fetch("api", "terminals", "1", method="DELETE")
    assert r.code == 204
    names = [t["name"] for t in json.loads((await jp_fetch("api", "terminals")).body)]
    assert names == ["named"]
    sessions = json.loads((await jp_fetch("api", "agents", "sessions")).body)
    assert {s["name"]: s["status"] for s in sessions} == {"1": "killed", "named": "running"}
    # a new automatic name reuses the free "1"
    assert (await post(jp_fetch, {}))["name"] == "1"


async def test_post_existing_name_returns_it(jp_fetch):
    a = await post(jp_fetch, {"name": "dup"})
    b = await post(jp_fetch, {"name": "dup"})
    assert a == b
    sessions = json.loads((await jp_fetch("api", "agents", "sessions")).body)
    assert len(sessions) == 1


@pytest.mark.parametrize("kind", ["absolute", "relative", "missing"])
async def test_create_with_cwd(jp_fetch, jp_root_dir, kind):
    sub = Path(jp_root_dir) / "sub dir"
    sub.mkdir()
    cwd = {"absolute": str(sub), "relative": "sub dir", "missing": "/no/such/dir"}[kind]
    await post(jp_fetch, {"name": "c", "cwd": cwd})
    record = json.loads((await jp_fetch("api", "agents", "sessions")).body)[0]
    expected = Path(jp_root_dir).resolve() if kind == "missing" else sub.resolve()
    assert record["cwd"] == str(expected)


async def test_unknown_names_404(jp_fetch, jp_ws_fetch):
    for method in ("GET", "DELETE"):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("api", "terminals", "nope", method=method)
        assert e.value.code == 404
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("api", "agents", "sessions", "nope")
    assert e.value.code == 404
    with pytest.raises(HTTPClientError) as e:
        await jp_ws_fetch("terminals", "websocket", "nope")
    assert e.value.code == 404


@pytest.mark.parametrize(
    "name",
    [
        "a;kill-server",
        "$(touch x)",
        "../x",
        "a b",
        "x" * 10000,
        "",
        5,
        None.__class__.__name__ + ";",
        "é" * 65,
    ],
)
async def test_bad_names_rejected(jp_fetch, jp_root_dir, name):
    with pytest.raises(HTTPClientError) as e:
        await post(jp_fetch, {"name": name})
    assert e.value.code == 400
    assert b"invalid terminal name" in e.value.response.body
    assert not (Path(jp_root_dir) / "x").exists()
    sessions = json.loads((await jp_fetch("api", "agents", "sessions")).body)
    assert sessions == []


async def test_bad_bodies_rejected(jp_fetch):
    for body in (b"not json", b"[1, 2]"):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("api", "terminals", method="POST", body=body)
        assert e.value.code == 400


class DenyAction(Authorizer):
    """Denies one action on the terminals resource."""

    denied = ""

    def is_authorized(self, handler, user, action, resource):
        return not (resource == "terminals" and action == self.denied)


@pytest.mark.parametrize(
    "action,method,path",
    [
        ("read", "GET", ("api", "terminals")),
        ("write", "POST", ("api", "terminals")),
        ("read", "GET", ("api", "terminals", "1")),
        ("write", "DELETE", ("api", "terminals", "1")),
        ("read", "GET", ("api", "agents", "sessions")),
        ("read", "GET", ("api", "agents", "reconcile")),
        ("write", "POST", ("api", "agents", "reconcile")),
    ],
)
async def test_authorizer_denies_rest(jp_serverapp, jp_fetch, action, method, path):
    await post(jp_fetch, {})
    DenyAction.denied = action
    jp_serverapp.web_app.settings["authorizer"] = DenyAction(parent=jp_serverapp)
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch(*path, method=method, body="{}" if method == "POST" else None)
    assert e.value.code == 403


async def test_authorizer_denies_websocket(jp_serverapp, jp_fetch, jp_ws_fetch):
    await post(jp_fetch, {})
    DenyAction.denied = "execute"
    jp_serverapp.web_app.settings["authorizer"] = DenyAction(parent=jp_serverapp)
    with pytest.raises(HTTPClientError) as e:
        await jp_ws_fetch("terminals", "websocket", "1")
    assert e.value.code == 403


async def running_total(jp_fetch) -> float:
    """jupyter_server's prometheus gauge of running terminals, as /metrics serves it."""
    body = (await jp_fetch("metrics")).body.decode()
    (line,) = [x for x in body.splitlines() if x.startswith("terminal_currently_running_total ")]
    return float(line.split()[1])


async def test_running_total_follows_create_exit_delete(jp_fetch, jp_ws_fetch):
    """Dashboards built on stock read terminal_currently_running_total: it counts
    what is created, what is deleted and (unlike stock) a shell that exits, with no
    listing in between."""
    assert await running_total(jp_fetch) == 0
    await post(jp_fetch, {"name": "a"})
    await post(jp_fetch, {"name": "b"})
    assert await running_total(jp_fetch) == 2
    await jp_fetch("api", "terminals", "b", method="DELETE")
    assert await running_total(jp_fetch) == 1
    # `exit` typed into the tab of "a": its socket gets the disconnect, the gauge follows
    ws = await jp_ws_fetch("terminals", "websocket", "a")
    try:
        ws.write_message(json.dumps(["stdin", "exit\r"]))
        while (message := await asyncio.wait_for(ws.read_message(), 30)) is not None:
            if json.loads(message)[0] == "disconnect":
                break
    finally:
        ws.close()
    deadline = time.monotonic() + 30
    while (left := await running_total(jp_fetch)) != 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert left == 0
