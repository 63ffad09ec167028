"""Users for the sharing tests, without a hub: each request's token (``Authorization:
token T`` or ``?token=T``) names a user through the JSON file ``$JUPYTER_AGENTS_TEST_USERS``
(``{token: user name}``), read again on every call, so a test can take a user's access
away as a revoke on the hub would. :class:`SharingTestIdentity` narrows it like
:class:`jupyter_agents.sharing.auth.ViewerIdentityProvider` narrows the hub's.

For browsers (tests/test_ui_sharing.py) a page opened with a valid ``?token=`` gets a
cookie holding that token, which later requests without a token (assets, websockets)
are identified by, as the hub's own cookie does. A test fake only: the cookie is the
token itself, unsigned, and cookie-identified requests are not token-authenticated (so
jupyter_server's XSRF checks apply to them).

A gate for races (tests/test_sharing.py): with ``$JUPYTER_AGENTS_TEST_GATE`` naming a
directory, while that directory holds a file ``hold``, a viewer the server has just
admitted (:meth:`jupyter_agents.sharing.shares.Shares.admit`, in its worker thread, before its
socket opens) writes the grant's id to ``admitted`` there and waits until ``hold`` is
removed (at most 30 s). The product's code runs unchanged around the pause: a test can
land a revoke or an expiry exactly between a viewer's admission and its registration.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web

from jupyter_agents.core.records import Share
from jupyter_agents.sharing.auth import OwnerOnlyIdentity
from jupyter_agents.sharing.shares import Shares

#: the cookie a browser keeps after opening a page with a valid ``?token=``
COOKIE = "jupyter-agents-test-token"


class TokenUsers(IdentityProvider):
    def get_user(self, handler: web.RequestHandler) -> User | None:
        users = json.loads(Path(os.environ["JUPYTER_AGENTS_TEST_USERS"]).read_text())
        header = handler.request.headers.get("Authorization", "")
        token = header[len("token ") :] if header.startswith("token ") else ""
        in_url = "" if token else handler.get_argument("token", "")
        token = token or in_url
        if not token:
            cookie = handler.get_cookie(COOKIE, "")
            name = users.get(cookie) if cookie else None
            return User(name) if isinstance(name, str) else None
        name = users.get(token)
        if not isinstance(name, str):
            return None
        handler._token_authenticated = True  # type: ignore[attr-defined]  # no XSRF check
        if in_url:
            handler.set_cookie(COOKIE, token, path="/", httponly=True)
        return User(name)


class SharingTestIdentity(OwnerOnlyIdentity, TokenUsers):
    pass


def gated(admit: Callable[[Shares, str, str], Share]) -> Callable[[Shares, str, str], Share]:
    """``admit``, then the pause of ``$JUPYTER_AGENTS_TEST_GATE`` (module docstring)."""

    def admit_then_wait(self: Shares, share_id: str, user: str) -> Share:
        share = admit(self, share_id, user)
        gate = os.environ.get("JUPYTER_AGENTS_TEST_GATE")
        hold = Path(gate, "hold") if gate else None
        if hold is not None and hold.exists():
            (hold.parent / "admitted").write_text(share_id)
            deadline = time.monotonic() + 30
            while hold.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return share

    return admit_then_wait


Shares.admit = gated(Shares.admit)  # type: ignore[method-assign]
