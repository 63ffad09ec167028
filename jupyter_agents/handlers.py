"""REST API ``/api/agents/...`` (see rest-api.yml). Thin: parse, authorize, call the
manager, serialise. Authorized like the stock terminals (resource ``terminals``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from .errors import AgentsError, InvalidRequest, NotFound, OutOfRange, http_error
from .terminals import TerminalsAPIHandler

#: the most transcript bytes one log request returns
MAX_LOG_CHUNK = 4 * 1024 * 1024
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def log_window(
    size: int, offset: str | None, length: str | None, range_header: str | None
) -> tuple[int, int, bool]:
    """Which bytes of a ``size``-byte transcript to send: ``(start, count, partial)``.

    From ``?offset=&length=`` or an HTTP ``Range: bytes=a-b`` / ``bytes=-n`` header
    (``partial``: answer 206). Capped at ``MAX_LOG_CHUNK``. Raises
    :class:`InvalidRequest` for malformed or negative values and :class:`OutOfRange`
    for a start past the end.

    >>> log_window(100, None, None, None), log_window(100, "90", "50", None)
    ((0, 100, False), (90, 10, False))
    >>> log_window(100, None, None, "bytes=-10")
    (90, 10, True)
    """

    def number(name: str, value: str) -> int:
        if not value.isdigit():
            raise InvalidRequest(f"{name} must be a non-negative integer, got {value[:40]!r}")
        return int(value)

    partial = False
    if range_header is not None and offset is None and length is None:
        m = _RANGE.fullmatch(range_header.strip())
        if m is None or m.groups() == ("", ""):
            raise InvalidRequest(f"unsupported Range {range_header[:80]!r}; use bytes=a-b")
        first, last = m.groups()
        if first == "":
            start = max(0, size - int(last))
            end = size
        else:
            start = int(first)
            end = size if last == "" else min(size, int(last) + 1)
        partial = True
    else:
        start = number("offset", offset) if offset is not None else 0
        end = size if length is None else start + number("length", length)
    if start > size or (partial and start >= size and size > 0):
        raise OutOfRange(f"offset {start} is past the end of the transcript ({size} bytes)")
    count = max(0, min(end, size, start + MAX_LOG_CHUNK) - start)
    return start, count, partial


def _body(handler: TerminalsAPIHandler) -> dict[str, Any]:
    data = handler.get_json_body() or {}
    if not isinstance(data, dict):
        raise web.HTTPError(400, "expected a JSON object")
    return data


class SessionsHandler(TerminalsAPIHandler):
    """``GET /api/agents/sessions``: every record, any status, oldest first (after a
    reconcile, like ``GET /api/terminals``). ``POST`` ``{kind, cwd?, name?, args?}``:
    start a session (201)."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        try:
            self.manager.reconcile()
            self.manager.refresh_conversations()
        except AgentsError as e:
            raise http_error(e) from e
        self.finish(json.dumps([s.to_model() for s in self.manager.store.list()]))

    @web.authenticated
    @authorized
    def post(self) -> None:
        data = _body(self)
        unknown = set(data) - {"kind", "cwd", "name", "args"}
        try:
            if unknown:
                raise InvalidRequest(f"unknown fields {sorted(unknown)}")
            if not isinstance(data.get("cwd", ""), (str, type(None))):
                raise InvalidRequest("cwd must be a string")
            session, _ = self.manager.create(
                name=data.get("name"),
                cwd=data.get("cwd"),
                kind=data.get("kind", "shell"),
                args=data.get("args"),
                strict=True,
            )
        except AgentsError as e:
            raise http_error(e) from e
        self.set_status(201)
        self.set_header("Location", url_path_join(self.base_url, "api/agents/sessions", session.id))
        self.finish(json.dumps(session.to_model()))


class SessionHandler(TerminalsAPIHandler):
    """``GET /api/agents/sessions/<id>``: one record. ``DELETE``: end its process tree
    (running or orphaned sessions; 204)."""

    SUPPORTED_METHODS = ("GET", "DELETE", "OPTIONS")  # type: ignore[assignment]

    @web.authenticated
    @authorized
    def get(self, session_id: str) -> None:
        try:
            self.finish(json.dumps(self.manager.store.get(session_id).to_model()))
        except AgentsError as e:
            raise http_error(e) from e

    @web.authenticated
    @authorized
    async def delete(self, session_id: str) -> None:
        try:
            await self.manager.terminate_session(session_id)
        except AgentsError as e:
            raise http_error(e) from e
        self.set_status(204)
        self.finish()


