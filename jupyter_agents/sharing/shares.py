"""Read-only shares of sessions: grants the owner makes (stored, so they survive
restarts), their expiry and revocation, the viewers watching through each, the
JupyterHub access that comes with a grant, and the audit log.

A grant lets one user (or, without ``viewer``, any user the hub lets reach this server)
watch one running session until it expires (at most :data:`MAX_EXPIRES_IN`) or is
revoked. The store is the truth, shared by every process on the state dir (servers,
the CLI): a viewer socket is checked against the stored grant after it is registered,
and every :data:`REVALIDATE_S` seconds each server re-reads the grants its viewers
watch through (so a revoke or an expiry seen by any process ends the watch within one
interval; a revoke or an expiry in this process ends it at once) and asks the hub about
each viewer's token again (so a share revoked on the hub ends the watch too).

On JupyterHub a grant comes with a hub share code made with the server's own token (the
hub share it turns into never expires). When a grant ends, the hub share of each user
admitted through it (its named viewer, and anyone the hub let reach its viewer routes)
is revoked unless another live grant still covers that user, and its share code is
deleted: by whichever process on the state dir sees the end first (:meth:`Shares.end_hub_access`).
With :class:`~jupyter_agents.auth.ViewerAuthorizer` a hub share gives nothing but the
viewer routes, so revoking one takes nothing else away.

Audit lines (logger ``<server log>.audit``) say who did what, never codes, tokens or
terminal content.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from jupyter_agents.core import clock
from jupyter_agents.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from jupyter_agents.core.records import Admission, Share, utcnow_iso
from jupyter_agents.sessions.service import SessionService

#: the longest a grant may last (seconds)
MAX_EXPIRES_IN = 8 * 3600
#: seconds between re-validations of each viewer (its grant in the store, its token
#: with the hub) and the clean-up of ended grants' hub access
REVALIDATE_S = 60.0
#: seconds a request to the hub may take
HUB_TIMEOUT = 10


def check_grant(data: Mapping[str, Any]) -> tuple[str, str | None, int]:
    """``(session id, viewer or None, expires_in)`` from a grant request; 400 for
    anything else.

    >>> check_grant({"session": "a1", "expires_in": 3600})
    ('a1', None, 3600)
    >>> check_grant({"session": "a1", "viewer": "bob"})
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: expires_in is required: whole seconds, 1 to 28800
    """
    unknown = set(data) - {"session", "viewer", "expires_in"}
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}")
    session, viewer, expires = data.get("session"), data.get("viewer"), data.get("expires_in")
    if not isinstance(session, str) or not session:
        raise InvalidRequest("session (a session id) is required")
    if viewer is not None and (not isinstance(viewer, str) or not 0 < len(viewer) <= 255):
        raise InvalidRequest("viewer must be a user name")
    if type(expires) is not int or not 0 < expires <= MAX_EXPIRES_IN:
        raise InvalidRequest(f"expires_in is required: whole seconds, 1 to {MAX_EXPIRES_IN}")
    return session, viewer, expires


def grants(share: Share, user: str, now: str) -> bool:
    """Whether ``share`` lets ``user`` watch at ``now``.

    >>> s = Share("x", "a1", "bob", "2026-12-01T00:00:00Z", "2026-12-01T01:00:00Z")
    >>> grants(s, "bob", "2026-12-01T00:30:00Z"), grants(s, "carol", "2026-12-01T00:30:00Z")
    (True, False)
    >>> grants(s, "bob", "2026-12-01T01:00:00Z")
    False
    """
    return share.active(now) and (share.viewer is None or share.viewer == user)


def ended(share: Share | None) -> str:
    """How a grant that no longer grants ended: ``revoked`` (or gone), ``expired``."""
    return "expired" if share is not None and share.revoked is None else "revoked"


@dataclasses.dataclass(frozen=True)
class HubCleanup:
    """What ending grants' hub access takes (:func:`hub_cleanup`): per user, the ended
    grants they were admitted through (their hub share to revoke), and the hub share
    codes of ended grants to delete, ``(grant id, code id)``."""

    users: dict[str, list[str]]
    codes: list[tuple[str, str]]


def hub_cleanup(
    shares: Iterable[Share], admissions: Iterable[Admission], now: str, owner: str
) -> HubCleanup:
    """Which hub access to end at ``now``: each user admitted through a grant that has
    ended, unless a live grant still covers them (one naming them, or one for anyone),
    and never the owner; the share code of each ended grant.

    >>> live = Share("a", "s1", "bob", "2026-12-01T00:00:00Z", "2026-12-01T02:00:00Z")
    >>> gone = Share("b", "s1", None, "2026-12-01T00:00:00Z", "2026-12-01T01:00:00Z",
    ...              hub_code="sc_7")
    >>> seen = [Admission("a", "bob", "x"), Admission("b", "bob", "x"),
    ...         Admission("b", "carol", "x")]
    >>> hub_cleanup([live, gone], seen, "2026-12-01T01:30:00Z", "alice")
    HubCleanup(users={'carol': ['b']}, codes=[('b', 'sc_7')])
    >>> hub_cleanup([live, gone], seen, "2026-12-01T02:30:00Z", "alice").users
    {'bob': ['a', 'b'], 'carol': ['b']}
    """
    by_id = {share.id: share for share in shares}
    live = [share for share in by_id.values() if share.active(now)]
    users: dict[str, list[str]] = {}
    for admission in admissions:
        share = by_id.get(admission.share_id)
        if share is not None and share.active(now):
            continue
        if admission.user == owner or any(grants(s, admission.user, now) for s in live):
            continue
        users.setdefault(admission.user, []).append(admission.share_id)
    codes = [(s.id, s.hub_code) for s in by_id.values() if s.hub_code and not s.active(now)]
    return HubCleanup(users, codes)


@dataclasses.dataclass(frozen=True)
class Hub:
    """This server on JupyterHub, as jupyterhub-singleuser's environment describes it:
    the hub's API URL, the server's own token, its owner and its name."""

    api: str
    token: str
    owner: str
    server: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Hub | None:
        """The hub this server runs under; None off JupyterHub."""
        api, token = environ.get("JUPYTERHUB_API_URL"), environ.get("JUPYTERHUB_API_TOKEN")
        owner = environ.get("JUPYTERHUB_USER")
        if not (api and token and owner):
            return None
        return cls(api.rstrip("/"), token, owner, environ.get("JUPYTERHUB_SERVER_NAME", ""))

    def path(self, collection: str) -> str:
        """``/<collection>/<owner>/<server>`` of the hub's API (``shares``, ``share-codes``)."""
        quote = urllib.parse.quote
        return f"/{collection}/{quote(self.owner, safe='')}/{quote(self.server, safe='')}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request to the hub's API with the server's token: ``(status, JSON reply
        or None)``; an HTTP error status is returned, not raised. Blocking; raises
        :class:`OSError` when the hub cannot be reached and :class:`ValueError` for an
        API URL that is not http(s) or a reply that is not JSON."""
        url = self.api + path
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"JUPYTERHUB_API_URL is not an http(s) URL: {self.api[:80]!r}")
        request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=HUB_TIMEOUT) as response:  # noqa: S310
                raw = response.read()
                return int(response.status), json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            e.close()
            return int(e.code), None

    def revoke_share(self, user: str) -> bool:
        """End ``user``'s hub share of this server (``PATCH /shares/<owner>/<server>``
        ``{"user": ...}``, which needs ``shares!server``); whether it is gone (also when
        there was none). Blocking; :class:`OSError` when the hub cannot be reached."""
        status, _ = self.call("PATCH", self.path("shares"), {"user": user})
        return status == 200

    def delete_code(self, code_id: str) -> bool:
        """Delete one share code of this server by its id (``sc_<n>``); whether it is
        gone (also when it had expired). Blocking, as :meth:`revoke_share`."""
        query = urllib.parse.urlencode({"id": code_id})
        status, _ = self.call("DELETE", f"{self.path('share-codes')}?{query}")
        return status in (204, 404)


@dataclasses.dataclass(frozen=True)
class Invitation:
    """The hub's answer to a grant's share code: its accept link (the hub's accept page,
    then the watch page) and the code's id, or why there is none."""

    accept_url: str | None = None
    code_id: str | None = None
    error: str | None = None

    def to_model(self) -> dict[str, str]:
        """``{"accept_url": ...}``, ``{"hub_error": ...}`` or ``{}`` (off JupyterHub)."""
        if self.accept_url:
            return {"accept_url": self.accept_url}
        return {"hub_error": self.error} if self.error else {}


