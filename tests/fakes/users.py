"""Users for the sharing tests, without a hub: each request's token (``Authorization:
token T`` or ``?token=T``) names a user through the JSON file ``$JUPYTER_AGENTS_TEST_USERS``
(``{token: user name}``), read again on every call, so a test can take a user's access
away as a revoke on the hub would. :class:`SharingTestIdentity` narrows it like
:class:`jupyter_agents.auth.ViewerIdentityProvider` narrows the hub's."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web

from jupyter_agents.auth import OwnerOnlyIdentity


class TokenUsers(IdentityProvider):
    def get_user(self, handler: web.RequestHandler) -> User | None:
        header = handler.request.headers.get("Authorization", "")
        token = header[len("token ") :] if header.startswith("token ") else ""
        token = token or handler.get_argument("token", "")
        users = json.loads(Path(os.environ["JUPYTER_AGENTS_TEST_USERS"]).read_text())
        name = users.get(token) if token else None
        if not isinstance(name, str):
            return None
        handler._token_authenticated = True  # type: ignore[attr-defined]  # no XSRF check
        return User(name)


class SharingTestIdentity(OwnerOnlyIdentity, TokenUsers):
    pass
