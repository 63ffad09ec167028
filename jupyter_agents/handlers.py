"""REST API ``/api/agents/...`` (see rest-api.yml). Thin: parse, authorize, call the
manager, serialise. Authorized like the stock terminals (resource ``terminals``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from .errors import AgentsError, http_error
from .terminals import TerminalsAPIHandler


class SessionsHandler(TerminalsAPIHandler):
    """``GET /api/agents/sessions``: every record, any status, oldest first."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        self.finish(json.dumps([s.to_model() for s in self.manager.store.list()]))


class SessionHandler(TerminalsAPIHandler):
    """``GET /api/agents/sessions/<id>``: one record."""

    @web.authenticated
    @authorized
    def get(self, session_id: str) -> None:
        try:
            self.finish(json.dumps(self.manager.store.get(session_id).to_model()))
        except AgentsError as e:
            raise http_error(e) from e


class ReconcileHandler(TerminalsAPIHandler):
    """``GET /api/agents/reconcile``: the last report; ``POST``: reconcile now."""

    def _report(self) -> str:
        return json.dumps(
            {
                "time": self.manager.last_reconcile,
                "actions": [dataclasses.asdict(a) for a in self.manager.last_report],
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
        (r"/api/agents/reconcile", ReconcileHandler, kwargs),
    ]