class LogHandler(TerminalsAPIHandler):
    """``GET /api/agents/sessions/<id>/log``: raw transcript bytes (:func:`log_window`)."""

    @web.authenticated
    @authorized
    def get(self, session_id: str) -> None:
        try:
            self.manager.store.get(session_id)
            path = self.manager.backend.transcript_path(session_id)
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError as e:
                raise NotFound(f"session {session_id} has no transcript") from e
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start, count, partial = log_window(
                    size,
                    self.get_query_argument("offset", None),
                    self.get_query_argument("length", None),
                    self.request.headers.get("Range"),
                )
                f.seek(start)
                data = f.read(count)
        except AgentsError as e:
            raise http_error(e) from e
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("X-Transcript-Size", str(size))
        self.set_header("Accept-Ranges", "bytes")
        if partial:
            self.set_status(206)
            self.set_header("Content-Range", f"bytes {start}-{start + len(data) - 1}/{size}")
        self.finish(data)


class RestoreHandler(TerminalsAPIHandler):
    """``POST /api/agents/sessions/<id>/restore``: relaunch one ended session; the model
    afterwards (``status`` ``exited`` with a ``reason`` if the resume failed at once)."""

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        try:
            session = self.manager.restore(session_id)
            session = await asyncio.to_thread(self.manager.watch_resumed, session)
        except AgentsError as e:
            raise http_error(e) from e
        self.finish(json.dumps(session.to_model()))


class AdoptHandler(TerminalsAPIHandler):
    """``POST /api/agents/sessions/<id>/adopt``: an orphaned session becomes a running
    terminal (listed in ``/api/terminals``); its model."""

    @web.authenticated
    @authorized
    def post(self, session_id: str) -> None:
        try:
            self.finish(json.dumps(self.manager.adopt(session_id).to_model()))
        except AgentsError as e:
            raise http_error(e) from e


class RestoreAllHandler(TerminalsAPIHandler):
    """``POST /api/agents/restore`` ``{kinds?}``: restore every ``interrupted`` session
    (of ``kinds``). Returns ``{"restored": [model], "failed": [{"id", "error"}]}``."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        kinds = _body(self).get("kinds")
        if kinds is not None and not (
            isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)
        ):
            raise web.HTTPError(400, "kinds must be a list of kind names")
        started, failed = [], []
        for session in self.manager.interrupted(kinds):
            try:
                started.append(self.manager.restore(session.id))
            except AgentsError as e:
                failed.append({"id": session.id, "error": str(e)})
        checked = await asyncio.gather(
            *(asyncio.to_thread(self.manager.watch_resumed, s) for s in started)
        )
        self.finish(json.dumps({"restored": [s.to_model() for s in checked], "failed": failed}))


class KindsHandler(TerminalsAPIHandler):
    """``GET /api/agents/kinds``: the session kinds this server can start."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        self.finish(json.dumps([k.describe() for k in self.manager.kinds.values()]))


class ReconcileHandler(TerminalsAPIHandler):
    """``GET /api/agents/reconcile``: the last report; ``POST``: reconcile now."""

    def _report(self) -> str:
        return json.dumps(
            {
                "time": self.manager.last_reconcile,
                "actions": [dataclasses.asdict(a) for a in self.manager.last_report],
                "boot": {
                    "time": self.manager.boot_reconcile,
                    "actions": [dataclasses.asdict(a) for a in self.manager.boot_report],
                },
            }
        )

    @web.authenticated
    @authorized
    def get(self) -> None:
        self.finish(self._report())

    @web.authenticated
    @authorized
    def post(self) -> None:
        try:
            self.manager.reconcile()
        except AgentsError as e:
            raise http_error(e) from e
        self.finish(self._report())


def agents_handlers(manager: Any) -> list[tuple[str, type, dict[str, Any]]]:
    """The ``/api/agents`` routes, served by ``manager``."""
    kwargs = {"manager": manager}
    return [
        (r"/api/agents/sessions", SessionsHandler, kwargs),
        (r"/api/agents/sessions/(\w+)", SessionHandler, kwargs),
        (r"/api/agents/sessions/(\w+)/log", LogHandler, kwargs),
        (r"/api/agents/sessions/(\w+)/restore", RestoreHandler, kwargs),
        (r"/api/agents/sessions/(\w+)/adopt", AdoptHandler, kwargs),
        (r"/api/agents/restore", RestoreAllHandler, kwargs),
        (r"/api/agents/kinds", KindsHandler, kwargs),
        (r"/api/agents/reconcile", ReconcileHandler, kwargs),
    ]
