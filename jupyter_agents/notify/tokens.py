"""AnswerTokens: single-use links that answer one permission request with one choice.

A notification cannot carry Jupyter's credentials (a service worker cannot send the
XSRF header, an ntfy action is sent by the phone's ntfy app), so each pending request
can mint one token per choice it offers: allow, deny, and each of its CLI's "allow from
now on" suggestions. ``POST {base_url}agents/act/<token>`` answers the request with
that choice and does nothing else (it reads no output, lists nothing, answers no other
request).

A token is ``secrets.token_urlsafe(32)`` (256 bits); only its SHA-256 is kept, in this
process's memory, never in the store: a token lives no longer than its request (whose
hook waits minutes), the process that mints it is the one that answers it, and a
server restart voids every token (fail closed; the requests page still answers).
What a token does, in order (:meth:`AnswerTokens.act`):

- unknown (never minted, or forgotten :data:`FORGET_AFTER` s after its request's wait
  ended): :class:`~jupyter_agents.core.errors.NotFound` (404);
- its request was answered (allowed or denied, by any token of it or any other way):
  :class:`~jupyter_agents.core.errors.Conflict` (409) saying how;
- its request ended without an answer (answered in the terminal, the turn moved on, the
  session ended, the hook's wait passed): :class:`~jupyter_agents.core.errors.Gone` (410);
- else the request is answered with the token's choice, once (two tokens posted at
  once: one wins, the other gets 409).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from jupyter_agents.core.errors import Conflict, Gone, NotFound
from jupyter_agents.sessions.requests import PermissionDesk

#: how long a token is remembered after its request's wait ends (then: 404)
FORGET_AFTER = 600.0
#: the most tokens kept at once; beyond it the oldest are forgotten (then: 404)
MAX_GRANTS = 10_000
#: what answers through a token are recorded as made ``by``
BY = "an answer link (notification)"


@dataclasses.dataclass(frozen=True)
class Choice:
    """One answer a request offers: ``decision``, the ``suggestion`` (its index) for an
    "allow from now on", and a person's ``label`` for it."""

    decision: Literal["allow", "deny"]
    label: str
    suggestion: int | None = None

    @property
    def key(self) -> str:
        """``allow``, ``deny`` or ``suggestion-<i>``."""
        return self.decision if self.suggestion is None else f"suggestion-{self.suggestion}"

    def body(self) -> dict[str, Any]:
        """The answer's body (:func:`~jupyter_agents.agents.permissions.answer_from`)."""
        out: dict[str, Any] = {"decision": self.decision}
        if self.suggestion is not None:
            out["suggestion"] = self.suggestion
        return out


def choices(suggestions: Sequence[str]) -> list[Choice]:
    """Allow, deny, then one per suggestion label (``suggestions``, in the request's order).

    >>> [c.key for c in choices(["Allow Bash(echo:*) for this session"])]
    ['allow', 'deny', 'suggestion-0']
    """
    out = [Choice("allow", "Allow"), Choice("deny", "Deny")]
    out += [Choice("allow", label, i) for i, label in enumerate(suggestions)]
    return out


def digest(token: str) -> str:
    """What is kept of a token."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


@dataclasses.dataclass(frozen=True)
class Grant:
    """What a token may do: answer ``request_id`` with ``choice`` until ``until``."""

    request_id: str
    choice: Choice
    until: float


class AnswerTokens:
    """The answer tokens of this server's pending requests (module docstring). Thread
    safe; :meth:`act` and :meth:`describe` block (files of the requests)."""

    def __init__(self, desk: PermissionDesk, clock: Callable[[], float] = time.time) -> None:
        self._desk = desk
        self._clock = clock
        self._lock = threading.Lock()
        self._grants: dict[str, Grant] = {}
        #: how requests answered through a token were answered, by request id
        self._answered: dict[str, str] = {}

    def mint(self, request_id: str, until: float, suggestions: Sequence[str]) -> dict[str, str]:
        """New tokens for a pending request whose hook waits until ``until`` (epoch s),
        one per choice (:func:`choices`), by :attr:`Choice.key`. Any of them answering
        voids the others, and those of earlier mints."""
        out = {}
        with self._lock:
            self._forget(self._clock())
            for choice in choices(suggestions):
                token = secrets.token_urlsafe(32)
                self._grants[digest(token)] = Grant(request_id, choice, until)
                out[choice.key] = token
            while len(self._grants) > MAX_GRANTS:
                del self._grants[next(iter(self._grants))]
        return out

    def _forget(self, now: float) -> None:
        for key, grant in list(self._grants.items()):
            if grant.until + FORGET_AFTER < now:
                del self._grants[key]
                self._answered.pop(grant.request_id, None)

    def _grant(self, token: str) -> Grant:
        with self._lock:
            self._forget(self._clock())
            grant = self._grants.get(digest(token))
            answered = None if grant is None else self._answered.get(grant.request_id)
        if grant is None:
            raise NotFound("no such answer link: it is wrong, or its request ended long ago")
        if answered is not None:
            raise Conflict(f"this permission request was {answered} already")
        return grant

    def _ended(self, grant: Grant) -> Exception:
        """The error for a token whose request is no longer pending."""
        decision = self._desk.decision_of(grant.request_id)
        if decision in ("allow", "deny"):
            words = "allowed" if decision == "allow" else "denied"
            return Conflict(f"this permission request was {words} already")
        how = self._desk.how_ended(grant.request_id)
        return Gone(f"this permission request has ended ({how or 'it no longer waits'})")

    def describe(self, token: str) -> tuple[Choice, dict[str, Any]]:
        """What ``token`` would do: its choice and its pending request's REST model
        (:meth:`~jupyter_agents.sessions.requests.PermissionDesk.pending_one`); the
        errors of :meth:`act`. Changes nothing."""
        grant = self._grant(token)
        if self._clock() >= grant.until:
            raise self._ended(grant)
        try:
            return grant.choice, self._desk.pending_one(grant.request_id)
        except NotFound:
            raise self._ended(grant) from None

    def act(self, token: str) -> dict[str, Any]:
        """Answer ``token``'s request with its choice (module docstring for the errors);
        the desk's ``{request, decision}`` with the ``choice``'s label."""
        grant = self._grant(token)
        if self._clock() >= grant.until:
            raise self._ended(grant)
        try:
            done = self._desk.answer(grant.request_id, grant.choice.body(), BY)
        except (NotFound, Conflict):
            raise self._ended(grant) from None
        with self._lock:
            self._answered[grant.request_id] = (
                "allowed" if grant.choice.decision == "allow" else "denied"
            )
        return {**done, "choice": grant.choice.label}
