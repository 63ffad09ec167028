"""The pending-requests page, ``/agents/requests``: what each agent asks to run and its
answers, on one column that a phone shows at 360 px (on JupyterHub, behind the hub's
own login, as every page of the user's server).

The page is static HTML with its script and style (``requests_static/``) under a CSP
that allows this origin only; the script reads ``GET /api/agents/requests``, answers
with ``POST /api/agents/requests/<id>`` (the REST routes and their checks), and fetches
again whenever the session events say a session's requests changed. Both routes ask
for ``execute`` on ``terminals``, as answering (typing into a session) does.
"""

from __future__ import annotations

import html
from pathlib import Path

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from tornado import web

from jupyter_agents.server.websocket import AUTH_RESOURCE

STATIC = Path(__file__).parents[1] / "requests_static"
ASSETS = {"requests.js": "application/javascript", "requests.css": "text/css"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


class RequestsRoute(JupyterHandler):
    """Authenticated, ``execute`` on ``terminals``."""

    auth_resource = AUTH_RESOURCE

    @property
    def content_security_policy(self) -> str:
        return CSP


class RequestsPage(RequestsRoute):
    """``GET /agents/requests``: the page."""

    @web.authenticated
    @authorized("execute")  # type: ignore[untyped-decorator]
    async def get(self) -> None:
        self.xsrf_token  # noqa: B018 - sets the cookie the page's script sends back
        base = html.escape(self.base_url, quote=True)
        static = html.escape(self.base_url + "agents/requests/static/", quote=True)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<title>Agent requests</title>"
            f"<link rel='stylesheet' href='{static}requests.css'></head>"
            f"<body data-base-url='{base}'><main><h1>Agent requests</h1>"
            "<div id='state' class='state' role='status' aria-live='polite'"
            " tabindex='-1'></div>"
            "<ul id='requests' aria-label='Pending permission requests'></ul></main>"
            f"<script src='{static}requests.js'></script></body></html>"
        )


class RequestsAsset(RequestsRoute):
    """``GET /agents/requests/static/<file>``: the page's script and style."""

    @web.authenticated
    @authorized("execute")  # type: ignore[untyped-decorator]
    async def get(self, name: str) -> None:
        if name not in ASSETS:
            raise web.HTTPError(404)
        self.set_header("Content-Type", ASSETS[name])
        self.set_header("Cache-Control", "no-cache")
        self.finish((STATIC / name).read_bytes())
