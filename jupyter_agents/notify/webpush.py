"""Web Push (RFC 8030, 8291, 8292): the server's VAPID key pair, the subject check, and
the channel that encrypts a notice for each of the owner's devices and posts it to its
push service.

The key pair is one per state dir, ``<state dir>/push/vapid.pem`` (0600 in a 0700
folder), made on first use; its public key is what the Lab page passes to
``pushManager.subscribe`` as ``applicationServerKey``. Every push is signed with a VAPID
JWT whose ``sub`` is the configured subject: push services want a way to reach whoever
runs the server, and Apple's answers 403 for a ``localhost`` one, so a subject that is
not a ``mailto:`` address or an ``https:`` URL of a real host is refused here (the channel
then says why instead of sending). The payload is encrypted with ``aes128gcm``
(``http_ece``); a push service answering 404 or 410 means the subscription is gone, and
it is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import time
import urllib.parse
from pathlib import Path
from typing import Any

import http_ece
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_agents.core.paths import ensure_private_dir
from jupyter_agents.core.records import PushSubscription
from jupyter_agents.notify.notice import Notice
from jupyter_agents.notify.subscriptions import PushSubscriptions

#: how long a signed VAPID claim is valid (push services accept at most 24 h)
CLAIM_S = 12 * 3600


def load_or_make_keys(state_dir: Path) -> Vapid02:
    """The state dir's VAPID key pair, made (0600) if there is none yet. A second
    process making it at the same time reads the one that won."""
    folder = ensure_private_dir(state_dir / "push")
    path = folder / "vapid.pem"
    if not path.exists():
        vapid = Vapid02()
        vapid.generate_keys()
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(vapid.private_pem())
    return Vapid02.from_file(str(path))


def public_key(vapid: Vapid02) -> str:
    """The public key as ``applicationServerKey`` wants it: the uncompressed point,
    base64url without padding (87 characters)."""
    raw = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def subject_refused(subject: str) -> str | None:
    """Why ``subject`` cannot sign pushes (None: it can).

    >>> subject_refused("mailto:ops@example.org") is None
    True
    >>> subject_refused("mailto:me@localhost")[:44]
    'push_subject names a local host (localhost):'
    >>> subject_refused("https://127.0.0.1:8888/")[:44]
    'push_subject names a local host (127.0.0.1):'
    >>> subject_refused("").startswith("Web Push needs c.AgentsApp.push_subject")
    True
    """
    if not subject:
        return (
            "Web Push needs c.AgentsApp.push_subject: a mailto: address or https: URL "
            "where push services can reach whoever runs this server"
        )
    if subject.startswith("mailto:"):
        host = subject.rpartition("@")[2]
        if "@" not in subject or not host:
            return "push_subject must be mailto:<address> or an https: URL"
    elif subject.startswith("https://"):
        host = urllib.parse.urlsplit(subject).hostname or ""
    else:
        return "push_subject must be mailto:<address> or an https: URL"
    if _local(host):
        return (
            f"push_subject names a local host ({host}): push services refuse it; "
            "give a mailto: address or https: URL of yours"
        )
    return None


def _local(host: str) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    if host in ("localhost", "") or host.endswith((".localhost", ".local", ".invalid")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host
    return address.is_loopback or address.is_private or address.is_link_local


def encrypt(payload: bytes, subscription: PushSubscription) -> bytes:
    """``payload`` encrypted for one device (RFC 8291, ``aes128gcm``), with a fresh
    ephemeral key."""

    def raw(value: str) -> bytes:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))

    key = ec.generate_private_key(ec.SECP256R1())
    body: bytes = http_ece.encrypt(
        payload,
        private_key=key,
        dh=raw(subscription.p256dh),
        auth_secret=raw(subscription.auth),
        version="aes128gcm",
    )
    return body


class WebPushChannel:
    """Pushes each notice to every device of the owner (:class:`PushSubscriptions`)."""

    name = "webpush"

    def __init__(
        self,
        subscriptions: PushSubscriptions,
        vapid: Vapid02,
        subject: str,
        http: AsyncHTTPClient,
        timeout: float = 10.0,
        log: Any = None,
    ) -> None:
        self.subscriptions = subscriptions
        self.vapid = vapid
        self.subject = subject
        self.http = http
        self.timeout = timeout
        self.log = log

    def refused(self) -> str | None:
        return subject_refused(self.subject)

    def headers(self, endpoint: str, ttl: int) -> dict[str, str]:
        """The headers of a push to ``endpoint``: the VAPID authorization for its
        origin, and the encoding, TTL and urgency."""
        url = urllib.parse.urlsplit(endpoint)
        claims = {
            "aud": f"{url.scheme}://{url.netloc}",
            "sub": self.subject,
            "exp": int(time.time()) + CLAIM_S,
        }
        signed: dict[str, str] = self.vapid.sign(claims)
        return {
            **signed,
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "TTL": str(ttl),
            "Urgency": "high",
        }

    async def send(self, notice: Notice) -> tuple[int, str]:
        devices = await asyncio.to_thread(self.subscriptions.list)
        if not devices:
            return 0, "no device is subscribed"
        payload = notice.push_payload()
        ttl = max(0, int(notice.until - time.time()))
        said = await asyncio.gather(
            *(self._push(d, payload, ttl) for d in devices), return_exceptions=True
        )
        delivered = sum(1 for s in said if s == "delivered")
        problems = sorted({str(s) or type(s).__name__ for s in said if s != "delivered"})
        summary = f"delivered to {delivered} of {len(devices)} devices" + (
            f" ({'; '.join(problems)})" if problems else ""
        )
        if problems and not delivered:
            raise RuntimeError(summary)
        return delivered, summary

    async def _push(self, device: PushSubscription, payload: bytes, ttl: int) -> str:
        body = await asyncio.to_thread(encrypt, payload, device)
        request = HTTPRequest(
            device.endpoint,
            method="POST",
            headers=self.headers(device.endpoint, ttl),
            body=body,
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            follow_redirects=False,
        )
        try:
            await self.http.fetch(request)
        except HTTPClientError as e:
            if e.code in (404, 410):
                await asyncio.to_thread(self.subscriptions.gone, device.endpoint)
                return f"device {device.name!r} is gone ({e.code}): dropped"
            return f"device {device.name!r}: the push service answered {e.code} {e.message}"
        return "delivered"
