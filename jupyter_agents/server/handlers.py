"""REST handlers: the stock-compatible ``/api/terminals`` and ``/api/agents/...`` (see
rest-api.yml). Thin: parse (every argument, header and body through
:mod:`jupyter_agents.server.params`), authorize (resource ``terminals``, like the stock ones:
``read`` to list, ``write`` to change, and ``execute``, which stock asks for the
websocket, for what shows output: log, export, search), call the service in a worker
thread (:meth:`ApiHandler.call`: nothing blocking runs on the IO loop, and every
:class:`~jupyter_agents.core.errors.AgentsError` becomes its HTTP status with its message,
in that one place), serialise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError, Conflict, InvalidRequest, http_error
from jupyter_agents.notify.notifier import Notifier
from jupyter_agents.notify.tokens import AnswerTokens
from jupyter_agents.server import params
from jupyter_agents.server.acp import MAX_PROMPT, AcpLinks
from jupyter_agents.server.act import ActHandler
from jupyter_agents.server.notifications import (
    NotifyHandler,
    PresenceHandler,
    PushKeyHandler,
    PushSubscriptionHandler,
    PushSubscriptionsHandler,
    ServiceWorkerHandler,
)
from jupyter_agents.server.requests_page import RequestsAsset, RequestsPage
from jupyter_agents.server.streams import Streams
from jupyter_agents.server.terminals import TerminalManager, terminal_model
from jupyter_agents.server.viewer import ViewerAsset, ViewerPage, ViewerSocket
from jupyter_agents.server.websocket import AUTH_RESOURCE, NoSuchTerminal, TermSocket
from jupyter_agents.sessions import export as conversation_export
from jupyter_agents.sessions import turns
from jupyter_agents.sessions.search import search_sessions
from jupyter_agents.sessions.service import Report, SessionService
from jupyter_agents.sharing.auth import is_owner
from jupyter_agents.sharing.shares import Shares
from jupyter_agents.spend.limits import parse_override
from jupyter_agents.terminal.render import FORMATS, export, export_name

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
#: the action that lets a user see a session's output (stock asks it for the websocket)
SEE_OUTPUT = "execute"


def authorized_to_see_output(method: F) -> F:
    """``@authorized`` for :data:`SEE_OUTPUT` on ``terminals``, whatever the HTTP method:
    ``read`` lists sessions, only this shows what they printed."""
    return cast(F, authorized(SEE_OUTPUT)(method))


class ApiHandler(APIHandler):
    """Base of every REST handler here."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, service: SessionService, manager: TerminalManager) -> None:
        self.service = service
        self.manager = manager

    async def prepare(self) -> None:  # type: ignore[override]
        """jupyter_server's own preparation, then start what the server runs in the
        background if nothing has yet
        (:meth:`~jupyter_agents.server.app.AgentsApp.ensure_started`)."""
        await super().prepare()
        start = self.settings.get("jupyter_agents_start")
        if start is not None:
            await start()

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker thread; an AgentsError becomes its
        HTTP error (4xx with the message, never a traceback)."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except AgentsError as e:
            raise http_error(e) from e

    def body(self, allowed: set[str] | None) -> dict[str, Any]:
        """The JSON object body (empty if none; :func:`~jupyter_agents.server.params.json_object`);
        400 for anything else or a field not in ``allowed`` (None: any field)."""
        try:
            return params.json_object(self.request.body, allowed)
        except AgentsError as e:
            raise http_error(e) from e

    def parsed(self, parse: Callable[..., T], *args: Any) -> T:
        """``parse(*args)`` (a :mod:`~jupyter_agents.server.params` helper); its
        :class:`~jupyter_agents.core.errors.InvalidRequest` becomes a 400."""
        try:
            return parse(*args)
        except AgentsError as e:
            raise http_error(e) from e

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))


