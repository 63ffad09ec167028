"""An OpenAPI-driven fuzzer of the REST API: schemathesis generates requests from
jupyter_agents/rest-api.yml (inputs that fit the spec and inputs that break it, every
operation) and sends them to a real ``jupyter server`` on each backend. No answer may be
a 5xx, and every answer must be one the spec lists, with the body its schema describes.

Path ids are real part of the time (:class:`World`: a running shell, an ended one and
its terminal name), so the fuzzer reaches past the 404 of an unknown id into every
route. What the requests start (a POST that spawns a shell, a restore) is ended after
each one, and what they end (a DELETE of the running shell) is replaced, so each
example finds the same world.

Seeded (:data:`SEED`) for reproducible CI; ``JUPYTER_AGENTS_FUZZ_SCALE`` multiplies the
examples per operation (e.g. 20 for a long local hunt) and ``JUPYTER_AGENTS_FUZZ_SEED``
picks another seed.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import jupyter_agents
from jupyter_agents.pytest_plugin import TOKEN, ServerProcess
from jupyter_agents.server.handlers import handlers

SPEC = Path(jupyter_agents.__file__).parent / "rest-api.yml"
SEED = int(os.environ.get("JUPYTER_AGENTS_FUZZ_SEED", "27"))
FUZZ_SCALE = float(os.environ.get("JUPYTER_AGENTS_FUZZ_SCALE", "1"))
#: examples per operation and generation mode (positive, negative) in CI
EXAMPLES = 40
#: the name of the ended session the fuzzer's ids come from
UNICODE_NAME = "тест_ß"
#: how many of the sessions the fuzzer started lend their ids to later examples
MADE = 3
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

#: every (method, path) the spec documents
OPERATIONS = [
    (method.upper(), path)
    for path, item in yaml.safe_load(SPEC.read_text())["paths"].items()
    for method in item
    if method in ("get", "post", "delete")
]
#: our routes as tornado matches them (on the path as sent, percent-encoded)
ROUTES = [re.compile(p + "$") for p, _, _ in handlers(None, None, None, None)]  # type: ignore[arg-type]


class World:
    """The sessions the fuzzer's path ids come from, put back in shape after each
    request that may have changed them."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.requests = 0
        #: (method, path template) -> {status: count}
        self.statuses: dict[tuple[str, str], dict[int, int]] = {}
        self.tidy_requests = 0
        self.started = time.monotonic()
        self.live = self.start()
        # ended, and named in letters that are not ASCII (the spec's \w is ECMA's,
        # ASCII only, so the fuzzer never makes such names; Python's \w, ours, takes them)
        ended = self.start(name=UNICODE_NAME)
        assert self.call("DELETE", f"/api/agents/sessions/{ended['id']}")[0] == 204
        self.ended = ended
        #: the newest sessions the fuzzer's requests started (ended since)
        self.made: list[dict[str, Any]] = []

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        self.tidy_requests += 1
        return self.server.request(method, path, body)

    def start(self, **fields: str) -> dict[str, Any]:
        status, model = self.call("POST", "/api/agents/sessions", {"kind": "shell", **fields})
        assert status == 201, model
        return dict(model)

    def real(self, path: str) -> dict[str, list[str]]:
        """The real values a path parameter of ``path`` may take now."""
        sessions = [self.live, self.ended, *self.made]
        if "{name}" in path:
            return {"name": [s["name"] for s in sessions]}
        if path.startswith("/api/agents/sessions/{id}"):
            return {"id": [s["id"] for s in sessions]}
        return {}

    def tidy(self) -> None:
        """End every running session but :attr:`live` (the newest ones the fuzzer
        started join :attr:`made`, whose ids and names later examples use), and start a
        new :attr:`live` if it ended."""
        status, sessions = self.call("GET", "/api/agents/sessions")
        assert status == 200, (sessions, self.server.log_path.read_text()[-3000:])
        known = {s["id"] for s in (self.live, self.ended, *self.made)}
        for s in sessions:
            if s["status"] in ("running", "orphaned") and s["id"] != self.live["id"]:
                self.call("DELETE", f"/api/agents/sessions/{s['id']}")
            if s["id"] not in known:
                self.made = [*self.made, s][-MADE:]
        if not any(s["id"] == self.live["id"] and s["status"] == "running" for s in sessions):
            self.live = self.start()