def hub_share_code(hub: Hub, expires_in: int, next_path: str) -> Invitation:
    """A share code of this server, made with the server's own token, expiring with the
    grant (the hub's minimum is 60 s). The code gives access to this server on the hub;
    what it may do here is the grant's. Blocking. Needs ``shares!server`` in
    ``c.Spawner.server_token_scopes`` and ``shares!user`` for users (README, "Sharing a
    session read-only")."""
    body = {"expires_in": max(60, expires_in)}
    try:
        status, model = hub.call("POST", hub.path("share-codes"), body)
    except (OSError, ValueError) as e:
        return Invitation(error=f"the hub could not make a share code: {e}")
    if status >= 400:
        return Invitation(
            error=f"the hub refused a share code ({status}); servers need the scope "
            "shares!server (c.Spawner.server_token_scopes) and users shares!user"
        )
    model = model if isinstance(model, dict) else {}
    accept = model.get("full_accept_url") or model.get("accept_url")
    if not isinstance(accept, str):
        return Invitation(error="the hub's answer had no accept_url")
    joiner = "&" if "?" in accept else "?"
    code_id = model.get("id")
    return Invitation(
        accept + joiner + urllib.parse.urlencode({"next": next_path}),
        code_id if isinstance(code_id, str) else None,
    )


