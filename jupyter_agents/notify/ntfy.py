"""ntfy: a notice as an ntfy message (:meth:`~.notice.Notice.ntfy_message`) whose
``http`` actions make the phone's ntfy app post the answer links itself. One JSON POST
to the server's root URL (``Authorization: Bearer`` with a token when one is set); no
dependency but tornado's HTTP client."""

from __future__ import annotations

import json
from collections.abc import Callable

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_agents.notify.notice import Notice


class NtfyChannel:
    """Publishes to ``topic`` on the ntfy server at ``url``; ``agents_url()`` is the
    absolute ``{base_url}agents/`` the phone reaches the server at."""

    name = "ntfy"

    def __init__(
        self,
        url: str,
        topic: str,
        token: str,
        agents_url: Callable[[], str],
        http: AsyncHTTPClient,
        timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.topic = topic
        self.token = token
        self.agents_url = agents_url
        self.http = http
        self.timeout = timeout

    def refused(self) -> str | None:
        if not (self.url and self.topic):
            return "no ntfy server and topic are configured (ntfy_url, ntfy_topic)"
        return None

    async def send(self, notice: Notice) -> tuple[int, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        body = notice.ntfy_message(self.topic, self.agents_url())
        request = HTTPRequest(
            self.url,
            method="POST",
            headers=headers,
            body=json.dumps(body),
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            follow_redirects=False,
        )
        try:
            response = await self.http.fetch(request)
        except HTTPClientError as e:
            raise RuntimeError(f"ntfy answered {e.code}") from None
        return 1, f"published ({response.code})"