@pytest.fixture
def world(agents_server, agents_backend: str) -> Iterator[World]:
    # a restore answers after watching the new process for resume_check (3 s by default):
    # what it answers, not how long it watches, is fuzzed here (test_agents.py has the check)
    world = World(agents_server(args=["--AgentsApp.resume_check=0.2"]))
    yield world
    took = time.monotonic() - world.started
    print(
        f"\nfuzz ({agents_backend}): {world.requests} requests from rest-api.yml in {took:.0f} s,"
        f" {world.tidy_requests} more to set up and tidy; answers by operation:"
    )
    for (method, path), seen in sorted(world.statuses.items(), key=lambda kv: kv[0][1]):
        print(f"  {method:6} {path:40} {dict(sorted(seen.items()))}")
    for method, path in OPERATIONS:  # the fuzzer reached every route, with real ids
        seen = world.statuses.get((method, path), {})
        assert seen, f"no request of {method} {path} reached its handler"
        if world.real(path):
            assert set(seen) - {404}, f"{method} {path} never got a real id: {seen}"


@pytest.fixture
def rest_schema(world: World) -> Any:
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "base-url": world.server.base,
            "headers": {"Authorization": f"token {TOKEN}"},
            "generation": {
                "mode": "all",
                "max-examples": max(1, int(EXAMPLES * FUZZ_SCALE)),
                "database": "none",
            },
        }
    )
    schema = schemathesis.openapi.from_path(SPEC, config=config)

    @schema.hook
    def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
        """The generated path parameters, or (as often) ones naming a real session."""
        generated = path_parameters or {}
        real = [
            st.sampled_from(values).map(lambda value, key=key: {**generated, key: value})
            for key, values in world.real(context.operation.path).items()
        ]
        return st.one_of(st.just(path_parameters), *real)

    return schema


fuzzed = schemathesis.pytest.from_fixture("rest_schema")


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
@pytest.mark.timeout(int(600 * max(1.0, FUZZ_SCALE)))
@fuzzed.parametrize()
def test_rest_api(case: Any, world: World) -> None:
    response = case.call(timeout=30)
    world.requests += 1
    try:
        path = urllib.parse.urlsplit(response.request.url).path
        if not any(route.match(path) for route in ROUTES):
            # a path no route of ours matches (an id that is not \w+): jupyter_server's
            # own "not found" page
            assert response.status_code == 404, (path, response.status_code)
            return
        seen = world.statuses.setdefault((case.method, case.operation.path), {})
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        case.validate_response(response, checks=CHECKS)
    finally:
        if case.method in ("POST", "DELETE") and response.status_code < 400:
            world.tidy()


# -- what the fuzzer found, each on its own ----------------------------------------


def raw_get(server: ServerProcess, path: str, **headers: str) -> tuple[int, Any, bytes]:
    """(status, headers, body) of a GET, whatever the status."""
    req = urllib.request.Request(
        server.base + path, headers={"Authorization": f"token {TOKEN}", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_log_and_export_say_what_they_send(agents_server, tmp_path: Path) -> None:
    """The log is application/octet-stream (APIHandler.finish made every log
    application/json); an export that is empty (a session that printed nothing) is
    still its format's type (it was application/json: nothing was flushed before
    finish); a Range of an empty transcript is a 200 of nothing (it was a 206 with
    ``Content-Range: bytes 0--1/0``)."""
    (tmp_path / "config").mkdir()
    silent = {"AgentsApp": {"agents": {"silent": {"command": ["sleep", "600"]}}}}
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(silent))
    server = agents_server()
    shell = server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    quiet = server.request("POST", "/api/agents/sessions", {"kind": "silent"})[1]
    server.type_line(shell["name"], "echo printed-$((2+3))", "printed-5")
    status, headers, body = raw_get(server, f"/api/agents/sessions/{shell['id']}/log")
    assert (status, headers["Content-Type"]) == (200, "application/octet-stream")
    assert b"printed-5" in body
    status, headers, body = raw_get(server, f"/api/agents/sessions/{quiet['id']}/log")
    assert (status, headers["Content-Type"], body) == (200, "application/octet-stream", b"")
    status, headers, body = raw_get(
        server, f"/api/agents/sessions/{quiet['id']}/log", Range="bytes=0-"
    )
    assert (status, body, headers["Content-Range"]) == (200, b"", None)
    status, headers, body = raw_get(server, f"/api/agents/sessions/{quiet['id']}/export")
    assert (status, headers["Content-Type"], body) == (200, "text/plain; charset=utf-8", b"")
