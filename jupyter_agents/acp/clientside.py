"""The part of an ACP client the proxy (:mod:`jupyter_agents.acp.proxy`) plays itself,
so that none of it waits for a Jupyter server: a server may be gone for a minute or a
week while the agent runs on.

- **Set-up.** At start it sends ``initialize`` (offering the client tools ``tools``
  allows; by default none: ``fs.readTextFile``, ``fs.writeTextFile`` and ``terminal``
  false) and then ``session/new``; with a conversation id to go on (a restore after a
  reboot), ``session/resume`` where the agent offers it (``sessionCapabilities.resume``),
  else ``session/load`` (``loadSession``), else ``session/new``, and the journal's
  ``ready`` record says which and why. Its own requests' ids are ``"proxy-<n>"``.
- **Permission requests.** An agent's ``session/request_permission`` becomes a pending
  request of the session (:mod:`jupyter_agents.agents.permissions`, as a hook's does):
  listed and answered wherever Lab, the CLI or a phone answers requests, kept while no
  server runs. The answer goes back as the option it names: the ``allow_always``
  options are the request's suggestions; a plain allow is the first ``allow_once``
  option, a deny the first ``reject_once`` one; a request closed or timed out is
  ``cancelled``.
- **Client tools.** ``fs/*`` and ``terminal/*`` requests are refused (JSON-RPC
  ``-32601``, saying so and naming the setting) unless ``tools`` allows them: the agent
  has its own tools in its working directory, and a client that runs commands for an
  agent is a hole beside them. Allowed ones are done by
  :class:`~jupyter_agents.acp.tools.ClientTools`, confined to ``cwd``, each in a task
  of its own (a ``terminal/wait_for_exit`` waits without holding up the rest); a
  person is not asked again (the agent asks its own permission before its tools, as
  without them). Any other request of the agent's that no client method answers gets
  ``-32601``.
- **Attention.** What a session's hooks would spool is spooled here
  (:mod:`jupyter_agents.agents.spool`): ``SessionStart`` with the conversation id once
  the ACP session is ready, ``UserPromptSubmit`` when a client sends a prompt, ``Stop``
  when the agent answers it (``StopFailure`` for a refusal or an error),
  ``PermissionRequest`` and ``PermissionEnded`` around a request.

Every message it sends goes through ``send`` (the proxy journals it as the client's).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from jupyter_agents.acp.tools import INTERNAL_ERROR, METHOD_NOT_FOUND, ClientTools, ToolError
from jupyter_agents.agents import permissions
from jupyter_agents.agents.permissions import Answer, PendingRequest, RequestFolder
from jupyter_agents.agents.spool import append, spool_path

Message = dict[str, Any]

#: the ACP protocol version we speak
PROTOCOL_VERSION = 1
#: how long a permission request waits for a person before it is cancelled (seconds)
ASK_WAIT = 24 * 3600.0
#: how many tool calls (their latest title, kind and input) are remembered for the
#: permission requests that name them
KEPT_CALLS = 256


class ClientSide:
    """The proxy's client part for one agent (module docstring). ``send`` passes a
    message to the agent; ``state_dir`` and ``session_id`` say where the session's
    pending requests and spool are (None: a bare proxy, as in a test of its own);
    ``cwd`` is the ACP session's; ``resume`` the conversation id to go on with;
    ``tools`` the client tools allowed (of :data:`~jupyter_agents.acp.tools.TOOLS`)."""

    def __init__(
        self,
        send: Callable[[Message], None],
        cwd: str,
        state_dir: Path | None = None,
        session_id: str | None = None,
        resume: str | None = None,
        ask_wait: float = ASK_WAIT,
        on_ready: Callable[[Mapping[str, Any]], None] = lambda ready: None,
        tools: Collection[str] = (),
    ) -> None:
        self._send = send
        self.cwd = cwd
        self.tools = ClientTools(cwd, tools)
        self._tool_calls: set[asyncio.Task[None]] = set()
        self.session_id = session_id
        self.resume = resume
        self.ask_wait = ask_wait
        self.on_ready = on_ready
        self.requests = None if state_dir is None else RequestFolder(state_dir)
        self._spool = (
            None if state_dir is None or session_id is None else spool_path(state_dir, session_id)
        )
        self._n = 0
        self._mine: dict[str, str] = {}  # our request ids -> their method
        self._asked: dict[str, tuple[object, PendingRequest, list[Mapping[str, Any]]]] = {}
        self._prompts: set[str] = set()  # the clients' prompts in flight (their ids)
        self._calls: dict[str, dict[str, Any]] = {}  # tool call id -> what was said of it
        self.capabilities: Mapping[str, Any] = {}
        self.conversation: str | None = None
        self._ready_note: str | None = None  # why it did not go on as asked

    # -- set-up ------------------------------------------------------------------------

    def start(self) -> None:
        """Send ``initialize``; the rest follows the agent's answers."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": self.tools.capabilities(),
        }
        self._request("initialize", params)

    def _request(self, method: str, params: Mapping[str, Any]) -> None:
        self._n += 1
        request_id = f"proxy-{self._n}"
        self._mine[request_id] = method
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})

    def _answered(self, method: str, message: Message) -> None:
        """The agent's answer to one of our requests."""
        result = message.get("result")
        if method == "initialize":
            caps = result.get("agentCapabilities") if isinstance(result, dict) else None
            self.capabilities = caps if isinstance(caps, dict) else {}
            self._open_session()
            return
        how = {"session/new": "new", "session/resume": "resumed", "session/load": "loaded"}
        if method not in how:
            return
        if "error" in message or not isinstance(result, dict):
            error = message.get("error")
            why = error.get("message") if isinstance(error, dict) else "no result"
            if method != "session/new":  # could not go on: a new conversation, saying why
                self._ready_note = f"could not {method[8:]} {self.resume}: {why}"
                self._request("session/new", {"cwd": self.cwd, "mcpServers": []})
                return
            self.on_ready({"how": "failed", "why": str(why)})
            return
        cid = self.resume if method != "session/new" else result.get("sessionId")
        self.conversation = cid if isinstance(cid, str) else None
        ready = {"how": how[method], "sessionId": self.conversation}
        if self._ready_note:
            ready["why"] = self._ready_note
        self.on_ready(ready)
        start = "resume" if method != "session/new" else "startup"
        note = None if self._ready_note is None else f"{self._ready_note}; a new conversation began"
        self._spool_event("SessionStart", source=start, **({"note": note} if note else {}))

    def _open_session(self) -> None:
        base = {"cwd": self.cwd, "mcpServers": []}
        if self.resume:
            session = self.capabilities.get("sessionCapabilities")
            if isinstance(session, dict) and session.get("resume") is not None:
                self._request("session/resume", {**base, "sessionId": self.resume})
                return
            if self.capabilities.get("loadSession"):
                self._request("session/load", {**base, "sessionId": self.resume})
                return
            self._ready_note = f"the agent offers neither resume nor load of {self.resume}"
        self._request("session/new", base)

    # -- messages ----------------------------------------------------------------------

    def on_agent(self, message: Message) -> None:
        """A message the agent wrote (a JSON object)."""
        request_id = message.get("id")
        method = message.get("method")
        if method is None:  # a response
            key = json.dumps(request_id)
            if isinstance(request_id, str) and request_id in self._mine:
                self._answered(self._mine.pop(request_id), message)
            elif key in self._prompts:
                self._prompts.discard(key)
                result = message.get("result")
                stop = result.get("stopReason") if isinstance(result, dict) else None
                if "error" in message or stop == "refusal":
                    error = message.get("error")
                    what = error.get("message") if isinstance(error, dict) else stop
                    self._spool_event("StopFailure", error=str(what)[:80])
                else:
                    self._spool_event("Stop")
            return
        if "id" not in message:
            if method == "session/update":
                self._note_call(message.get("params"))
            return  # a notification: the journal has it
        if method == "session/request_permission":
            self._ask(request_id, message.get("params"))
            return
        if isinstance(method, str) and self.tools.offers(method):
            call = asyncio.get_running_loop().create_task(
                self._use_tool(request_id, method, message.get("params"))
            )
            self._tool_calls.add(call)
            call.add_done_callback(self._tool_calls.discard)
            return
        client_tool = (
            isinstance(method, str)
            and method.startswith(("fs/", "terminal/"))
            and method.split("/")[0] not in self.tools.allowed
        )
        why = (
            f"{method} is turned off: jupyter-agents runs no files or commands for an agent "
            "unless c.AgentsApp.acp_client_tools allows it (use your own tools in your "
            "working directory)"
            if client_tool
            else f"{method} is not a client method jupyter-agents offers"
        )
        self._error(request_id, METHOD_NOT_FOUND, why)

    async def _use_tool(self, request_id: object, method: str, params: object) -> None:
        """Answer the agent's request of an allowed client tool."""
        try:
            result = await self.tools.call(method, params)
        except ToolError as e:
            self._error(request_id, e.code, e.message)
            return
        except Exception as e:  # (a bug of ours: the agent is not left waiting)
            self._error(request_id, INTERNAL_ERROR, f"{method} failed: {e!r}")
            return
        self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _error(self, request_id: object, code: int, why: str) -> None:
        self._send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": why}})

    def on_client(self, message: Message) -> None:
        """A message a client sent the agent (the proxy passes it on)."""
        if message.get("method") == "session/prompt" and "id" in message:
            self._prompts.add(json.dumps(message["id"]))
            self._spool_event("UserPromptSubmit")

    # -- permission requests -----------------------------------------------------------

    def _note_call(self, params: object) -> None:
        """Keep what a ``tool_call`` or ``tool_call_update`` says of its call."""
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or update.get("sessionUpdate") not in (
            "tool_call",
            "tool_call_update",
        ):
            return
        call_id = str(update.get("toolCallId"))
        known = self._calls.pop(call_id, {})
        said = {k: update[k] for k in ("title", "kind", "rawInput") if update.get(k) is not None}
        self._calls[call_id] = {**known, **said}
        while len(self._calls) > KEPT_CALLS:
            del self._calls[next(iter(self._calls))]

    def _ask(self, request_id: object, params: object) -> None:
        given: dict[str, Any] = params if isinstance(params, dict) else {}
        found = given.get("toolCall")
        asked: dict[str, Any] = found if isinstance(found, dict) else {}
        # (an update names only what changed: the call's title and input may have come
        # with its start)
        call = {**self._calls.get(str(asked.get("toolCallId")), {}), **asked}
        options: list[Mapping[str, Any]] = [
            o for o in given.get("options") or [] if isinstance(o, dict)
        ]
        if self.requests is None or self.session_id is None:
            self._respond(request_id, {"outcome": "cancelled"})
            return
        raw = call.get("rawInput")
        title = str(call.get("title") or call.get("kind") or "tool")
        payload = {
            "tool_name": title,
            "tool_input": raw if isinstance(raw, dict) else {"description": title},
            "session_id": self.conversation,
            "permission_suggestions": [
                {"type": "acpOption", "optionId": o.get("optionId"), "name": o.get("name")}
                for o in options
                if o.get("kind") == "allow_always"
            ],
        }
        request = PendingRequest.from_payload(
            payload, self.session_id, self.ask_wait, "shown", time.time()
        )
        try:
            self.requests.add(request)
        except OSError:
            self._respond(request_id, {"outcome": "cancelled"})
            return
        self._asked[request.id] = (request_id, request, options)
        self._spool_event("PermissionRequest", request=request.id, tool=request.tool[:80])

    def poll(self) -> bool:
        """Answer the agent's requests that got an answer, were withdrawn or timed out;
        whether any is still waiting."""
        assert self.requests is not None or not self._asked
        for pending_id, (request_id, request, options) in list(self._asked.items()):
            assert self.requests is not None
            answer = self.requests.answer_of(pending_id)
            now = time.time()
            if answer is None and not self.requests.get(pending_id):
                answer = Answer("closed", now, reason="the request was withdrawn")
            if answer is None and now >= request.until:
                answer = Answer("closed", now, reason="nobody answered in time")
            if answer is None:
                continue
            del self._asked[pending_id]
            self.requests.remove(pending_id)
            self._respond(request_id, outcome(answer, request, options))
            self._spool_event(
                permissions.ENDED,
                request=pending_id,
                decision=answer.decision,
                reason=answer.reason,
            )
        return bool(self._asked)

    def close(self, reason: str = "the agent ended") -> None:
        """The agent is gone: its requests are closed and removed, its terminals'
        process groups ended, its client tools' calls cancelled."""
        self.tools.close()
        for call in self._tool_calls:
            call.cancel()
        for pending_id in list(self._asked):
            assert self.requests is not None
            self.requests.remove(pending_id)
            self._spool_event(
                permissions.ENDED, request=pending_id, decision="closed", reason=reason
            )
        self._asked.clear()

    def _respond(self, request_id: object, result_outcome: Mapping[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "id": request_id, "result": {"outcome": result_outcome}})

    def _spool_event(self, event: str, **fields: Any) -> None:
        if self._spool is None:
            return
        record = {"t": time.time(), "event": event, "conversation": self.conversation}
        append(self._spool, {**record, **fields})


