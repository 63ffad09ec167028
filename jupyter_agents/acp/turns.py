"""An ACP session's turn events (:mod:`jupyter_agents.agents.turns`), read from its
journal (:mod:`jupyter_agents.acp.journal`): the shape is ACP's own ``session/update``,
so this is mostly a renaming.

- a client's ``session/prompt``: ``user_message`` (its text blocks);
- ``user_message_chunk``, ``agent_message_chunk``, ``agent_thought_chunk``:
  ``user_message``, ``agent_message``, ``thought``, each with ``chunk`` true (a
  reader joins consecutive chunks of one message);
- ``tool_call``, and the call a ``session/request_permission`` asks about (an agent
  may announce it only there; one it announced before comes again with its id, which a
  reader takes as an update): ``tool_call`` (its ``title`` as the tool, ``kind`` as
  ``tool_kind``,
  ``rawInput`` as ``input``, ``locations``); a ``tool_call_update`` that ends the call
  (``completed`` or ``failed``): ``tool_call_update`` with its content's text as
  ``output``; one that does not: ``tool_call`` again with its new status;
- ``plan``: ``plan``, the whole plan;
- the agent's answer to a prompt (a result with a ``stopReason``): ``turn_end`` (with
  ``stop_reason``);
- any other update: ``other`` with its ``sessionUpdate`` as ``raw_type``.

The proxy's own records and the set-up's messages make no event. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jupyter_agents.agents.markdown import one_line
from jupyter_agents.agents.turns import (
    TurnType,
    cut,
    other,
    plan,
    result,
    said,
    text_of,
    turn_event,
)

#: ACP's tool kinds (a tool call of another is ``other``)
TOOL_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}
)


def _text(blocks: object) -> str:
    """The text of a content block, or of a list of them."""
    if isinstance(blocks, Mapping):
        blocks = [blocks]
    if not isinstance(blocks, list):
        return ""
    parts = []
    for block in blocks:
        if isinstance(block, Mapping):
            inner = block.get("content") if block.get("type") == "content" else block
            if isinstance(inner, Mapping) and isinstance(inner.get("text"), str):
                parts.append(inner["text"])
    return "".join(parts)


def _locations(value: object) -> list[dict[str, Any]]:
    out = []
    for where in value if isinstance(value, list) else []:
        if isinstance(where, Mapping) and isinstance(where.get("path"), str):
            line = where.get("line")
            out.append({"path": where["path"], **({"line": line} if isinstance(line, int) else {})})
    return out[:20]


class AcpTurns:
    """The turn events of one journal record (the ``turns`` of an ACP session's kind;
    each record alone: a page may start anywhere)."""

    def links(self, record: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """None: a journal is in the order the messages went."""
        return None, None

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        message = record.get("msg")
        if not isinstance(message, Mapping):
            return
        side, method = record.get("from"), message.get("method")
        found = message.get("params")
        params: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        if side == "client" and method == "session/prompt":
            yield said(True, None, cut(_text(params.get("prompt")))[0])
            return
        answer = message.get("result")
        if side == "agent" and method is None and isinstance(answer, Mapping):
            if "stopReason" in answer:  # (only a prompt's answer has one)
                yield turn_event("turn_end", None, stop_reason=str(answer["stopReason"]))
            return
        if side == "agent" and method == "session/request_permission":
            # the call it asks about, which an agent may not have announced (Gemini CLI
            # 0.61 sends no tool_call for one that needs permission)
            call = params.get("toolCall")
            if isinstance(call, Mapping):
                yield from _update({**call, "sessionUpdate": "tool_call"})
            return
        if side != "agent" or method != "session/update":
            return
        update = params.get("update")
        if isinstance(update, Mapping):
            yield from _update(update)


def _update(update: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    what = update.get("sessionUpdate")
    chunks: dict[object, TurnType] = {
        "user_message_chunk": "user_message",
        "agent_message_chunk": "agent_message",
        "agent_thought_chunk": "thought",
    }
    if what in chunks:
        text, was_cut = cut(_text(update.get("content")))
        yield turn_event(chunks[what], None, text=text, chunk=True, **_cut(was_cut))
    elif what == "tool_call" or (
        what == "tool_call_update" and update.get("status") not in ("completed", "failed")
    ):
        kind = update.get("kind")
        title = update.get("title")
        fields: dict[str, Any] = {
            "tool_call_id": str(update.get("toolCallId")),
            "status": str(update.get("status") or "pending"),
        }
        if what == "tool_call":
            fields["tool"] = one_line(str(title or kind or "tool"), 200)
            fields["title"] = fields["tool"]
            fields["tool_kind"] = kind if kind in TOOL_KINDS else "other"
            fields["input"] = update.get("rawInput")
            fields["locations"] = _locations(update.get("locations"))
        else:  # an update says only what changed: a reader keeps the rest
            if title is not None:
                fields["tool"] = fields["title"] = one_line(str(title), 200)
            if kind in TOOL_KINDS:
                fields["tool_kind"] = kind
            if "rawInput" in update:
                fields["input"] = update.get("rawInput")
            if "locations" in update:
                fields["locations"] = _locations(update.get("locations"))
        yield turn_event("tool_call", None, **fields)
    elif what == "tool_call_update":
        output = _text(update.get("content"))
        raw = update.get("rawOutput")
        yield result(
            None,
            update.get("toolCallId"),
            output or ("" if raw is None else text_of(raw)),
            failed=update.get("status") == "failed",
        )
    elif what == "plan":
        entries = update.get("entries") if isinstance(update.get("entries"), list) else []
        assert isinstance(entries, list)
        yield plan(
            None,
            [(e.get("content"), e.get("status")) for e in entries if isinstance(e, Mapping)],
        )
    else:
        yield other(None, what)


def _cut(was_cut: bool) -> dict[str, Any]:
    return {"cut": True} if was_cut else {}
