"""jupyter_agents/rest-api.yml matches what the server serves: the same routes and
methods, and real responses validate against its schemas."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

import jupyter_agents
from jupyter_agents.server.handlers import handlers
from jupyter_agents.server.websocket import TermSocket

SPEC = yaml.safe_load((Path(jupyter_agents.__file__).parent / "rest-api.yml").read_text())


def served() -> set[tuple[str, str]]:
    """(spec-style path, method) for every route and method our handlers implement."""
    found = set()
    for pattern, handler, _ in handlers(None, None, None, None):  # type: ignore[arg-type]
        param = "{name}" if "terminals" in pattern else "{id}"
        path = pattern.replace(r"(\w+)", param).replace("(.*)", param)
        path = path.replace(r"([\w.]+)", "{file}").replace(r"([\w-]+)", "{token}")
        path = path.replace("\\.", ".")
        for method in ("get", "post", "delete"):
            if method in vars(handler) or (method == "get" and issubclass(handler, TermSocket)):
                found.add((path, method))
    return found


def test_spec_lists_exactly_the_served_routes():
    documented = {
        (path, method)
        for path, item in SPEC["paths"].items()
        for method in item
        if method in ("get", "post", "delete")
    }
    assert documented == served()


def to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 schema -> JSON Schema (nullable, $ref into components)."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return to_json_schema(SPEC["components"]["schemas"][name])
    out = {k: to_json_schema(v) for k, v in node.items() if k not in ("nullable", "example")}
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
    return out


def schema(path: str, method: str, status: str) -> Any:
    response = SPEC["paths"][path][method]["responses"][status]
    return to_json_schema(response["content"]["application/json"]["schema"])


async def test_responses_validate(jp_fetch):
    async def call(method: str, *parts: str, body: Any = None, **params: str) -> Any:
        data = None if body is None else json.dumps(body)
        r = await jp_fetch(*parts, method=method, body=data, params=params)
        return json.loads(r.body) if r.body else None

    made = await call("POST", "api", "agents", "sessions", body={"kind": "shell"})
    jsonschema.validate(made, schema("/api/agents/sessions", "post", "201"))
    listed = await call("GET", "api", "agents", "sessions")
    jsonschema.validate(listed, schema("/api/agents/sessions", "get", "200"))
    one = await call("GET", "api", "agents", "sessions", made["id"])
    jsonschema.validate(one, schema("/api/agents/sessions/{id}", "get", "200"))
    jsonschema.validate(
        await call("GET", "api", "terminals"), schema("/api/terminals", "get", "200")
    )
    jsonschema.validate(
        await call("GET", "api", "agents", "kinds"), schema("/api/agents/kinds", "get", "200")
    )
    sharing = await call("GET", "api", "agents", "sharing")
    jsonschema.validate(sharing, schema("/api/agents/sharing", "get", "200"))
    # a server that is not a hub's cannot share, and says why in the grant's words
    assert sharing["available"] is False and "JupyterHub" in sharing["reason"]
    for _ in range(100):  # until its prompt is in the transcript
        page = await call(
            "GET", "api", "agents", "search", q="[$#]", regex="true", session=made["id"], limit="1"
        )
        if page["hits"]:
            break
        await asyncio.sleep(0.1)
    assert page["hits"] and page["next"] is not None
    jsonschema.validate(page, schema("/api/agents/search", "get", "200"))
    notify = await call("GET", "api", "agents", "notify")
    jsonschema.validate(notify, schema("/api/agents/notify", "get", "200"))
    presence = await call("POST", "api", "agents", "presence", body={"visible": True, "tab": "t"})
    jsonschema.validate(presence, schema("/api/agents/presence", "post", "200"))
    key = await call("GET", "api", "agents", "push", "key")
    jsonschema.validate(key, schema("/api/agents/push/key", "get", "200"))
    devices = await call("GET", "api", "agents", "push", "subscriptions")
    jsonschema.validate(devices, schema("/api/agents/push/subscriptions", "get", "200"))
    await call("DELETE", "api", "agents", "sessions", made["id"])
    report = await call("POST", "api", "agents", "reconcile", body={})
    jsonschema.validate(report, schema("/api/agents/reconcile", "post", "200"))
    restored = await call("POST", "api", "agents", "sessions", made["id"], "restore", body={})
    jsonschema.validate(restored, schema("/api/agents/sessions/{id}/restore", "post", "200"))
    everything = await call("POST", "api", "agents", "restore", body={})
    jsonschema.validate(everything, schema("/api/agents/restore", "post", "200"))
    assert re.fullmatch(r"\w+", made["id"])