def outcome(
    answer: Answer, request: PendingRequest, options: list[Mapping[str, Any]]
) -> dict[str, Any]:
    """The ACP outcome for a person's ``answer`` to ``request``, among the agent's
    ``options`` (module docstring).

    >>> opts = [{"optionId": "a", "kind": "allow_once"},
    ...         {"optionId": "A", "kind": "allow_always"}, {"optionId": "r", "kind": "reject_once"}]
    >>> always = [{"type": "acpOption", "optionId": "A"}]
    >>> r = PendingRequest("0" * 16, "s", "t", {}, always, 0, 9, "shown", 1)
    >>> outcome(Answer("allow", 1), r, opts), outcome(Answer("allow", 1, suggestion=0), r, opts)
    ({'outcome': 'selected', 'optionId': 'a'}, {'outcome': 'selected', 'optionId': 'A'})
    >>> outcome(Answer("deny", 1), r, opts), outcome(Answer("closed", 1), r, opts)
    ({'outcome': 'selected', 'optionId': 'r'}, {'outcome': 'cancelled'})
    """
    index = answer.suggestion
    if answer.decision == "allow" and index is not None and 0 <= index < len(request.suggestions):
        chosen = request.suggestions[index].get("optionId")
        if isinstance(chosen, str):
            return {"outcome": "selected", "optionId": chosen}
    kinds = {
        "allow": ("allow_once", "allow_always"),
        "deny": ("reject_once", "reject_always"),
    }.get(answer.decision, ())
    for kind in kinds:
        for option in options:
            if option.get("kind") == kind and isinstance(option.get("optionId"), str):
                return {"outcome": "selected", "optionId": option["optionId"]}
    return {"outcome": "cancelled"}
