"""Ordinary bad input gets a 400 with a message, never a 500, on a real server: numbers
that are not ASCII digits or are out of bounds, bodies that are not UTF-8 JSON objects,
and a non-ASCII terminal name in an export's ``Content-Disposition`` (RFC 6266/5987).
Every case here answered 500 before :mod:`jupyter_agents.server.params`."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from jupyter_agents.pytest_plugin import TOKEN, ServerProcess, poll


@pytest.fixture
def server(agents_server) -> ServerProcess:
    return agents_server()


@pytest.fixture
def shell(server: ServerProcess) -> dict:
    status, model = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, model
    return model


def get(server: ServerProcess, path: str, **query: str) -> tuple[int, object]:
    return server.request("GET", path + "?" + urllib.parse.urlencode(query))


def assert_400(answer: tuple[int, object], mentions: str) -> None:
    status, body = answer
    assert status == 400, answer
    assert isinstance(body, dict) and mentions in body["message"], body


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ({"limit": "²"}, "limit"),  # str.isdigit() is True, int() raises
        ({"limit": "٣"}, "limit"),  # an Arabic-Indic 3: int() takes it, we do not
        ({"limit": "9" * 5000}, "limit"),  # over int()'s 4300-digit limit
        ({"since": "99999999999999999999"}, "since"),
        ({"regex": "yes"}, "regex"),
    ],
    ids=["superscript", "arabic-indic", "5000-digits", "since-digits", "regex-flag"],
)
def test_search_arguments(server: ServerProcess, query: dict[str, str], mentions: str) -> None:
    assert_400(get(server, "/api/agents/search", q="x", **query), mentions)


def test_search_since_before_the_year_1(server: ServerProcess) -> None:
    """``since=999999d`` overflowed timedelta arithmetic (500); it means since the year 1."""
    status, page = get(server, "/api/agents/search", q="x", since="999999d")
    assert status == 200, page
    assert isinstance(page, dict) and page["hits"] == []


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ({"offset": "²"}, "offset"),
        ({"length": "²"}, "length"),
        ({"offset": "9" * 5000}, "offset"),
        ({"offset": "-1"}, "offset"),
        ({"offset": "0x10"}, "offset"),
    ],
    ids=["offset-superscript", "length-superscript", "5000-digits", "negative", "hex"],
)
def test_log_arguments(server: ServerProcess, shell: dict, query: dict, mentions: str) -> None:
    assert_400(get(server, f"/api/agents/sessions/{shell['id']}/log", **query), mentions)


@pytest.mark.parametrize(
    "header",
    ["bytes=²-", "bytes=-²", "bytes=0-" + "9" * 5000, "bytes=٣-"],
    ids=["superscript", "suffix-superscript", "5000-digits", "arabic-indic"],
)
def test_log_range_header(server: ServerProcess, shell: dict, header: str) -> None:
    url = f"{server.base}/api/agents/sessions/{shell['id']}/log"
    req = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    req.add_header("Range", header.encode().decode("latin-1"))  # as the bytes go on the wire
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code == 400, (header, e.code)
        assert "Range" in json.loads(e.read())["message"]
    else:
        raise AssertionError(f"{header!r} was accepted")


NOT_UTF8 = b'{"name": "\xff\xfe"}'
#: valid JSON, but what it names is no text: a UTF-16 surrogate alone (SQLite, a file
#: name or a prompt sent on as UTF-8 cannot take it)
LONE_SURROGATE = b'{"name": "\\ud800", "cwd": "\\udfff"}'


@pytest.mark.parametrize(
    "path",
    ["/api/terminals", "/api/agents/sessions", "/api/agents/restore", "/api/agents/shares"],
)
@pytest.mark.parametrize(
    "body",
    [
        NOT_UTF8,
        b"\xff",
        LONE_SURROGATE,
        b"[" * 60_000,
        b'{"a": NaN}',
        b"1" * 5000,
        b"[1, 2]",
        b'"text"',
    ],
    ids=[
        "not-utf8-string",
        "not-utf8",
        "lone-surrogate",
        "deep",
        "nan",
        "5000-digits",
        "array",
        "string",
    ],
)
def test_bodies(server: ServerProcess, path: str, body: bytes) -> None:
    """Not UTF-8, a lone surrogate escaped in a string, nested past the parser's
    recursion limit, not JSON (NaN), an integer past int()'s digit limit, or not an
    object: 400 with a message on every POST."""
    status, answer = server.request("POST", path, body)
    if path == "/api/agents/shares" and status == 403:
        return  # the owner check comes first there only on JupyterHub; not this server
    assert status == 400, (path, body[:20], status, answer)
    assert isinstance(answer, dict) and answer["message"], answer


@pytest.mark.parametrize("fmt", ["txt", "html", "cast"])
def test_export_of_a_non_ascii_name(server: ServerProcess, fmt: str) -> None:
    """A terminal named ``тест`` (which POST /api/terminals accepts) exports with an
    RFC 6266 Content-Disposition: an ASCII fallback and the UTF-8 name (RFC 5987)."""
    status, terminal = server.request("POST", "/api/terminals", {"name": "тест"})
    assert status == 200, terminal
    sessions = server.request("GET", "/api/agents/sessions")[1]
    (sid,) = [s["id"] for s in sessions if s["name"] == "тест"]
    url = f"{server.base}/api/agents/sessions/{sid}/export?format={fmt}"
    req = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        disposition = resp.headers["Content-Disposition"]
    ext = {"txt": "txt", "html": "html", "cast": "cast"}[fmt]
    quoted = urllib.parse.quote(f"shell-тест-{sid}.{ext}")
    assert disposition == (
        f"attachment; filename=\"shell-____-{sid}.{ext}\"; filename*=UTF-8''{quoted}"
    )


def test_a_bad_request_leaves_the_server_serving(server: ServerProcess, shell: dict) -> None:
    for body in (NOT_UTF8, b"[" * 60_000):
        server.request("POST", "/api/agents/sessions", body)
    assert poll(lambda: server.request("GET", "/api/status")[0] == 200)
    assert server.request("GET", f"/api/agents/sessions/{shell['id']}")[1]["status"] == "running"
