"""The records the session store keeps, as every wing sees them: a :class:`Session`, a
read-only grant (:class:`Share`), who was admitted through one (:class:`Admission`) and
a device the owner turned Web Push on for (:class:`PushSubscription`).
Plain data: reading and writing them is :mod:`jupyter_agents.core.store`'s, which the
front ends (the server and clients wings) never import.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from jupyter_agents.core import clock

Status = Literal["running", "exited", "interrupted", "orphaned", "killed"]
#: what an agent session needs: ``waiting``, ``permission`` and ``error`` need the user
Attention = Literal["ready", "working", "waiting", "permission", "error", "unknown"]
#: how a person works with a session (:attr:`Session.mode`); the first is the default
MODES = ("terminal", "acp")


def utcnow_iso() -> str:
    """The current UTC time as the ISO 8601 string Jupyter's REST models use."""
    return clock.now_iso()


@dataclasses.dataclass
class Session:
    """One session record; ``to_model()`` is the JSON model of the REST API."""

    id: str
    name: str
    status: Status
    backend: str
    kind: str = "shell"
    cwd: str | None = None
    argv: list[str] = dataclasses.field(default_factory=list)
    pid: int | None = None
    pid_created: float | None = None
    created: str = dataclasses.field(default_factory=utcnow_iso)
    last_activity: str = dataclasses.field(default_factory=utcnow_iso)
    exit_code: int | None = None
    conversation_id: str | None = None
    rows: int | None = None
    cols: int | None = None
    #: extra arguments the session was launched with (kept on resume)
    args: list[str] = dataclasses.field(default_factory=list)
    #: the environment it was launched with (restored with it; never served)
    env: dict[str, str] | None = None
    #: the last launch resumed "the most recent conversation" instead of a known id
    ambiguous: bool = False
    #: why the session is in its state, when that needs saying (e.g. a failed resume)
    reason: str | None = None
    #: what the agent needs (None: a shell, or a kind that does not report)
    attention: Attention | None = None
    #: when it started needing that (ISO 8601 UTC)
    attention_since: str | None = None
    #: why, for ``error`` (e.g. ``authentication_failed``, ``rate_limit``)
    attention_reason: str | None = None
    #: how we know: ``hooks`` (exact, per-process hooks), ``notify`` (exact, at turn ends)
    attention_source: str | None = None
    #: the title a person gave it (None: none)
    title: str | None = None
    #: the last title its program set (OSC 0 or 2), plain text
    program_title: str | None = None
    #: the modes its program set at a transcript offset (terminal_state.Followed.dump)
    modes: str | None = None
    #: the git worktree it works in (:class:`~jupyter_agents.sessions.worktrees.Worktree`
    #: as a record), None for a session started in a folder as it is
    worktree: dict[str, Any] | None = None
    #: how a person works with it: ``terminal`` (its program's own screen) or ``acp``
    #: (an ACP agent held by :mod:`jupyter_agents.acp.proxy`: prompts and turns over
    #: the Agent Client Protocol; the terminal shows the proxy and the agent's stderr)
    mode: str = "terminal"

    def to_model(self) -> dict[str, Any]:
        """The session model of the REST API (everything but process identity and env):
        ``title`` is the person's title, else the program's (``title_source`` says
        which: ``user``, ``program`` or None)."""
        model = dataclasses.asdict(self)
        del model["pid_created"], model["env"], model["program_title"], model["modes"]
        model["title"] = self.title or self.program_title
        model["title_source"] = "user" if self.title else "program" if self.program_title else None
        return model


@dataclasses.dataclass
class Share:
    """A read-only grant: ``viewer`` (a user name; None: any user who can reach this
    server) may watch session ``session_id`` until ``expires`` unless ``revoked``
    (times ISO 8601 UTC, as :func:`utcnow_iso` writes them, so they sort as text)."""

    id: str
    session_id: str
    viewer: str | None
    created: str
    expires: str
    revoked: str | None = None
    #: on JupyterHub, the id (``sc_<n>``) of the hub share code made for it, until the
    #: code is deleted after the grant ended (never served)
    hub_code: str | None = None

    def active(self, now: str) -> bool:
        """Whether it still grants anything at ``now`` (:func:`utcnow_iso`)."""
        return self.revoked is None and now < self.expires

    def to_model(self) -> dict[str, Any]:
        model = dataclasses.asdict(self)
        del model["hub_code"]
        return model


@dataclasses.dataclass(frozen=True)
class Admission:
    """``user`` got (or was meant to get) JupyterHub access to this server through grant
    ``share_id``: the named viewer when the grant's share code was made, and anyone the
    hub let reach that grant's viewer routes. Kept until that hub access is ended."""

    share_id: str
    user: str
    admitted: str


@dataclasses.dataclass(frozen=True)
class PushSubscription:
    """A device of ``user``'s that gets Web Push notifications: the push service's
    ``endpoint`` and the browser's keys (``p256dh``, ``auth``, base64url), the ``name``
    the owner gave it, when it was ``created`` (ISO 8601 UTC)."""

    id: str
    user: str
    endpoint: str
    p256dh: str
    auth: str
    name: str
    created: str

    def to_model(self) -> dict[str, Any]:
        """Its REST model: no keys."""
        return {"id": self.id, "name": self.name, "endpoint": self.endpoint,
                "created": self.created}  # fmt: skip