class Watcher(Protocol):
    """An open viewer socket (:class:`~jupyter_agents.server.viewer.ViewerSocket`)."""

    user: str

    def end(self, reason: str) -> None:
        """Close the socket (from the IO loop)."""

    def revalidate(self) -> Awaitable[bool]:
        """Whether its user would still be let in."""


class Shares:
    """The grants of one server and the watchers watching through them.

    :meth:`create`, :meth:`invite`, :meth:`list`, :meth:`admit`, :meth:`revoke` and
    :meth:`end_hub_access` block (the store, the hub): call them in a worker thread,
    :meth:`revoke` returning a callable to run on the IO loop (closing sockets).
    :meth:`watch`, :meth:`confirm`, :meth:`schedule` (a grant's expiry),
    :meth:`revalidate` and :meth:`run` belong to the IO loop.

    A watcher is listed (``watchers``) from :meth:`watch` until its socket has closed.
    """

    def __init__(
        self,
        service: SessionService,
        refused: Callable[[], str | None],
        revalidate_interval: float = REVALIDATE_S,
        log: logging.Logger | None = None,
    ) -> None:
        self.service = service
        self.audit = (log or logging.getLogger("jupyter_agents")).getChild("audit")
        self.refused = refused
        self.revalidate_interval = revalidate_interval
        #: the open watchers of each grant; a grant's set goes when its last watcher closes
        self.watchers: dict[str, set[Watcher]] = {}
        #: watchers told to end whose sockets have not closed yet
        self._ending: set[Watcher] = set()
        #: grants whose expiry this process has scheduled
        self._scheduled: set[str] = set()
        #: grants revoked by this process (their expiry is not news)
        self._revoked: set[str] = set()
        #: one clean-up of hub access at a time in this process
        self._cleaning = threading.Lock()
        self._tasks: set[asyncio.Future[Any]] = set()

    def _ready(self) -> None:
        reason = self.refused()
        if reason is not None:
            raise Conflict(reason)

    def create(self, data: Mapping[str, Any], owner: str) -> Share:
        """A new grant (:func:`check_grant`) on a running session; 409 when this server
        cannot share (:func:`~jupyter_agents.sharing.auth.sharing_refused`) or the session is
        not running."""
        self._ready()
        sid, viewer, expires_in = check_grant(data)
        session = self.service.get(sid)
        if session.status != "running":
            raise Conflict(f"session {sid} is {session.status}: only a running one can be watched")
        now = datetime.now(timezone.utc)
        share = Share(
            secrets.token_hex(12),
            sid,
            viewer,
            utcnow_iso(),
            clock.iso(now + timedelta(seconds=expires_in)),
        )
        self.service.shares.add_share(share)
        self._changed(sid)
        self.audit.info(
            "share %s created by %s: session %s, viewer %s, expires %s",
            share.id,
            owner,
            sid,
            viewer or "(any hub user with access)",
            share.expires,
        )
        return share

    def invite(self, share: Share, next_path: str) -> dict[str, str]:
        """On JupyterHub, a share code for ``share`` whose accept link lands on
        ``next_path`` (:func:`hub_share_code`), recorded with the grant, and its named
        viewer recorded as admitted through it (so the hub share the code turns into
        ends with the grant); the ``accept_url`` or ``hub_error`` of the REST model,
        ``{}`` off JupyterHub."""
        hub = Hub.from_env()
        if hub is None:
            return {}
        expires = clock.parse(share.expires)
        left = int((expires - clock.now()).total_seconds()) + 1
        invitation = hub_share_code(hub, left, next_path)
        if invitation.code_id is not None:
            self.service.shares.set_share_hub_code(share.id, invitation.code_id)
            if share.viewer is not None and share.viewer != hub.owner:
                self.service.shares.admit(share.id, share.viewer, utcnow_iso())
        return invitation.to_model()

    def list(self) -> list[dict[str, Any]]:
        """The active grants, each with the users watching through it now."""
        return [
            {**s.to_model(), "watchers": sorted(v.user for v in self.watchers.get(s.id, ()))}
            for s in self.service.shares.shares(active_at=utcnow_iso())
        ]

    def revoke(self, share_id: str, owner: str) -> Callable[[], None]:
        """Revoke a grant (404 if unknown or no longer active); returns what closes its
        watcher sockets and then ends the hub access that came with it (off the loop), to
        run on the IO loop."""
        if not self.service.shares.revoke_share(share_id, utcnow_iso()):
            self.service.shares.share(share_id)  # 404 when unknown
            raise NotFound(f"share {share_id} is no longer active")
        self._revoked.add(share_id)
        self._changed(self.service.shares.share(share_id).session_id)
        self.audit.info("share %s revoked by %s", share_id, owner)

        def close() -> None:
            self._end(share_id, "revoked")
            self._offload(self.end_hub_access)

        return close

    def admit(self, share_id: str, user: str) -> Share:
        """The grant ``user`` watches through; :class:`Forbidden` when there is no such
        live grant for them (the same answer whatever the reason) or this server
        cannot share. On JupyterHub, a user other than the owner who reaches an existing
        grant is recorded as admitted through it, let in or not (the hub let them reach
        this server: their hub access ends with the grant)."""
        if self.refused() is not None:
            raise Forbidden("this server does not share sessions read-only")
        try:
            share = self.service.shares.share(share_id)
        except NotFound:
            share = None
        hub = Hub.from_env()
        if share is not None and hub is not None and user != hub.owner:
            self.service.shares.admit(share.id, user, utcnow_iso())
        if share is None or not grants(share, user, utcnow_iso()):
            raise Forbidden("no live read-only share of yours by that id")
        return share

    def watch(self, share: Share, watcher: Watcher) -> Callable[[int, int], None]:
        """Register an open watcher (and schedule its grant's expiry here, if this
        process has not); returns what to call when it closes (with the bytes it was
        sent and the input frames dropped, for the audit line). The grant was read
        before the socket opened: :meth:`confirm` reads it again."""
        self.watchers.setdefault(share.id, set()).add(watcher)
        self.schedule(share)
        self._offload(self._changed, share.session_id)
        self.audit.info(
            "viewer %s connected to share %s (session %s)", watcher.user, share.id, share.session_id
        )

        def closed(sent: int, dropped: int) -> None:
            watchers = self.watchers.get(share.id)
            if watchers is not None:
                watchers.discard(watcher)
                if not watchers:
                    del self.watchers[share.id]
            self._ending.discard(watcher)
            self._offload(self._changed, share.session_id)
            self.audit.info(
                "viewer %s disconnected from share %s: %d bytes sent, %d input frames dropped",
                watcher.user,
                share.id,
                sent,
                dropped,
            )

        return closed

    async def confirm(self, share: Share, watcher: Watcher) -> bool:
        """After :meth:`watch`: whether the grant, read again from the store, still lets
        the watcher in; if not the watcher is ended. A revoke or an expiry that landed
        between :meth:`admit` and :meth:`watch` (in any process) is seen here; one after
        the read finds the watcher registered."""
        try:
            stored: Share | None = await asyncio.to_thread(self.service.shares.share, share.id)
        except NotFound:
            stored = None
        if stored is not None and grants(stored, watcher.user, utcnow_iso()):
            return True
        self.audit.info(
            "viewer %s of share %s: the grant was %s before the watch began",
            watcher.user,
            share.id,
            ended(stored),
        )
        self._end_watcher(watcher, ended(stored))
        return False

    def _end_watcher(self, watcher: Watcher, reason: str) -> None:
        if watcher not in self._ending:
            self._ending.add(watcher)
            watcher.end(reason)

    def _end(self, share_id: str, reason: str) -> None:
        for watcher in list(self.watchers.get(share_id, ())):
            self._end_watcher(watcher, reason)

    def schedule(self, share: Share) -> None:
        """On the IO loop: end ``share``'s watches when it expires (once per process)."""
        if share.id in self._scheduled:
            return
        self._scheduled.add(share.id)
        expires = clock.parse(share.expires)
        delay = (expires - clock.now()).total_seconds()
        asyncio.get_running_loop().call_later(max(0.0, delay), self._expire, share.id)

    def _expire(self, share_id: str) -> None:
        if share_id not in self._revoked:
            self.audit.info("share %s expired", share_id)
            self._end(share_id, "expired")

            def after() -> None:
                self._changed(self.service.shares.share(share_id).session_id)
                self.end_hub_access()

            self._offload(after)

    def _changed(self, session_id: str) -> None:
        """Publish a ``shared`` event of the session (blocking: reads the store)."""
        with contextlib.suppress(NotFound):
            self.service.publish("shared", self.service.get(session_id))

    def _offload(self, work: Callable[..., None], *args: Any) -> None:
        """Run blocking ``work`` in a worker thread; a failure is logged."""
        task = asyncio.ensure_future(asyncio.to_thread(work, *args))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.audit.warning("sharing: %r", task.exception())

    def end_hub_access(self) -> None:
        """On JupyterHub, end the hub access of grants that have ended (in this process
        or any other on the state dir): revoke the hub share of each user admitted
        through them whom no live grant covers, and delete their share codes
        (:func:`hub_cleanup`). What the hub did not do is tried again on the next call.
        Blocking."""
        hub = Hub.from_env()
        if hub is None:
            return
        store = self.service.shares
        with self._cleaning:
            plan = hub_cleanup(store.shares(), store.admissions(), utcnow_iso(), hub.owner)
            for user, through in plan.users.items():
                try:
                    done = hub.revoke_share(user)
                except (OSError, ValueError) as e:
                    done, why = False, type(e).__name__
                else:
                    why = "refused"
                if not done:
                    self.audit.warning("hub share of %s: could not revoke (%s)", user, why)
                    continue
                store.forget_admissions(user, through)
                self.audit.info("hub share of %s revoked: share %s ended", user, ", ".join(through))
            for share_id, code_id in plan.codes:
                try:
                    done = hub.delete_code(code_id)
                except (OSError, ValueError):
                    done = False
                if done:
                    store.set_share_hub_code(share_id, None)
                else:
                    self.audit.warning("share %s: could not delete its hub share code", share_id)

    async def revalidate(self) -> None:
        """On the IO loop, once: end each watcher whose grant the store no longer has
        active (revoked or expired, by any process), then each one the hub no longer
        lets in (failing closed when it cannot be asked), then end the hub access of
        ended grants (:meth:`end_hub_access`, off the loop)."""
        watched = [share_id for share_id, watchers in self.watchers.items() if watchers]
        if watched:
            found = await asyncio.to_thread(self.service.shares.shares, None, watched)
            stored = {share.id: share for share in found}
            now = utcnow_iso()
            for share_id in watched:
                share = stored.get(share_id)
                for watcher in list(self.watchers.get(share_id, ())):
                    if watcher in self._ending or (share and grants(share, watcher.user, now)):
                        continue
                    self.audit.info(
                        "viewer %s of share %s: the grant was %s",
                        watcher.user,
                        share_id,
                        ended(share),
                    )
                    self._end_watcher(watcher, ended(share))
        for share_id, watchers in list(self.watchers.items()):
            for watcher in list(watchers):
                if watcher in self._ending:
                    continue
                try:
                    valid = await watcher.revalidate()
                except Exception as e:  # e.g. the hub unreachable: fail closed
                    self.audit.warning(
                        "viewer %s of share %s: could not re-validate (%s)",
                        watcher.user,
                        share_id,
                        type(e).__name__,
                    )
                    valid = False
                if not valid and watcher not in self._ending:
                    self.audit.info(
                        "viewer %s of share %s: no longer let in by the hub", watcher.user, share_id
                    )
                    self._end_watcher(watcher, "no longer authorized")
        await asyncio.to_thread(self.end_hub_access)

    async def run(self) -> None:
        """Forever, on the IO loop: schedule the expiry of the stored grants, end the hub
        access of those that ended while no server ran, then every
        ``revalidate_interval`` s :meth:`revalidate`. A round that fails is logged and
        the next one tries again."""
        for share in await asyncio.to_thread(self.service.shares.shares, utcnow_iso()):
            self.schedule(share)
        first = True
        while True:
            try:
                await (asyncio.to_thread(self.end_hub_access) if first else self.revalidate())
            except Exception as e:
                self.audit.warning("sharing: re-validation failed (%r)", e)
            first = False
            await asyncio.sleep(self.revalidate_interval)