class TerminalRootHandler(ApiHandler):
    """``/api/terminals``: list (GET) and create (POST ``{name?, cwd?}``)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply(await self.call(self.manager.list))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        data = self.body(None)  # stock ignores fields it does not know
        self.parsed(params.fields, data, {"cwd": str})
        self.reply(await self.call(self.manager.create, name=data.get("name"), cwd=data.get("cwd")))


class TerminalHandler(ApiHandler):
    """``/api/terminals/<name>``: GET and DELETE (ends the process tree, 204)."""

    SUPPORTED_METHODS = ("GET", "DELETE", "OPTIONS")  # type: ignore[assignment]

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        self.reply(terminal_model(await self.call(self.service.terminal, name)))

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        session = await self.call(self.service.terminal, name)
        await self.call(self.service.terminate, session.id)
        self.set_status(204)
        self.finish()


class SessionsHandler(ApiHandler):
    """``GET /api/agents/sessions``: every record, any status, oldest first, as the
    store holds it (it writes nothing). ``POST`` ``{kind, cwd?, name?, args?,
    worktree?, mode?}``: start a session (201); ``worktree`` true (or a branch name): in
    a new git worktree of ``cwd``'s repository (409 saying why when it cannot be made);
    ``mode`` ``acp``: the kind's ACP agent behind a proxy (400 for a kind without)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        sessions = await self.call(self.service.list)
        self.reply(await self.call(self.service.models.many, sessions))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        data = self.body({"kind", "cwd", "name", "args", "worktree", "mode"})
        self.parsed(params.fields, data, {"cwd": str, "worktree": (bool, str), "mode": str})
        session, _ = await self.call(
            self.service.create,
            name=data.get("name"),
            cwd=data.get("cwd"),
            kind=data.get("kind", "shell"),
            args=data.get("args"),
            strict=True,
            worktree=data.get("worktree"),
            mode=data.get("mode") or "terminal",
        )
        self.set_header("Location", url_path_join(self.base_url, "api/agents/sessions", session.id))
        self.reply(session.to_model(), 201)


class SessionHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>``: one record, with its usage and what its
    transcript keeps. ``PATCH`` ``{title?, unattended_limit?}``: a person's title (null
    clears it; 400 for control characters or more than 256), the session's own
    unattended limit (null: the configured one; 400 for a bad one). ``DELETE``: end its
    process tree (running or orphaned; 204)."""

    SUPPORTED_METHODS = ("GET", "PATCH", "DELETE", "OPTIONS")  # type: ignore[assignment]

    @web.authenticated
    @authorized
    async def get(self, session_id: str) -> None:
        self.reply(await self.call(self.service.models.one, session_id))

    @web.authenticated
    @authorized
    async def patch(self, session_id: str) -> None:
        data = self.body({"title", "unattended_limit"})
        if not data:
            raise http_error(
                InvalidRequest(
                    "nothing to change: give title (null clears it) or unattended_limit "
                    "(null: the configured one)"
                )
            )
        limit = data.get("unattended_limit")
        self.parsed(parse_override, limit)  # a bad limit changes nothing
        if "title" in data:
            await self.call(self.service.rename, session_id, data["title"])
        if "unattended_limit" in data:
            await self.call(self.service.models.set_unattended_limit, session_id, limit)
        self.reply(await self.call(self.service.models.one, session_id))

    @web.authenticated
    @authorized
    async def delete(self, session_id: str) -> None:
        await self.call(self.service.terminate, session_id)
        self.set_status(204)
        self.finish()


class LogHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>/log``: raw transcript bytes
    (:func:`~jupyter_agents.server.params.wanted`: ``?offset=&length=`` or ``Range``;
    logical offsets, from the first kept byte). Output: ``execute``."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self, session_id: str) -> None:
        transcript = await self.call(self.service.transcript, session_id)
        want = self.parsed(
            params.wanted,
            self.get_query_argument("offset", None),
            self.get_query_argument("length", None),
            self.request.headers.get("Range"),
        )
        data, start, size = await self.call(transcript.read_window, want)
        partial = want.partial
        self.set_header("X-Transcript-Size", str(size))
        self.set_header("Accept-Ranges", "bytes")
        if partial and data:  # (a Range of an empty transcript is all of it: 200)
            self.set_status(206)
            self.set_header("Content-Range", f"bytes {start}-{start + len(data) - 1}/{size}")
        # APIHandler.finish sets application/json unless told otherwise
        self.finish(data, set_content_type="application/octet-stream")


class ExportHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>/export?format=txt|html|cast``: the transcript as
    a file (:func:`~jupyter_agents.terminal.render.export`), streamed a read at a time. Output:
    ``execute``."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self, session_id: str) -> None:
        fmt = self.parsed(
            params.choice, "format", self.get_query_argument("format", "txt"), FORMATS
        )
        session = await self.call(self.service.get, session_id)
        transcript = await self.call(self.service.transcript, session_id)
        chunks = await self.call(export, session, transcript, fmt)
        self.set_header(
            "Content-Disposition", params.content_disposition(export_name(session, fmt))
        )
        # the HTML export is inert: no script, no resource from anywhere
        self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.set_header("Content-Type", FORMATS[fmt][0])
        while (chunk := await self.call(next, chunks, None)) is not None:
            self.write(chunk)
            await self.flush()
        self.finish(set_content_type=FORMATS[fmt][0])  # (an empty export has sent nothing yet)


class SearchHandler(ApiHandler):
    """``GET /api/agents/search?q=...``: one page of hits across sessions
    (:mod:`jupyter_agents.sessions.search`; arguments in rest-api.yml). Output: ``execute``."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self) -> None:
        names = ("q", "regex", "case", "session", "kind", "status", "since", "limit", "cursor")
        args = {n: self.get_query_argument(n, None) for n in names}
        query = await self.call(params.search_query, args, list(self.service.kinds))
        self.reply((await self.call(search_sessions, self.service, query)).to_model())


class ConversationHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>/conversation?format=md|jsonl``: an agent's
    conversations as Markdown or as their raw records, from the CLI's files or the
    archive (:mod:`jupyter_agents.sessions.export`), streamed. Output: ``execute``."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self, session_id: str) -> None:
        formats = conversation_export.FORMATS
        fmt = self.parsed(params.choice, "format", self.get_query_argument("format", "md"), formats)
        session, chunks = await self.call(
            conversation_export.open_export, self.service, session_id, fmt
        )
        name = conversation_export.export_name(session, fmt)
        self.set_header("Content-Disposition", params.content_disposition(name, "inline"))
        self.set_header("Content-Security-Policy", "default-src 'none'")
        self.set_header("Content-Type", formats[fmt][0])
        while (chunk := await self.call(next, chunks, None)) is not None:
            self.write(chunk)
            await self.flush()
        self.finish(set_content_type=formats[fmt][0])


class TurnsHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>/turns?after=&limit=``: a page of an agent's turns
    as events (:mod:`jupyter_agents.sessions.turns`): ``{events, next, more}``, from the
    position ``after`` (an event's id or a page's ``next``; none: the start).
    Output: ``execute``."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self, session_id: str) -> None:
        after = self.get_query_argument("after", None)
        position = self.parsed(turns.parse_position, after) if after else turns.START
        limit = self.parsed(
            params.optional_integer,
            "limit",
            self.get_query_argument("limit", None),
            turns.DEFAULT_EVENTS,
            1,
            turns.MAX_EVENTS,
        )
        page = await self.call(turns.session_turns, self.service, session_id, position, limit)
        self.reply(page.to_model())


class SharesApiHandler(ApiHandler):
    """Base of the share routes: the owner only (a viewer never gets here with our
    identity provider; this is the second lock)."""

    def initialize(  # type: ignore[override]
        self, service: SessionService, manager: TerminalManager, shares: Shares
    ) -> None:
        super().initialize(service, manager)
        self.shares = shares

    def owner(self) -> str:
        if not is_owner(self.current_user):
            raise web.HTTPError(403, "only the server's owner manages its shares")
        return str(self.current_user.username)


