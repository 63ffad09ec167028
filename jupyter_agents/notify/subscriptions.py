"""PushSubscriptions: the devices the owner turned Web Push on for, kept in the session
store (:class:`~jupyter_agents.core.store.PushTable`), with the checks of what a browser
sends (``PushSubscription.toJSON()`` and a name)."""

from __future__ import annotations

import base64
import binascii
import secrets
import urllib.parse
from collections.abc import Mapping
from typing import Any

from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest, NotFound
from jupyter_agents.core.records import PushSubscription
from jupyter_agents.core.store import PushTable

#: the most devices one owner keeps (a push goes to each)
MAX_DEVICES = 20
MAX_ENDPOINT = 2048
MAX_NAME = 100


def b64url(value: object, field: str, size: int) -> str:
    """``value`` if it is base64url (padding optional) of ``size`` bytes; else
    :class:`InvalidRequest` naming ``field``.

    >>> b64url("AAAAAAAAAAAAAAAAAAAAAA", "auth", 16)
    'AAAAAAAAAAAAAAAAAAAAAA'
    """
    if not isinstance(value, str) or len(value) > 200:
        raise InvalidRequest(f'"{field}" must be a base64url string')
    try:
        padded = value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4)
        raw = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f'"{field}" is not base64url') from None
    if len(raw) != size or (size == 65 and raw[0] != 4):
        what = "an uncompressed P-256 public key" if size == 65 else f"{size} bytes"
        raise InvalidRequest(f'"{field}" is not {what}')
    return value.rstrip("=")


def parse(body: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """``(endpoint, p256dh, auth, name)`` from ``{endpoint, keys: {p256dh, auth}, name?,
    expirationTime?}``; :class:`InvalidRequest` for anything else."""
    unknown = set(body) - {"endpoint", "keys", "name", "expirationTime"}
    if unknown:
        raise InvalidRequest(f"unknown fields: {', '.join(sorted(unknown))}")
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or len(endpoint) > MAX_ENDPOINT:
        raise InvalidRequest('"endpoint" must be the push service URL the browser gave')
    url = urllib.parse.urlsplit(endpoint)
    loopback = url.hostname in ("127.0.0.1", "localhost", "::1")
    if url.scheme != "https" and not (url.scheme == "http" and loopback):
        raise InvalidRequest('"endpoint" must be an https URL')
    if not url.hostname or url.username or url.password:
        raise InvalidRequest('"endpoint" must be an https URL with a host and no user')
    keys = body.get("keys")
    if not isinstance(keys, Mapping):
        raise InvalidRequest('"keys" must be {p256dh, auth}')
    p256dh = b64url(keys.get("p256dh"), "keys.p256dh", 65)
    auth = b64url(keys.get("auth"), "keys.auth", 16)
    name = body.get("name", "this device")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise InvalidRequest(f'"name" must be 1-{MAX_NAME} characters')
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidRequest('"name" has control characters')
    return endpoint, p256dh, auth, name.strip()


class PushSubscriptions:
    """``owner``'s subscriptions in ``table``. Blocking (SQLite)."""

    def __init__(self, table: PushTable, owner: str) -> None:
        self._table = table
        self.owner = owner

    def list(self) -> list[PushSubscription]:
        return self._table.push_subscriptions(self.owner)

    def add(self, body: Mapping[str, Any]) -> PushSubscription:
        """Keep the device a browser's ``body`` describes (:func:`parse`); the same
        endpoint again replaces its keys and name. :class:`InvalidRequest` beyond
        :data:`MAX_DEVICES`."""
        endpoint, p256dh, auth, name = parse(body)
        kept = self.list()
        if len(kept) >= MAX_DEVICES and all(s.endpoint != endpoint for s in kept):
            raise InvalidRequest(f"at most {MAX_DEVICES} devices: remove one first")
        return self._table.add_push_subscription(
            PushSubscription(
                id=secrets.token_hex(8),
                user=self.owner,
                endpoint=endpoint,
                p256dh=p256dh,
                auth=auth,
                name=name,
                created=clock.now_iso(),
            )
        )

    def remove(self, subscription_id: str) -> None:
        """Forget one device; :class:`NotFound` if the owner has none by that id."""
        if not self._table.remove_push_subscription(self.owner, subscription_id):
            raise NotFound(f"no push subscription {subscription_id!r}")

    def gone(self, endpoint: str) -> bool:
        """Forget the device of ``endpoint`` (its push service said it is gone)."""
        return self._table.remove_push_endpoint(endpoint)
