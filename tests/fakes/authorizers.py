"""Authorizers for tests (``--ServerApp.authorizer_class=authorizers.<Name>`` with this
directory on ``PYTHONPATH``)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.authorizer import Authorizer


class ReadOnly(Authorizer):
    """Allows ``read`` on every resource, and nothing else: a deployment that lets a user
    list terminals and sessions but neither type into them nor see their output."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return action == "read"