class SharesHandler(SharesApiHandler):
    """``GET /api/agents/shares``: the live grants; ``POST`` ``{session, viewer?,
    expires_in}``: a new one (201; on JupyterHub with ``accept_url`` or ``hub_error``,
    :meth:`~jupyter_agents.sharing.shares.Shares.invite`), 409 when this server cannot share."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.owner()
        self.reply(await self.call(self.shares.list))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        owner = self.owner()
        data = self.body({"session", "viewer", "expires_in"})
        share = await self.call(self.shares.create, data, owner)
        self.shares.schedule(share)
        url = url_path_join(self.base_url, "agents/view", share.id)
        # on JupyterHub: a hub share code whose accept link lands on the watch page
        hub = await asyncio.to_thread(self.shares.invite, share, url)
        model = {**share.to_model(), "url": url, **hub}
        self.set_header("Location", url_path_join(self.base_url, "api/agents/shares", share.id))
        self.reply(model, 201)


class SharingHandler(SharesApiHandler):
    """``GET /api/agents/sharing``: whether this server can share sessions read-only,
    ``{"available": bool, "reason": str | None}`` (the words a grant's 409 would give),
    so that clients offer Share only where it works. Owner only."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.owner()
        reason = self.shares.refused()
        self.reply({"available": reason is None, "reason": reason})


class ShareHandler(SharesApiHandler):
    """``DELETE /api/agents/shares/<id>``: revoke; its viewers are disconnected now."""

    @web.authenticated
    @authorized
    async def delete(self, share_id: str) -> None:
        close_viewers = await self.call(self.shares.revoke, share_id, self.owner())
        close_viewers()
        self.set_status(204)
        self.finish()


class RestoreHandler(ApiHandler):
    """``POST /api/agents/sessions/<id>/restore``: relaunch one ended session; the model
    after the resume check (``exited`` with a ``reason`` if it failed at once)."""

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        session = await self.call(self.service.restorer.restore_checked, session_id)
        self.reply(session.to_model())


class FreshHandler(ApiHandler):
    """``POST /api/agents/sessions/<id>/fresh``: a new session of an ended session's kind
    in its folder, showing the end of its transcript first (e.g. when its conversation
    cannot be resumed); 201 with the new model. The old record stays."""

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        session = await self.call(self.service.start_fresh, session_id)
        self.set_header("Location", url_path_join(self.base_url, "api/agents/sessions", session.id))
        self.reply(session.to_model(), 201)


class WorktreeHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>/worktree``: what a worktree session did: its
    branch, base, commits ``ahead`` and ``behind``, and every changed file (``status``
    git's letter, ``committed`` false for a change not committed yet). ``POST``
    ``{action: "merge" | "discard", confirm?}``: finish it (worktree and branch removed;
    the session's model after); 409 saying why while it runs or has uncommitted
    changes (unless ``confirm``), or when the merge would conflict (which files)."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self, session_id: str) -> None:
        review = await self.call(self.service.review.changes, session_id)
        self.reply(review.to_model())

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        data = self.body({"action", "confirm"})
        self.parsed(params.fields, data, {"action": str, "confirm": bool})
        session = await self.call(
            self.service.review.finish,
            session_id,
            data.get("action"),
            bool(data.get("confirm")),
        )
        self.reply(session.to_model())


class WorktreeFileHandler(ApiHandler):
    """``GET /api/agents/sessions/<id>/worktree/file?path=P``: one file the review lists,
    before (where the branch left its base) and now (in the worktree), by ``kind``:
    ``notebook`` (nbdime's ``{base, diff}``), ``text``, ``image`` (base64), ``binary`` or
    ``large`` (sizes only); 404 for a path the review does not list."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self, session_id: str) -> None:
        path = self.get_query_argument("path", "", strip=False)
        if not path:
            raise http_error(InvalidRequest("say which file: ?path=<a path the review lists>"))
        self.reply(await self.call(self.service.review.file, session_id, path))


class AdoptHandler(ApiHandler):
    """``POST /api/agents/sessions/<id>/adopt``: an orphaned session becomes a running
    terminal (listed in ``/api/terminals``); its model."""

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        self.reply((await self.call(self.service.adopt, session_id)).to_model())


class RestoreAllHandler(ApiHandler):
    """``POST /api/agents/restore`` ``{kinds?}``: restore every ``interrupted`` session
    (of ``kinds``). Returns ``{"restored": [model], "failed": [{"id", "error"}]}``."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        kinds = self.body({"kinds"}).get("kinds")
        if kinds is not None and not (
            isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)
        ):
            raise web.HTTPError(400, "kinds must be a list of kind names")
        ids = [s.id for s in await self.call(self.service.interrupted, kinds)]
        result = await self.call(self.service.restorer.restore_many, ids)
        self.reply(
            {
                "restored": [s.to_model() for s in result.restored],
                "failed": [{"id": sid, "error": error} for sid, error in result.failed],
            }
        )


class KindsHandler(ApiHandler):
    """``GET /api/agents/kinds``: the session kinds this server knows, each with whether
    its program is installed (``available``; if not, ``unavailable`` says what was
    looked for and how to install it)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply(await self.call(self.service.models.kinds))


def _report(report: Report) -> dict[str, Any]:
    return {"time": report.time, "actions": [dataclasses.asdict(a) for a in report.actions]}


class ReconcileHandler(ApiHandler):
    """``GET /api/agents/reconcile``: the last report (and the one at start);
    ``POST``: reconcile now."""

    def _reply(self) -> None:
        self.reply(
            {
                **_report(self.service.last_report),
                "boot": _report(self.service.boot_report),
                "restored_on_open": self.manager.restored_on_open,
            }
        )

    @web.authenticated
    @authorized
    def get(self) -> None:
        self._reply()

    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self.call(self.service.reconcile)
        self._reply()


class RequestsHandler(ApiHandler):
    """``GET /api/agents/requests``: the pending permission requests of running agent
    sessions (``?session=<id>`` for one), oldest first. What a request shows is output,
    so reading it needs what seeing output does."""

    @web.authenticated
    @authorized_to_see_output
    async def get(self) -> None:
        session = self.get_query_argument("session", None)
        ids = None if session is None else [session]
        self.reply(await self.call(self.service.permissions.pending, ids))


class RequestHandler(ApiHandler):
    """``GET /api/agents/requests/<id>``: one pending request (404 once it ended).
    ``POST`` ``{decision: "allow"|"deny", message?, suggestion?}``: answer it, once
    (400 malformed, 404 unknown or ended, 409 answered already). Answering is typing
    into the session: it needs ``execute``, as the terminal's websocket does."""

    SUPPORTED_METHODS = ("GET", "POST", "OPTIONS")  # type: ignore[assignment]

    @web.authenticated
    @authorized_to_see_output
    async def get(self, request_id: str) -> None:
        self.reply(await self.call(self.service.permissions.pending_one, request_id))

    @web.authenticated
    @authorized_to_see_output
    async def post(self, request_id: str) -> None:
        body = self.body({"decision", "message", "suggestion"})
        user = self.current_user
        by = getattr(user, "username", None) if user is not None else None
        self.reply(await self.call(self.service.permissions.answer, request_id, body, by))


class RequestTokensHandler(ApiHandler):
    """``POST /api/agents/requests/<id>/tokens``: new answer links for a pending request
    (:mod:`jupyter_agents.notify.tokens`), one per choice: 201 ``{request, tokens,
    urls}``, ``tokens`` and ``urls`` by choice (``allow``, ``deny``, ``suggestion-<i>``);
    404 once it ended. Whoever may answer it may make them: ``execute``."""

    def initialize(  # type: ignore[override]
        self, service: SessionService, manager: TerminalManager, tokens: AnswerTokens
    ) -> None:
        super().initialize(service, manager)
        self.tokens = tokens

    @web.authenticated
    @authorized_to_see_output
    async def post(self, request_id: str) -> None:
        self.body(set())
        request = await self.call(self.service.permissions.pending_one, request_id)
        labels = [s["label"] for s in request["suggestions"]]
        until = clock.epoch(request["until"])
        tokens = self.tokens.mint(request_id, until, labels)
        act = url_path_join(self.base_url, "agents/act")
        urls = {key: f"{act}/{token}" for key, token in tokens.items()}
        self.reply({"request": request, "tokens": tokens, "urls": urls}, 201)


class PromptHandler(ApiHandler):
    """``POST /api/agents/sessions/<id>/prompt`` ``{text}``: send an ACP session's agent
    a prompt (:mod:`jupyter_agents.server.acp`): 202 ``{prompt}``, its JSON-RPC id;
    409 for a terminal session, one not running or not ready; 400 for no text or too
    much (:data:`~jupyter_agents.server.acp.MAX_PROMPT`)."""

    def initialize(  # type: ignore[override]
        self, service: SessionService, manager: TerminalManager, links: AcpLinks
    ) -> None:
        super().initialize(service, manager)
        self.links = links

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        data = self.body({"text"})
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise http_error(InvalidRequest("text must be a non-empty string"))
        if len(text.encode()) > MAX_PROMPT:
            raise http_error(InvalidRequest(f"text is over {MAX_PROMPT} bytes"))
        session = await self.call(self.service.get, session_id)
        try:
            prompt = await self.links.send(
                session, "session/prompt", {"prompt": [{"type": "text", "text": text}]}, True
            )
        except Conflict as e:
            raise http_error(e) from e
        self.reply({"prompt": prompt}, 202)


class CancelHandler(ApiHandler):
    """``POST /api/agents/sessions/<id>/cancel``: cancel an ACP session's turn (204);
    409 as for a prompt."""

    def initialize(  # type: ignore[override]
        self, service: SessionService, manager: TerminalManager, links: AcpLinks
    ) -> None:
        super().initialize(service, manager)
        self.links = links

    @web.authenticated
    @authorized
    async def post(self, session_id: str) -> None:
        self.body(set())
        session = await self.call(self.service.get, session_id)
        try:
            await self.links.send(session, "session/cancel", {}, False)
        except Conflict as e:
            raise http_error(e) from e
        self.set_status(204)
        self.finish()


def handlers(
    service: SessionService,
    manager: TerminalManager,
    streams: Streams,
    shares: Shares,
    tokens: AnswerTokens | None = None,
    notifier: Notifier | None = None,
) -> list[tuple[str, type, dict[str, Any]]]:
    """Every route of jupyter_agents: the stock terminal routes, ``/api/agents``, the
    read-only viewer's (:mod:`jupyter_agents.server.viewer`), the answer links'
    (:mod:`jupyter_agents.server.act`) and notifications'
    (:mod:`jupyter_agents.server.notifications`)."""
    rest = {"service": service, "manager": manager}
    acp = {**rest, "links": AcpLinks(service)}
    push = None if notifier is None else notifier.channel("webpush")
    notify = {"notifier": notifier, "push": push}
    viewer = {"service": service, "shares": shares}
    return [
        (r"/api/terminals", TerminalRootHandler, rest),
        (r"/api/terminals/(\w+)", TerminalHandler, rest),
        (r"/terminals/websocket/(\w+)", TermSocket, {"service": service, "streams": streams}),
        (r"/terminals/websocket/(.*)", NoSuchTerminal, {}),
        (r"/api/agents/sessions", SessionsHandler, rest),
        (r"/api/agents/sessions/(\w+)", SessionHandler, rest),
        (r"/api/agents/sessions/(\w+)/log", LogHandler, rest),
        (r"/api/agents/sessions/(\w+)/export", ExportHandler, rest),
        (r"/api/agents/sessions/(\w+)/conversation", ConversationHandler, rest),
        (r"/api/agents/sessions/(\w+)/turns", TurnsHandler, rest),
        (r"/api/agents/sessions/(\w+)/prompt", PromptHandler, acp),
        (r"/api/agents/sessions/(\w+)/cancel", CancelHandler, acp),
        (r"/api/agents/search", SearchHandler, rest),
        (r"/api/agents/sessions/(\w+)/restore", RestoreHandler, rest),
        (r"/api/agents/sessions/(\w+)/adopt", AdoptHandler, rest),
        (r"/api/agents/sessions/(\w+)/fresh", FreshHandler, rest),
        (r"/api/agents/sessions/(\w+)/worktree", WorktreeHandler, rest),
        (r"/api/agents/sessions/(\w+)/worktree/file", WorktreeFileHandler, rest),
        (r"/api/agents/restore", RestoreAllHandler, rest),
        (r"/api/agents/requests", RequestsHandler, rest),
        (r"/api/agents/requests/(\w+)", RequestHandler, rest),
        (r"/api/agents/requests/(\w+)/tokens", RequestTokensHandler, {**rest, "tokens": tokens}),
        (r"/api/agents/kinds", KindsHandler, rest),
        (r"/api/agents/notify", NotifyHandler, notify),
        (r"/api/agents/presence", PresenceHandler, notify),
        (r"/api/agents/push/key", PushKeyHandler, notify),
        (r"/api/agents/push/subscriptions", PushSubscriptionsHandler, notify),
        (r"/api/agents/push/subscriptions/(\w+)", PushSubscriptionHandler, notify),
        (r"/api/agents/reconcile", ReconcileHandler, rest),
        (r"/api/agents/sharing", SharingHandler, {**rest, "shares": shares}),
        (r"/api/agents/shares", SharesHandler, {**rest, "shares": shares}),
        (r"/api/agents/shares/(\w+)", ShareHandler, {**rest, "shares": shares}),
        (r"/agents/requests", RequestsPage, {}),
        (r"/agents/requests/static/([\w.]+)", RequestsAsset, {}),
        (r"/agents/act/([\w-]+)", ActHandler, {"tokens": tokens}),
        (r"/agents/sw\.js", ServiceWorkerHandler, {}),
        (r"/agents/view/static/([\w.]+)", ViewerAsset, viewer),
        (r"/agents/view/(\w+)", ViewerPage, viewer),
        (r"/agents/view/(\w+)/socket", ViewerSocket, {**viewer, "streams": streams}),
    ]
