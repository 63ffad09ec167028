"""What a notification of a permission request carries: the minimum (:class:`Notice`),
and its shapes for each channel, pure.

A notice names the session's kind and name, the tool, the command cut to one line of at
most :data:`MAX_LINE` characters (or the file or URL the tool acts on), the answer
tokens (:mod:`.tokens`) and the URL of the confirmation page. Nothing of the session's
output, no other input of the tool, no credential that outlives the request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from jupyter_agents.core import clock

#: the longest command line a notice carries
MAX_LINE = 200
#: Web Push payloads must fit 4096 bytes once encrypted (RFC 8291: 4078 of plaintext)
MAX_PUSH_PAYLOAD = 3800
#: ntfy shows at most three actions
NTFY_ACTIONS = 3


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line: its first non-blank line, cut at ``limit`` characters, with
    an ellipsis when anything was left out.

    >>> one_line("  rm -rf build\\necho done")
    'rm -rf build …'
    >>> one_line("x" * 5, 3)
    'xxx…'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    cut = first[:limit]
    return cut + ("…" if len(first) > limit else " …" if len(lines) > 1 else "")


@dataclasses.dataclass(frozen=True)
class Notice:
    """One pending request, as a notification carries it. ``tokens`` by choice key
    (``allow``, ``deny``, ``suggestion-<i>``) and ``labels`` likewise; ``until``: when
    the request stops waiting (epoch s)."""

    request_id: str
    kind: str
    session: str
    tool: str
    line: str
    tokens: Mapping[str, str]
    labels: Mapping[str, str]
    until: float = 0.0

    @classmethod
    def of(cls, request: Mapping[str, Any], tokens: Mapping[str, str]) -> Notice:
        """The notice of a request's REST model with its freshly minted ``tokens``."""
        summary = request.get("input") or {}
        what = request.get("command") or next(
            (summary[k] for k in ("file_path", "notebook_path", "url", "path") if k in summary),
            "",
        )
        labels = {"allow": "Allow", "deny": "Deny"}
        for s in request.get("suggestions") or []:
            labels[f"suggestion-{s['index']}"] = one_line(str(s["label"]), 60)
        return cls(
            request_id=str(request["id"]),
            kind=str(request.get("kind")),
            session=str(request.get("name")),
            tool=str(request.get("tool")),
            line=one_line(str(what)),
            tokens=dict(tokens),
            labels=labels,
            until=clock.epoch(str(request["until"])) if request.get("until") else 0.0,
        )

    @property
    def title(self) -> str:
        return f"{self.session} asks to run {self.tool}"

    def page(self, agents_url: str) -> str:
        """The confirmation page of the Allow token, under ``agents_url``
        (``{base_url}agents/``, absolute or not)."""
        return f"{agents_url}act/{self.tokens['allow']}"

    def push_payload(self) -> bytes:
        """The Web Push payload (JSON; what the service worker reads): ``type``,
        ``request``, ``kind``, ``session``, ``tool``, ``command``, ``title``, ``url``
        (the confirmation page, relative to the worker's scope) and ``actions``
        ``[{action, title, token}]``, suggestions dropped from the end until it fits
        :data:`MAX_PUSH_PAYLOAD`."""
        keys = list(self.tokens)
        while True:
            data = {
                "type": "permission-request",
                "request": self.request_id,
                "kind": self.kind,
                "session": self.session,
                "tool": self.tool,
                "command": self.line,
                "title": self.title,
                "url": self.page(""),
                "actions": [
                    {"action": k, "title": self.labels.get(k, k), "token": self.tokens[k]}
                    for k in keys
                ],
            }
            raw = json.dumps(data, ensure_ascii=False).encode()
            if len(raw) <= MAX_PUSH_PAYLOAD or len(keys) <= 2:
                return raw
            keys.pop()

    def ntfy_message(self, topic: str, agents_url: str) -> dict[str, Any]:
        """The ntfy JSON publish: the title, the command, a click that opens the
        confirmation page, and ``http`` actions (Allow, Deny, the first suggestion) that
        post the answer links from the phone's ntfy app."""
        actions = [
            {
                "action": "http",
                "label": self.labels.get(k, k),
                "url": f"{agents_url}act/{self.tokens[k]}",
                "method": "POST",
                "headers": {"Accept": "application/json"},
                "clear": True,
            }
            for k in list(self.tokens)[:NTFY_ACTIONS]
        ]
        return {
            "topic": topic,
            "title": self.title,
            "message": f"{self.kind} · {self.tool}: {self.line}",
            "tags": ["lock"],
            "priority": 4,
            "click": self.page(agents_url),
            "actions": actions,
        }
