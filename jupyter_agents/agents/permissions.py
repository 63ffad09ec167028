"""Permission requests: an agent's "may I run this?", shown and answered away from its tab.

Claude Code and Codex run a ``PermissionRequest`` hook before they run a tool that needs
approval (docs/agents.md, "Permission requests"). Ours (:mod:`jupyter_agents.hook` with
``--ask``) makes the request a *pending request*, a file in ``<state dir>/requests/``
(0700), and waits for its answer there. Whoever may type into the session answers it
(REST, the panel, ``jupyter agents allow``); the hook prints the decision and the CLI
proceeds with no key pressed. The files of one request, each 0600:

- ``<id>.json``: the request (:class:`PendingRequest`), written by the hook at once
  (a temporary file renamed into place);
- ``<id>.answer``: its answer (:class:`Answer`), made once: written to a temporary file
  then hard-linked into place, so a second answer finds it there (taken once) and the
  hook never reads half of one.

The hook removes both when it ends (answered, closed, its deadline passed, its CLI
gone); what a request shows (a command, a diff) lives only there, never in the spool,
whose records name the request and the tool and nothing else.

A request ends when it is answered here, answered in the terminal, or the turn moves on:
an event of the same session after it (:data:`CLOSING_EVENTS`) closes it
(:meth:`RequestFolder.close_before`). With Claude the CLI's own dialog stays on screen
meanwhile and the first answer wins; Codex shows no dialog while a hook runs, so its
request falls back to the dialog (the hook ends without a decision) when somebody is at
the tab or after its wait.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from jupyter_agents.core.errors import Conflict, InvalidRequest, NotFound
from jupyter_agents.core.paths import ensure_private_dir

#: what a person decides: run it, or not (the agent gets ``message``)
Decision = Literal["allow", "deny"]
#: how a request ended without a person's decision: closed (answered in the terminal,
#: the turn moved on, the session ended) or handed to the CLI's own dialog
Ending = Literal["closed", "dialog"]
#: spooled when a hook starts waiting and when it ends (after its answer)
ASKED, ENDED = "PermissionRequest", "PermissionEnded"
#: events after a request that show it was answered in the terminal or is moot now
CLOSING_EVENTS = frozenset(
    {
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "Stop",
        "StopFailure",
        "SessionStart",
        "SessionEnd",
        "agent-turn-complete",
    }
)
#: ids are ours (:func:`new_id`); anything else is not a request
_ID = re.compile(r"[0-9a-f]{16}")
#: bounds on what a request keeps of the CLI's payload
MAX_TEXT = 16 * 1024
MAX_SUGGESTIONS = 8
MAX_MESSAGE = 2000
#: how often a waiting hook looks for its answer
POLL = 0.1


def new_id() -> str:
    """A fresh request id: 16 hex digits."""
    return secrets.token_hex(8)


def is_id(value: object) -> bool:
    """Whether ``value`` has the shape of a request id."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def _text(value: object, limit: int = MAX_TEXT) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[:limit] + "\n[... cut]"


def summarize(tool: str, tool_input: object) -> dict[str, str]:
    """What a person needs to decide, from a tool's input: the command and its
    description (shell tools), the file and the change (edit tools), the URL (fetches);
    each text cut at :data:`MAX_TEXT`. Nothing else of the input is kept.

    >>> summarize("Bash", {"command": "rm -rf build", "description": "Clean", "x": 1})
    {'command': 'rm -rf build', 'description': 'Clean'}
    >>> summarize("Edit", {"file_path": "/p/a.py", "old_string": "a", "new_string": "b"})
    {'file_path': '/p/a.py', 'old_string': 'a', 'new_string': 'b'}
    """
    if not isinstance(tool_input, Mapping):
        return {}
    keep = (
        "command",
        "description",
        "file_path",
        "notebook_path",
        "old_string",
        "new_string",
        "content",
        "new_source",
        "url",
        "prompt",
        "query",
        "path",
        "pattern",
    )
    out = {}
    for key in keep:
        text = _text(tool_input.get(key))
        if text is not None:
            out[key] = text
    return out


def _suggestions(value: object) -> list[dict[str, Any]]:
    """The CLI's own "allow from now on" suggestions, as it sent them (a list of JSON
    objects; at most :data:`MAX_SUGGESTIONS`, each at most 4 KiB of JSON)."""
    if not isinstance(value, list):
        return []
    kept = []
    for item in value[:MAX_SUGGESTIONS]:
        if isinstance(item, dict) and len(json.dumps(item)) <= 4096:
            kept.append(item)
    return kept


