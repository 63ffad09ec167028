"""The answer links: ``{base_url}agents/act/<token>`` (:mod:`jupyter_agents.notify.tokens`).

No Jupyter credential is asked or read (a service worker and the ntfy app have none to
send; the token is the credential), so these handlers are plain tornado handlers that
skip the XSRF check, and do one thing each:

- ``GET``: a confirmation page (the choice, the tool, the command cut to a few lines,
  the session's name) whose one button posts to the same URL; it changes nothing, so a
  link previewer or prefetcher answers nothing. An unknown, used or ended token gets
  its status (404, 409, 410) with a sentence.
- ``POST``: answer with the token's choice. 200 with ``{decision, choice, request,
  session, tool, message}`` (JSON), or a short page when the caller accepts HTML (the
  page's form); 404, 409, 410 as :meth:`~jupyter_agents.notify.tokens.AnswerTokens.act`
  says, with ``{message}``.

The page has no script, loads nothing, and cannot be framed; responses are never cached.
"""

from __future__ import annotations

import asyncio
import html
import json

from tornado import web

from jupyter_agents.core.errors import AgentsError
from jupyter_agents.notify.notice import one_line
from jupyter_agents.notify.tokens import AnswerTokens

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
STYLE = (
    "body{font:16px/1.4 system-ui,sans-serif;margin:1rem;max-width:36rem}"
    "pre{white-space:pre-wrap;word-break:break-all;background:#f3f3f3;padding:.5rem}"
    "button{font-size:1.1rem;padding:.6rem 1.4rem}"
)
#: lines of the command the page shows
PAGE_LINES = 12


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='referrer' content='no-referrer'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


class ActHandler(web.RequestHandler):
    """``/agents/act/<token>``: GET the confirmation page, POST the answer."""

    SUPPORTED_METHODS = ("GET", "POST")  # type: ignore[assignment]

    def initialize(self, tokens: AnswerTokens | None) -> None:
        self.tokens = tokens

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("Cache-Control", "no-store")
        self.set_header("Referrer-Policy", "no-referrer")
        self.set_header("X-Content-Type-Options", "nosniff")

    def check_xsrf_cookie(self) -> None:
        """None: the token in the path is the only credential (module docstring)."""

    def _wants_html(self) -> bool:
        return "text/html" in self.request.headers.get("Accept", "")

    def _refuse(self, error: AgentsError, as_html: bool) -> None:
        self.set_status(error.status)
        if as_html:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(page("Agent request", f"<p>{html.escape(str(error))}</p>"))
        else:
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"message": str(error)}))

    async def get(self, token: str) -> None:
        if self.tokens is None:
            raise web.HTTPError(404)
        try:
            choice, request = await asyncio.to_thread(self.tokens.describe, token)
        except AgentsError as e:
            self._refuse(e, True)
            return
        command = request.get("command") or json.dumps(request.get("input") or {}, indent=1)
        lines = str(command).splitlines()
        shown = "\n".join(lines[:PAGE_LINES]) + ("\n[...]" if len(lines) > PAGE_LINES else "")
        verb = "Allow" if choice.decision == "allow" else "Deny"
        name = html.escape(str(request.get("name")))
        body = (
            f"<h1>{html.escape(choice.label)}?</h1>"
            f"<p>{html.escape(str(request.get('kind')))} session <b>{name}</b>"
            f" asks to run <b>{html.escape(str(request.get('tool')))}</b>:</p>"
            f"<pre>{html.escape(shown)}</pre>"
            f"<form method='post'><button type='submit'>{verb}</button></form>"
        )
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(page(f"{verb} {request.get('tool')}?", body))

    async def post(self, token: str) -> None:
        as_html = self._wants_html()
        if self.tokens is None:
            raise web.HTTPError(404)
        try:
            done = await asyncio.to_thread(self.tokens.act, token)
        except AgentsError as e:
            self._refuse(e, as_html)
            return
        request = done["request"]
        words = "Allowed" if done["decision"] == "allow" else "Denied"
        message = f"{words}: {request['tool']} in {request['name']}"
        if as_html:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            command = one_line(request.get("command") or "")
            body = f"<h1>{html.escape(message)}</h1><pre>{html.escape(command)}</pre>"
            self.finish(page(words, body))
            return
        self.set_header("Content-Type", "application/json")
        self.finish(
            json.dumps(
                {
                    "decision": done["decision"],
                    "choice": done["choice"],
                    "request": request["id"],
                    "session": request["name"],
                    "tool": request["tool"],
                    "message": message,
                }
            )
        )