def describe_suggestion(suggestion: Mapping[str, Any]) -> str:
    """A person's words for one of Claude's permission suggestions.

    >>> describe_suggestion({"type": "addRules", "behavior": "allow",
    ...     "rules": [{"toolName": "Bash", "ruleContent": "touch:*"}],
    ...     "destination": "session"})
    'Allow Bash(touch:*) for this session'
    >>> describe_suggestion({"type": "setMode", "mode": "acceptEdits",
    ...     "destination": "session"})
    'Accept edits for this session'
    """
    if suggestion.get("type") == "acpOption":  # an ACP agent's own "allow always" option
        return str(suggestion.get("name") or "Allow always")[:200]
    where = {
        "session": "for this session",
        "localSettings": "from now on in this project (just you)",
        "projectSettings": "from now on in this project",
        "userSettings": "from now on everywhere",
    }.get(str(suggestion.get("destination")), "from now on")
    if suggestion.get("type") == "setMode":
        mode = str(suggestion.get("mode", ""))
        words = {"acceptEdits": "Accept edits", "bypassPermissions": "Allow everything"}
        return f"{words.get(mode, 'Mode ' + mode)} {where}"
    rules = suggestion.get("rules")
    named = []
    if isinstance(rules, list):
        for rule in rules[:4]:
            if isinstance(rule, Mapping) and isinstance(rule.get("toolName"), str):
                content = rule.get("ruleContent")
                named.append(rule["toolName"] + (f"({content})" if content else ""))
    directories = suggestion.get("directories")
    if not named and isinstance(directories, list):
        named = [f"access to {d}" for d in directories[:4] if isinstance(d, str)]
    verb = "Deny" if suggestion.get("behavior") == "deny" else "Allow"
    return f"{verb} {', '.join(named) or 'this'} {where}"


@dataclasses.dataclass(frozen=True)
class PendingRequest:
    """One permission request while it waits: ``id``; the ``session_id`` whose agent
    asks; ``tool`` (e.g. ``Bash``) and ``summary`` (:func:`summarize`); the CLI's own
    ``suggestions``; ``asked`` and ``until`` (epoch seconds: when it was asked, when
    the hook stops waiting); ``fallback``: what happens then (``dialog``: the CLI shows
    its dialog; ``shown``: its dialog is on screen all along); ``pid``: the hook's."""

    id: str
    session_id: str
    tool: str
    summary: dict[str, str]
    suggestions: list[dict[str, Any]]
    asked: float
    until: float
    fallback: Literal["dialog", "shown"]
    pid: int
    conversation: str | None = None

    @classmethod
    def from_payload(
        cls,
        payload: Mapping[str, Any],
        session_id: str,
        wait: float,
        fallback: Literal["dialog", "shown"],
        now: float,
    ) -> PendingRequest:
        """The request a CLI's ``PermissionRequest`` hook payload makes (Claude's keys,
        or Copilot CLI's ``toolName``, ``toolInput``, ``sessionId``)."""
        tool = _text(payload.get("tool_name") or payload.get("toolName"), 200) or "tool"
        conversation = payload.get("session_id") or payload.get("sessionId")
        return cls(
            id=new_id(),
            session_id=session_id,
            tool=tool,
            summary=summarize(tool, payload.get("tool_input", payload.get("toolInput"))),
            suggestions=_suggestions(payload.get("permission_suggestions")),
            asked=now,
            until=now + wait,
            fallback=fallback,
            pid=os.getpid(),
            conversation=conversation if isinstance(conversation, str) else None,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingRequest:
        """Read back :meth:`to_json` (ValueError for anything else)."""
        try:
            request = cls(
                id=str(data["id"]),
                session_id=str(data["session_id"]),
                tool=str(data["tool"]),
                summary={str(k): str(v) for k, v in dict(data["summary"]).items()},
                suggestions=_suggestions(data.get("suggestions")),
                asked=float(data["asked"]),
                until=float(data["until"]),
                fallback="dialog" if data.get("fallback") == "dialog" else "shown",
                pid=int(data["pid"]),
                conversation=data.get("conversation") or None,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a permission request: {e}") from None
        if not is_id(request.id):
            raise ValueError("not a permission request id")
        return request

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_model(self) -> dict[str, Any]:
        """Its REST model (times in ISO 8601, the suggestions as ``{index, label}``)."""
        from jupyter_agents.core import clock

        return {
            "id": self.id,
            "session_id": self.session_id,
            "tool": self.tool,
            **{k: self.summary.get(k) for k in ("command", "description")},
            "input": self.summary,
            "suggestions": [
                {"index": i, "label": describe_suggestion(s)}
                for i, s in enumerate(self.suggestions)
            ],
            "asked": clock.iso(self.asked),
            "until": clock.iso(self.until),
            "falls_back_to_dialog": self.fallback == "dialog",
        }


@dataclasses.dataclass(frozen=True)
class Answer:
    """How a request ended: ``decision`` (``allow``, ``deny``; or ``closed``,
    ``dialog``: no decision), the ``message`` a denied agent receives, the chosen
    ``suggestion`` (its index), ``by`` whom, ``reason`` (for ``closed``), and when."""

    decision: Decision | Ending
    t: float
    message: str | None = None
    suggestion: int | None = None
    by: str | None = None
    reason: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        decision = data.get("decision")
        if decision not in ("allow", "deny", "closed", "dialog"):
            raise ValueError(f"not an answer: {decision!r}")
        suggestion = data.get("suggestion")
        return cls(
            decision=decision,
            t=float(data.get("t") or 0.0),
            message=_text(data.get("message"), MAX_MESSAGE),
            suggestion=suggestion if isinstance(suggestion, int) else None,
            by=_text(data.get("by"), 200),
            reason=_text(data.get("reason"), 200),
        )


def hook_output(
    request: PendingRequest, answer: Answer, shape: str = "claude"
) -> dict[str, Any] | None:
    """What the hook prints for ``answer`` (the ``PermissionRequest`` decision Claude
    Code and Codex read; with ``shape`` ``"copilot"``, the bare decision Copilot CLI's
    ``permissionRequest`` hook prints); None for no decision (the CLI's dialog decides).

    >>> r = PendingRequest("0" * 16, "s", "Bash", {}, [{"type": "setMode"}], 0, 9, "shown", 1)
    >>> hook_output(r, Answer("allow", 1))["hookSpecificOutput"]["decision"]
    {'behavior': 'allow'}
    >>> hook_output(r, Answer("allow", 1, suggestion=0))["hookSpecificOutput"]["decision"]
    {'behavior': 'allow', 'updatedPermissions': [{'type': 'setMode'}]}
    >>> hook_output(r, Answer("deny", 1, message="no"))["hookSpecificOutput"]["decision"]
    {'behavior': 'deny', 'message': 'no'}
    >>> hook_output(r, Answer("closed", 1)) is None
    True
    >>> hook_output(r, Answer("allow", 1, suggestion=0), "copilot")
    {'behavior': 'allow'}
    """
    if answer.decision == "allow":
        decision: dict[str, Any] = {"behavior": "allow"}
        if answer.suggestion is not None and 0 <= answer.suggestion < len(request.suggestions):
            decision["updatedPermissions"] = [request.suggestions[answer.suggestion]]
    elif answer.decision == "deny":
        decision = {
            "behavior": "deny",
            "message": answer.message or "The user denied this from JupyterLab.",
        }
    else:
        return None
    if shape == "copilot":
        return {k: v for k, v in decision.items() if k != "updatedPermissions"}
    return {"hookSpecificOutput": {"hookEventName": ASKED, "decision": decision}}


def _write_private(path: Path, data: Mapping[str, Any]) -> Path:
    """Write ``data`` as JSON to a new private temporary file beside ``path``."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return tmp


def ended_words(decision: str, reason: str | None) -> str:
    """A person's words for how a request ended: the decision, then its reason.

    >>> ended_words("closed", "answered in the terminal")
    'closed: answered in the terminal'
    >>> ended_words("deny", None)
    'denied'
    """
    words = {
        "allow": "allowed",
        "deny": "denied",
        "dialog": "handed to the agent's own dialog",
        "closed": "closed",
    }.get(decision, decision)
    return f"{words}: {reason}" if reason else words


class RequestFolder:
    """The pending requests of one state dir (module docstring). Safe across processes:
    every change is one rename, link or unlink."""

    #: how many ended requests :meth:`how_ended` remembers
    REMEMBERED = 1000

    def __init__(self, state_dir: Path) -> None:
        self.folder = state_dir / "requests"
        self._ended: dict[str, tuple[str, str | None]] = {}

    def note_ended(self, request_id: object, decision: object, reason: object) -> None:
        """Remember how a request ended (its hook spooled it): its id, decision and
        reason only, the latest :attr:`REMEMBERED` of them."""
        if not is_id(request_id) or not isinstance(decision, str):
            return
        self._ended[str(request_id)] = (decision, reason if isinstance(reason, str) else None)
        while len(self._ended) > self.REMEMBERED:
            del self._ended[next(iter(self._ended))]

    def how_ended(self, request_id: str) -> str | None:
        """A person's words for how the request ended, if it is remembered.

        >>> f = RequestFolder(Path("/nonexistent"))
        >>> f.note_ended("0" * 16, "closed", "answered in the terminal")
        >>> f.how_ended("0" * 16)
        'closed: answered in the terminal'
        """
        found = self._ended.get(request_id)
        return None if found is None else ended_words(*found)

    def decision_of(self, request_id: str) -> str | None:
        """How request ``request_id`` ended, as a decision (``allow``, ``deny``,
        ``closed``, ``dialog``): its answer while its hook has not yet removed it, else
        what :meth:`how_ended` remembers; None for one pending or unknown."""
        answer = self.answer_of(request_id) if is_id(request_id) else None
        if answer is not None:
            return answer.decision
        found = self._ended.get(request_id)
        return None if found is None else found[0]

    def _request(self, request_id: str) -> Path:
        return self.folder / f"{request_id}.json"

    def _answer(self, request_id: str) -> Path:
        return self.folder / f"{request_id}.answer"

    # -- the hook's side ---------------------------------------------------------------

    def add(self, request: PendingRequest) -> None:
        """Make ``request`` pending (whole at once)."""
        ensure_private_dir(self.folder)
        tmp = _write_private(self._request(request.id), request.to_json())
        os.replace(tmp, self._request(request.id))

    def wait(
        self,
        request: PendingRequest,
        parent: int,
        stop: Callable[[], bool] = lambda: False,
        poll: float = POLL,
    ) -> Answer:
        """Wait for ``request``'s answer (blocking: the hook's process): until one is
        made, its file is gone, ``parent`` (the CLI) is no longer this process's parent
        or ``stop()`` says so (a signal came), or its ``until`` passes (then a
        ``dialog`` answer, or ``closed`` when the dialog is shown all along). The
        request's files are removed before it returns."""
        try:
            while True:
                answer = self.answer_of(request.id)
                if answer is not None:
                    return answer
                now = time.time()
                if not self._request(request.id).exists():
                    return Answer("closed", now, reason="the request was withdrawn")
                if os.getppid() != parent or stop():
                    return Answer("closed", now, reason="the agent ended")
                if now >= request.until:
                    if request.fallback == "dialog":
                        return Answer("dialog", now, reason="nobody answered in time")
                    return Answer("closed", now, reason="nobody answered in time")
                time.sleep(poll)
        finally:
            self.remove(request.id)

    def remove(self, request_id: str) -> None:
        """Remove a request's files (its hook ended)."""
        for path in (self._answer(request_id), self._request(request_id)):
            with contextlib.suppress(OSError):
                path.unlink()

    # -- the server's side -------------------------------------------------------------

    def pending(self, session_ids: Sequence[str] | None = None) -> list[PendingRequest]:
        """The requests still waiting (not yet answered), oldest first; of
        ``session_ids`` only when given. Unreadable files are skipped."""
        try:
            names = [p for p in self.folder.iterdir() if p.suffix == ".json"]
        except OSError:
            return []
        requests = []
        for path in names:
            if not is_id(path.stem) or self._answer(path.stem).exists():
                continue
            request = self.get(path.stem)
            if request is not None and (session_ids is None or request.session_id in session_ids):
                requests.append(request)
        return sorted(requests, key=lambda r: r.asked)

    def get(self, request_id: str) -> PendingRequest | None:
        """The request ``request_id`` (answered or not) while its hook waits; else None."""
        if not is_id(request_id):
            return None
        try:
            with self._request(request_id).open("rb") as f:
                data = json.loads(f.read(1 << 20))
            request = PendingRequest.from_json(data)
        except (OSError, ValueError):
            return None
        return request if request.id == request_id else None

    def answer_of(self, request_id: str) -> Answer | None:
        """The answer made to ``request_id``, None while there is none."""
        try:
            with self._answer(request_id).open("rb") as f:
                return Answer.from_json(json.loads(f.read(1 << 16)))
        except (OSError, ValueError):
            return None

    def answer(self, request_id: str, answer: Answer) -> PendingRequest:
        """Answer a pending request, once: :class:`NotFound` for an unknown (or ended)
        one, :class:`Conflict` when it was answered already, :class:`InvalidRequest`
        for a suggestion it does not offer."""
        request = self.get(request_id)
        if request is None:
            raise NotFound(
                f"no pending permission request {request_id!r}: it was answered, "
                "closed, or never existed"
            )
        if answer.suggestion is not None and not (
            0 <= answer.suggestion < len(request.suggestions)
        ):
            raise InvalidRequest(
                f"request {request_id} offers {len(request.suggestions)} suggestions; "
                f"there is no suggestion {answer.suggestion}"
            )
        tmp = _write_private(self._answer(request_id), dataclasses.asdict(answer))
        try:
            os.link(tmp, self._answer(request_id))
        except FileExistsError:
            earlier = self.answer_of(request_id)
            how = ended_words(earlier.decision, earlier.reason) if earlier else "answered"
            raise Conflict(f"permission request {request_id} was {how}") from None
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return request

    def close_before(
        self, session_id: str, t: float, reason: str, conversation: object = None
    ) -> list[PendingRequest]:
        """Close the pending requests of ``session_id`` asked before ``t`` (the hook
        ends without a decision), of ``conversation`` only when it is given (an event
        of another thread, e.g. Codex's title thread, closes nothing); those closed."""
        closed = []
        for request in self.pending([session_id]):
            other = (
                isinstance(conversation, str)
                and request.conversation is not None
                and conversation != request.conversation
            )
            if request.asked < t and not other:
                with contextlib.suppress(NotFound, Conflict):
                    closed.append(self.answer(request.id, Answer("closed", t, reason=reason)))
        return closed

    def close_session(self, session_id: str, reason: str) -> list[PendingRequest]:
        """Close every pending request of ``session_id``."""
        return self.close_before(session_id, float("inf"), reason)

    def sweep(self, alive: Any = None) -> int:
        """Remove requests whose hook is gone (its pid no longer runs): left by a hook
        killed with its CLI. ``alive(pid)`` tells (default: signal 0). How many."""

        def running(pid: int) -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            except OSError:
                return True
            return True

        check = alive or running
        removed = 0
        try:
            paths = list(self.folder.glob("*.json"))
        except OSError:
            return 0
        for path in paths:
            request = self.get(path.stem)
            if request is not None and not check(request.pid):
                self.remove(request.id)
                removed += 1
        return removed


def answer_from(body: Mapping[str, Any], by: str | None, now: float) -> Answer:
    """A person's answer from a REST body ``{decision, message?, suggestion?}``;
    :class:`InvalidRequest` for anything malformed."""
    decision = body.get("decision")
    if decision not in ("allow", "deny"):
        raise InvalidRequest('"decision" must be "allow" or "deny"')
    message = body.get("message")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidRequest('"message" must be a string')
        if len(message) > MAX_MESSAGE:
            raise InvalidRequest(f'"message" is longer than {MAX_MESSAGE} characters')
        if decision == "allow":
            raise InvalidRequest('"message" goes with "deny" only')
        if any(ord(c) < 32 and c not in "\n\t" for c in message):
            raise InvalidRequest('"message" has control characters')
    suggestion = body.get("suggestion")
    if suggestion is not None:
        if not isinstance(suggestion, int) or isinstance(suggestion, bool):
            raise InvalidRequest('"suggestion" must be the index of one the request offers')
        if decision != "allow":
            raise InvalidRequest('"suggestion" goes with "allow" only')
    unknown = set(body) - {"decision", "message", "suggestion"}
    if unknown:
        raise InvalidRequest(f"unknown fields: {', '.join(sorted(unknown))}")
    return Answer(decision, now, message=message or None, suggestion=suggestion, by=by)
