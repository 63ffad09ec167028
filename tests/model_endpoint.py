"""A scripted model endpoint on 127.0.0.1, so a real agent CLI completes whole turns
offline (docs/development.md): it answers the CLI's model requests from a script,
records every request, and tells what usage it sent.

One HTTP server (:class:`ModelEndpoint`, stdlib, in a thread) speaks one provider's
wire format (a :class:`Provider`): :class:`AnthropicMessages` is the Anthropic Messages
API with SSE streaming, what Claude Code calls (``POST /v1/messages?beta=true``);
:class:`OpenAIResponses` is OpenAI's Responses API, what Codex calls with ``wire_api =
"responses"`` (``POST /v1/responses``; it makes no other request of the endpoint). The
script, the request log and the usage bookkeeping are the same for both.

The script is a list of :class:`Reply`, one per model request of a turn: a reply with a
:class:`ToolCall` makes the CLI run the tool and ask again with its result, which takes
the next reply. Side requests (Claude's title request, sent with ``tools: []``) never
take a script entry: they get :attr:`ModelEndpoint.title` (Codex's title request asks
for JSON ``{"title": ...}`` too). A request that finds the script used up gets a plain
text reply, and :attr:`ModelEndpoint.overrun` counts it.

A streamed reply with a tool call, as the CLI reads it:

>>> import urllib.request
>>> script = [Reply("Checking.", tool=bash("ls"), usage=Usage(10, 5))]
>>> with ModelEndpoint(AnthropicMessages(), script) as endpoint:
...     ask = {"model": "m", "stream": True, "messages": [], "tools": [{"name": "Bash"}]}
...     url = endpoint.base_url + "/v1/messages?beta=true"
...     with urllib.request.urlopen(url, json.dumps(ask).encode()) as r:
...         lines = r.read().decode().splitlines()
...     sent = endpoint.sent_usage()
>>> [line[7:] for line in lines if line.startswith("event: ") and "ping" not in line]
... # doctest: +NORMALIZE_WHITESPACE
['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop',
 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta',
 'message_stop']
>>> sent, endpoint.requests[0].reply.tool.name
(Usage(input=10, output=5, cache_read=0, cache_creation=0), 'Bash')
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Usage:
    """Tokens of one model reply, by kind (disjoint, as the ledger counts them)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0

    def __add__(self, other: Usage) -> Usage:
        mine, theirs = dataclasses.astuple(self), dataclasses.astuple(other)
        return Usage(*(a + b for a, b in zip(mine, theirs, strict=True)))

    def as_tokens(self) -> dict[str, int]:
        """As the REST API's ``Tokens`` object."""
        return {
            "input": self.input,
            "output": self.output,
            "cache_creation": self.cache_creation,
            "cache_read": self.cache_read,
            "total": self.input + self.output + self.cache_creation + self.cache_read,
        }


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A tool the model asks the CLI to run (``input`` as the tool's schema wants it)."""

    name: str
    input: Mapping[str, Any]


def bash(command: str, description: str = "Run a command") -> ToolCall:
    """Claude Code's Bash tool running ``command``."""
    return ToolCall("Bash", {"command": command, "description": description})


@dataclasses.dataclass(frozen=True)
class Reply:
    """One model reply: ``text`` (may be empty when there is a tool call), then at most
    one tool call; ``usage`` is what the endpoint reports for it."""

    text: str = ""
    tool: ToolCall | None = None
    usage: Usage = Usage(input=1200, output=40, cache_read=300, cache_creation=20)
    #: the model it names (None: the model the request asked for)
    model: str | None = None


@dataclasses.dataclass
class Request:
    """A request the endpoint got, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: the conversation it belongs to, as the CLI names it (None: not named)
    conversation: str | None = None
    #: a side request (a title), answered outside the script
    side: bool = False
    #: the reply sent (None: not a model request, answered 404)
    reply: Reply | None = None
    #: the id of the message sent
    message_id: str | None = None
    t: float = dataclasses.field(default_factory=time.time)

    def text(self) -> str:
        """The request body as JSON text, to look for what the CLI sent."""
        return json.dumps(self.body)


class Provider:
    """One provider's wire format: which requests are model requests, which of them are
    side requests, and how a reply is written."""

    #: the path (without query) of its model requests
    path = ""

    def handles(self, path: str) -> bool:
        """Whether a POST to ``path`` (without query) is one of its model requests."""
        return path == self.path

    def with_path(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with what the request's ``path`` (and query) tells that its reply
        depends on (the Gemini API names the model and streaming there); by default the
        body as sent. :attr:`Request.body` keeps the body as sent."""
        return body

    def is_side_request(self, body: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def conversation(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """The conversation id the CLI names in a request, if any."""
        return None

    def write(self, out: Callable[[bytes], object], reply: Reply, body: Mapping[str, Any]) -> str:
        """Write ``reply`` to a request with ``body`` (headers are sent); the message id."""
        raise NotImplementedError

    def content_type(self, body: Mapping[str, Any]) -> str:
        return "text/event-stream" if body.get("stream") else "application/json"


class AnthropicMessages(Provider):
    """The Anthropic Messages API, streamed as server-sent events when the request asks
    for ``stream`` (message_start, content_block_start/delta/stop per block,
    message_delta with the stop reason and usage, message_stop), else one JSON message.
    message_start carries the input side of the usage and one output token, message_delta
    the whole usage (as the API does)."""

    path = "/v1/messages"

    def is_side_request(self, body: Mapping[str, Any]) -> bool:
        """Claude Code's title request (sent with ``tools: []``), and the prompt
        suggestion it makes after a turn when asked to (``claude-agent-acp`` asks): its
        tools are the turn's, its last message starts ``[SUGGESTION MODE:``."""
        messages = body.get("messages")
        last = json.dumps(messages[-1]) if isinstance(messages, list) and messages else ""
        return body.get("tools") == [] or "[SUGGESTION MODE:" in last

    def conversation(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """Claude Code names its conversation (its ``--session-id``) in a header."""
        return headers.get("X-Claude-Code-Session-Id")

    @staticmethod
    def usage(usage: Usage, output: int) -> dict[str, int]:
        return {
            "input_tokens": usage.input,
            "cache_creation_input_tokens": usage.cache_creation,
            "cache_read_input_tokens": usage.cache_read,
            "output_tokens": output,
        }

    def blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.text or reply.tool is None:
            blocks.append({"type": "text", "text": reply.text})
        if reply.tool is not None:
            tool_id = "toolu_" + uuid.uuid4().hex[:24]
            blocks.append(
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": reply.tool.name,
                    "input": reply.tool.input,
                }
            )
        return blocks

    def write(self, out: Callable[[bytes], object], reply: Reply, body: Mapping[str, Any]) -> str:
        message_id = "msg_" + uuid.uuid4().hex[:24]
        blocks = self.blocks(reply)
        stop = "tool_use" if reply.tool is not None else "end_turn"
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model") or "claude-sonnet-4-5",
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self.usage(reply.usage, reply.usage.output),
        }
        if not body.get("stream"):
            out(json.dumps(message).encode())
            return message_id

        def event(name: str, data: Mapping[str, Any]) -> None:
            out(f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode())

        start = {**message, "content": [], "stop_reason": None, "usage": self.usage(reply.usage, 1)}
        event("message_start", {"message": start})
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                event(
                    "content_block_start", {"index": index, "content_block": {**block, "text": ""}}
                )
                event("ping", {})
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                empty = {**block, "input": {}}
                event("content_block_start", {"index": index, "content_block": empty})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            event("content_block_delta", {"index": index, "delta": delta})
            event("content_block_stop", {"index": index})
        event(
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": self.usage(reply.usage, reply.usage.output),
            },
        )
        event("message_stop", {})
        return message_id


class OpenAIResponses(Provider):
    """OpenAI's Responses API as Codex calls it (``wire_api = "responses"``, ``POST
    /v1/responses``), streamed as server-sent events: response.created, then per output
    item (a ``message`` with the text, a ``function_call`` for the tool)
    response.output_item.added, response.output_text.delta for text, and
    response.output_item.done; last response.completed with the usage. Codex reads
    the items from output_item.done and the usage from response.completed only.

    Usage maps to the API's cumulative counts: ``input_tokens`` holds the cached ones
    (``input_tokens_details.cached_tokens`` = cache_read, ``cache_write_tokens`` =
    cache_creation), ``output_tokens`` = output (no reasoning tokens). Codex 0.171 adds
    them up as such in its rollout's ``token_count`` (``input_tokens``,
    ``cached_input_tokens``, ``cache_write_input_tokens``, ``output_tokens``).

    >>> import urllib.request
    >>> script = [Reply("Running.", tool=codex_shell("ls"), usage=Usage(10, 5, 3))]
    >>> with ModelEndpoint(OpenAIResponses(), script) as endpoint:
    ...     ask = {"model": "m", "stream": True, "input": [], "prompt_cache_key": "t-1"}
    ...     url = endpoint.base_url + "/v1/responses"
    ...     with urllib.request.urlopen(url, json.dumps(ask).encode()) as r:
    ...         data = [json.loads(line[6:]) for line in r.read().decode().splitlines()
    ...                 if line.startswith("data: ")]
    >>> [d["item"]["type"] for d in data if d["type"] == "response.output_item.done"]
    ['message', 'function_call']
    >>> data[-1]["type"], data[-1]["response"]["usage"]["input_tokens"]
    ('response.completed', 13)
    >>> endpoint.sent_usage("t-1"), endpoint.requests[0].reply.tool.name
    (Usage(input=10, output=5, cache_read=3, cache_creation=0), 'exec_command')
    """

    path = "/v1/responses"

    @staticmethod
    def turn_metadata(body: Mapping[str, Any]) -> dict[str, Any]:
        """What Codex tells of the turn (``client_metadata["x-codex-turn-metadata"]``, a
        JSON text, also sent as a header): ``thread_id``, ``turn_id``,
        ``thread_source`` ("user", or "thread_title" for a title), ``sandbox_mode``..."""
        meta = body.get("client_metadata")
        text = meta.get("x-codex-turn-metadata") if isinstance(meta, Mapping) else None
        try:
            parsed = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def is_side_request(self, body: Mapping[str, Any]) -> bool:
        """Codex asks for a thread's title in a thread of its own (it has tools too):
        its turn metadata names ``thread_source`` "thread_title"."""
        return self.turn_metadata(body).get("thread_source") == "thread_title"

    def conversation(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """Codex names its thread (the rollout's id, ``codex resume <id>``) as the
        body's ``prompt_cache_key``, and in ``session-id`` and ``thread-id`` headers."""
        key = body.get("prompt_cache_key")
        if isinstance(key, str) and key:
            return key
        lower = {name.lower(): value for name, value in headers.items()}
        return lower.get("thread-id") or lower.get("session-id")

    @staticmethod
    def usage(usage: Usage) -> dict[str, Any]:
        prompt = usage.input + usage.cache_read + usage.cache_creation
        return {
            "input_tokens": prompt,
            "input_tokens_details": {
                "cached_tokens": usage.cache_read,
                "cache_write_tokens": usage.cache_creation,
            },
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + usage.output,
        }

    def items(self, reply: Reply) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.text or reply.tool is None:
            items.append(
                {
                    "type": "message",
                    "id": "msg_" + uuid.uuid4().hex[:24],
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        if reply.tool is not None:
            items.append(
                {
                    "type": "function_call",
                    "id": "fc_" + uuid.uuid4().hex[:24],
                    "status": "completed",
                    "call_id": "call_" + uuid.uuid4().hex[:24],
                    "name": reply.tool.name,
                    "arguments": json.dumps(reply.tool.input),
                }
            )
        return items

    def write(self, out: Callable[[bytes], object], reply: Reply, body: Mapping[str, Any]) -> str:
        response_id = "resp_" + uuid.uuid4().hex[:24]
        items = self.items(reply)
        response = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": reply.model or body.get("model") or "gpt-5",
            "output": [],
            "usage": None,
        }
        done = {
            **response,
            "status": "completed",
            "output": items,
            "usage": self.usage(reply.usage),
        }
        if not body.get("stream"):
            out(json.dumps(done).encode())
            return response_id
        sequence = iter(range(1_000_000))

        def event(name: str, data: Mapping[str, Any]) -> None:
            data = {"type": name, "sequence_number": next(sequence), **data}
            out(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        event("response.created", {"response": response})
        for index, item in enumerate(items):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                started = {**item, "status": "in_progress", "content": []}
                event("response.output_item.added", {"output_index": index, "item": started})
                part = {"type": "output_text", "text": "", "annotations": []}
                where = {"item_id": item["id"], "output_index": index, "content_index": 0}
                event("response.content_part.added", {**where, "part": part})
                event("response.output_text.delta", {**where, "delta": text})
                event("response.output_text.done", {**where, "text": text})
                event("response.content_part.done", {**where, "part": item["content"][0]})
            else:
                started = {**item, "status": "in_progress", "arguments": ""}
                event("response.output_item.added", {"output_index": index, "item": started})
                where = {"item_id": item["id"], "output_index": index}
                event(
                    "response.function_call_arguments.delta", {**where, "delta": item["arguments"]}
                )
                event(
                    "response.function_call_arguments.done",
                    {**where, "arguments": item["arguments"]},
                )
            event("response.output_item.done", {"output_index": index, "item": item})
        event("response.completed", {"response": done})
        return response_id


class OpenAIChat(Provider):
    """OpenAI's chat completions API (``POST /v1/chat/completions``: what an
    OpenAI-compatible client calls with a base URL ending in ``/v1``, as Qwen Code's
    ``OPENAI_BASE_URL``), streamed as ``data: {chat.completion.chunk}`` lines ending with
    ``data: [DONE]``: a chunk with ``delta.role`` and ``delta.content`` (the text), one
    with ``delta.tool_calls`` (index, id, ``function.name``, JSON ``function.arguments``,
    whole), one with ``finish_reason`` ("tool_calls" or "stop"), then, when the request
    asks ``stream_options.include_usage``, a chunk with ``choices: []`` and the usage.
    Without ``stream``: one ``chat.completion`` object with the usage.

    Usage maps to the API's counts: ``prompt_tokens`` holds the cached ones
    (``prompt_tokens_details.cached_tokens`` = cache_read), ``completion_tokens`` =
    output. The API has no count of cache writes: cache_creation is sent inside
    ``prompt_tokens`` (a client sees it as uncached input), so script ``Usage`` without
    it when comparing with what a CLI records.

    Side requests are those without ``tools`` (a title, a JSON check): a CLI's turn
    sends its tools; ``side`` (a predicate on the body) replaces that rule for a CLI
    whose side requests carry tools too (Qwen Code's follow-up suggestion does).
    ``conversation`` is a header naming a session when the client sends one
    (``header``), else None (Qwen Code sends none).

    >>> import urllib.request
    >>> script = [Reply("Running.", tool=bash("ls"), usage=Usage(10, 5, 3))]
    >>> with ModelEndpoint(OpenAIChat(), script) as endpoint:
    ...     ask = {"model": "m", "stream": True, "messages": [], "tools": [{"type": "function"}],
    ...            "stream_options": {"include_usage": True}}
    ...     url = endpoint.base_url + "/v1/chat/completions"
    ...     with urllib.request.urlopen(url, json.dumps(ask).encode()) as r:
    ...         lines = [line for line in r.read().decode().splitlines() if line]
    >>> lines[-1]
    'data: [DONE]'
    >>> chunks = [json.loads(line[6:]) for line in lines[:-1]]
    >>> [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    ['Running.', None, None]
    >>> call = chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]
    >>> finish = chunks[2]["choices"][0]["finish_reason"]
    >>> call["name"], json.loads(call["arguments"])["command"], finish
    ('Bash', 'ls', 'tool_calls')
    >>> chunks[-1]["usage"]["prompt_tokens"], chunks[-1]["usage"]["prompt_tokens_details"]
    (13, {'cached_tokens': 3})
    >>> endpoint.sent_usage(), endpoint.requests[0].side
    (Usage(input=10, output=5, cache_read=3, cache_creation=0), False)
    """

    path = "/v1/chat/completions"

    def __init__(
        self,
        path: str = "/v1/chat/completions",
        header: str | None = None,
        side: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        self.path = path
        self.header = header
        self.side = side

    def is_side_request(self, body: Mapping[str, Any]) -> bool:
        if self.side is not None:
            return self.side(body)
        return not body.get("tools")

    def conversation(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        if self.header is None:
            return None
        lower = {name.lower(): value for name, value in headers.items()}
        return lower.get(self.header.lower())

    @staticmethod
    def usage(usage: Usage) -> dict[str, Any]:
        prompt = usage.input + usage.cache_read + usage.cache_creation
        return {
            "prompt_tokens": prompt,
            "completion_tokens": usage.output,
            "total_tokens": prompt + usage.output,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        }

    @staticmethod
    def tool_calls(reply: Reply) -> list[dict[str, Any]]:
        if reply.tool is None:
            return []
        return [
            {
                "index": 0,
                "id": "call_" + uuid.uuid4().hex[:24],
                "type": "function",
                "function": {"name": reply.tool.name, "arguments": json.dumps(reply.tool.input)},
            }
        ]

    def write(self, out: Callable[[bytes], object], reply: Reply, body: Mapping[str, Any]) -> str:
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        model = reply.model or body.get("model") or "gpt-4o"
        finish = "tool_calls" if reply.tool is not None else "stop"
        calls = self.tool_calls(reply)
        head = {"id": completion_id, "created": int(time.time()), "model": model}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if calls:
                message["tool_calls"] = [
                    {k: v for k, v in call.items() if k != "index"} for call in calls
                ]
            choice = {"index": 0, "message": message, "finish_reason": finish}
            whole = {**head, "object": "chat.completion", "choices": [choice]}
            out(json.dumps({**whole, "usage": self.usage(reply.usage)}).encode())
            return completion_id

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> None:
            data = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            out(f"data: {json.dumps(data)}\n\n".encode())

        chunk([{"index": 0, "delta": {"role": "assistant", "content": reply.text}}])
        if calls:
            chunk([{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}])
        chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
        options = body.get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage"):
            chunk([], usage=self.usage(reply.usage))
        out(b"data: [DONE]\n\n")
        return completion_id


def json_for_schema(schema: object, name: str = "") -> Any:
    """A value that fits a JSON schema (or the Gemini API's OpenAPI subset, whose types
    are upper case): an enum's ``user`` if it has one (a "who speaks next" check must
    hand the turn back), else its first value; a string, a number at the schema's
    minimum, false, an empty list, an object with every property.

    >>> json_for_schema({"type": "OBJECT", "properties": {"next_speaker": {"type":
    ...     "STRING", "enum": ["model", "user"]}, "n": {"type": "integer", "minimum": 1}}})
    {'next_speaker': 'user', 'n': 1}
    """
    if not isinstance(schema, Mapping):
        return "scripted"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return "user" if "user" in enum else enum[0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return {}
        return {key: json_for_schema(value, key) for key, value in properties.items()}
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        return low if isinstance(low, (int, float)) else 1
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    return f"scripted {name}".strip()


class GeminiGenerateContent(Provider):
    """The Gemini API as Gemini CLI calls it with ``GOOGLE_GEMINI_BASE_URL`` (``POST
    /v1beta/models/<model>:streamGenerateContent?alt=sse``, or ``:generateContent``):
    streamed as ``data: {GenerateContentResponse}`` lines: one chunk with the text
    part, one with a ``functionCall`` part (name, args), the last with ``finishReason``
    ``STOP`` and ``usageMetadata``. Without streaming: one GenerateContentResponse.

    Usage maps to the API's counts: ``promptTokenCount`` holds the cached ones
    (``cachedContentTokenCount`` = cache_read), ``candidatesTokenCount`` = output. The
    API has no count of cache writes: cache_creation is sent inside
    ``promptTokenCount``, so script ``Usage`` without it when comparing.

    Side requests are those without ``tools``: the CLI's model router asks which model
    should answer, and its loop and "next speaker" checks ask for JSON
    (``generationConfig.responseMimeType`` "application/json" with a
    ``responseJsonSchema`` or ``responseSchema``); those get JSON that fits the schema
    (:func:`json_for_schema`), others :attr:`ModelEndpoint.title`'s text. The request
    names no conversation.

    >>> import urllib.request
    >>> script = [Reply("Running.", tool=ToolCall("run_shell_command", {"command": "ls"}),
    ...                 usage=Usage(10, 5, 3))]
    >>> with ModelEndpoint(GeminiGenerateContent(), script) as endpoint:
    ...     ask = {"contents": [], "tools": [{"functionDeclarations": []}]}
    ...     url = endpoint.base_url + "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    ...     with urllib.request.urlopen(url, json.dumps(ask).encode()) as r:
    ...         chunks = [json.loads(line[6:]) for line in r.read().decode().splitlines()
    ...                   if line.startswith("data: ")]
    ...     route = {"contents": [], "generationConfig": {"responseMimeType": "application/json",
    ...              "responseJsonSchema": {"type": "object", "properties": {"model_choice":
    ...              {"type": "string", "enum": ["flash", "pro"]}}}}}
    ...     url = endpoint.base_url + "/v1beta/models/gemini-2.5-flash-lite:generateContent"
    ...     with urllib.request.urlopen(url, json.dumps(route).encode()) as r:
    ...         routed = json.loads(r.read())
    >>> [list(c["candidates"][0]["content"]["parts"][0]) for c in chunks]
    [['text'], ['functionCall'], ['text']]
    >>> chunks[-1]["usageMetadata"]["promptTokenCount"], chunks[-1]["modelVersion"]
    (13, 'gemini-2.5-pro')
    >>> json.loads(routed["candidates"][0]["content"]["parts"][0]["text"])
    {'model_choice': 'flash'}
    >>> endpoint.sent_usage(), endpoint.requests[1].side
    (Usage(input=10, output=5, cache_read=3, cache_creation=0), True)
    """

    path = "/v1beta/models/"

    def handles(self, path: str) -> bool:
        """``/v1beta/models/<model>:generateContent`` or ``:streamGenerateContent``."""
        return path.startswith(self.path) and path.endswith(
            (":generateContent", ":streamGenerateContent")
        )

    def with_path(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The body with ``_model`` (named in the path) and ``_stream`` (a
        ``:streamGenerateContent`` request, answered as server-sent events)."""
        model, _, method = path.partition("?")[0][len(self.path) :].partition(":")
        return {**body, "_model": model, "_stream": method == "streamGenerateContent"}

    def is_side_request(self, body: Mapping[str, Any]) -> bool:
        return not body.get("tools")

    def content_type(self, body: Mapping[str, Any]) -> str:
        return "text/event-stream" if body.get("_stream") else "application/json"

    @staticmethod
    def usage(usage: Usage) -> dict[str, int]:
        prompt = usage.input + usage.cache_read + usage.cache_creation
        return {
            "promptTokenCount": prompt,
            "candidatesTokenCount": usage.output,
            "cachedContentTokenCount": usage.cache_read,
            "totalTokenCount": prompt + usage.output,
        }

    @staticmethod
    def schema(body: Mapping[str, Any]) -> object | None:
        """The JSON schema a request wants its answer in, if it asks for JSON."""
        config = body.get("generationConfig")
        if not isinstance(config, Mapping):
            return None
        if config.get("responseMimeType") != "application/json":
            return None
        return config.get("responseJsonSchema") or config.get("responseSchema") or {}

    def write(self, out: Callable[[bytes], object], reply: Reply, body: Mapping[str, Any]) -> str:
        response_id = uuid.uuid4().hex[:24]
        model = reply.model or str(body.get("_model") or "gemini-2.5-pro")
        text = reply.text
        schema = self.schema(body) if self.is_side_request(body) else None
        if schema is not None:
            text = json.dumps(json_for_schema(schema))
        parts: list[dict[str, Any]] = []
        if text or reply.tool is None:
            parts.append({"text": text})
        if reply.tool is not None:
            call = {"name": reply.tool.name, "args": dict(reply.tool.input)}
            parts.append({"functionCall": call})
        head = {"responseId": response_id, "modelVersion": model}

        def response(parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            if not last:
                return {**head, "candidates": [candidate]}
            candidate["finishReason"] = "STOP"
            return {**head, "candidates": [candidate], "usageMetadata": self.usage(reply.usage)}

        if not body.get("_stream"):
            out(json.dumps(response(parts, True)).encode())
            return response_id
        chunks = [response([part], False) for part in parts]
        chunks.append(response([{"text": ""}], True))
        for chunk in chunks:
            out(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        return response_id


class ModelEndpoint:
    """A scripted model endpoint of one :class:`Provider` on 127.0.0.1 (a free port),
    serving from :meth:`start` (or ``with``) until :meth:`stop`.

    ``script``: the replies to model requests, in order; :meth:`add` appends more, to
    the shared script or to the script of one conversation (a request of a conversation
    with a script of its own takes from that one, so sessions running side by side each
    get theirs). ``title``: the reply to every side request. :attr:`requests` is every
    request got, in order; :meth:`sent_usage` sums the usage of what was sent."""

    def __init__(
        self,
        provider: Provider,
        script: Iterable[Reply] = (),
        title: Reply = Reply('{"title": "Scripted session"}', usage=Usage(80, 6)),
    ) -> None:
        self.provider = provider
        self.title = title
        self.requests: list[Request] = []
        self.overrun = 0
        self._scripts: dict[str | None, list[Reply]] = {None: list(script)}
        self._lock = threading.Condition()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the script and what was sent -------------------------------------------------

    def add(self, *replies: Reply, conversation: str | None = None) -> None:
        """Append ``replies`` to the script of ``conversation`` (None: the shared one)."""
        with self._lock:
            self._scripts.setdefault(conversation, []).extend(replies)

    def unused(self, conversation: str | None = None) -> list[Reply]:
        """The replies of a script no request has taken yet."""
        with self._lock:
            return list(self._scripts.get(conversation, []))

    def turns(self, conversation: str | None = None) -> list[Request]:
        """The model requests answered from a script (side requests left out), of one
        conversation or (None) of all."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.reply is not None
                and not r.side
                and (conversation is None or r.conversation == conversation)
            ]

    def sent_usage(self, conversation: str | None = None, side: bool = False) -> Usage:
        """The usage of every reply sent to a model request of ``conversation`` (None:
        any); with ``side``, of side requests too. Each reply is one message id."""
        with self._lock:
            sent = [
                r.reply.usage
                for r in self.requests
                if r.reply is not None
                and (side or not r.side)
                and (conversation is None or r.conversation == conversation)
            ]
        return sum(sent, Usage())

    def wait_for(
        self, check: Callable[[list[Request]], Any], timeout: float = 60, what: str = "a request"
    ) -> Any:
        """Wait until ``check(requests)`` is truthy, and return it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not (result := check(list(self.requests))):
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(r.path, r.conversation, r.side) for r in self.requests]
                    raise AssertionError(f"timed out waiting for {what}; requests: {seen}")
                self._lock.wait(min(left, 0.5))
            return result

    def _take(self, request: Request, body: Mapping[str, Any]) -> Reply:
        """The reply to a model request (the lock held)."""
        request.conversation = self.provider.conversation(request.headers, body)
        request.side = self.provider.is_side_request(body)
        if request.side:
            return self.title
        own = self._scripts.get(request.conversation)
        script = own if own else self._scripts[None]
        if script:
            return script.pop(0)
        self.overrun += 1
        return Reply("(the script has no more replies)")

    # -- HTTP ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ModelEndpoint:
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                endpoint._handle(self)

            def do_GET(self) -> None:
                endpoint._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None

    def __enter__(self) -> ModelEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        path = handler.path.partition("?")[0]
        request = Request(handler.command, handler.path, dict(handler.headers.items()), body)
        model_request = (
            handler.command == "POST" and self.provider.handles(path) and isinstance(body, dict)
        )
        if model_request:
            assert isinstance(body, dict)
            body = self.provider.with_path(handler.path, body)
        with self._lock:
            if model_request:
                assert isinstance(body, dict)
                request.reply = self._take(request, body)
            self.requests.append(request)
        if request.reply is None:
            handler.send_response(404)
            handler.send_header("Content-Length", "0")
            handler.send_header("Connection", "close")
            handler.end_headers()
        else:
            assert isinstance(body, dict)
            handler.send_response(200)
            handler.send_header("Content-Type", self.provider.content_type(body))
            handler.send_header("Connection", "close")
            handler.end_headers()

            def out(data: bytes) -> None:
                handler.wfile.write(data)
                handler.wfile.flush()

            request.message_id = self.provider.write(out, request.reply, body)
        handler.close_connection = True  # one request per connection: none left open
        with self._lock:
            self._lock.notify_all()


# -- Claude Code against an endpoint ----------------------------------------------------

#: the API key the CLI sends (the endpoint ignores it)
API_KEY = "sk-ant-api03-scripted-endpoint-" + "x" * 24


def claude_home(home: Path, *projects: Path) -> Path:
    """Make ``home`` a HOME in which Claude Code reaches its prompt at once: onboarding
    done, ``projects`` trusted, :data:`API_KEY` approved (else it asks whether to use
    it)."""
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    trusted = {os.path.realpath(p): {"hasTrustDialogAccepted": True} for p in projects}
    config = {
        "hasCompletedOnboarding": True,
        "projects": trusted,
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
    }
    (home / ".claude.json").write_text(json.dumps(config))
    return home


def claude_env(endpoint: ModelEndpoint, home: Path) -> dict[str, str]:
    """The environment for Claude Code to use ``endpoint`` and nothing else on a network
    (docs/development.md): no update check, telemetry, marketplace or other traffic."""
    return {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": endpoint.base_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }


# -- Codex against an endpoint ----------------------------------------------------------

#: the model Codex is told to use: one of its bundled catalog whose tools are plain
#: functions (the gpt-6 family has ``tool_mode = "code_mode_only"``: one JavaScript
#: ``exec`` tool), its offer of a newer model acknowledged in config.toml
CODEX_MODEL = "gpt-5.5"
CODEX_MODEL_OFFER = "gpt-6-sol"
#: the provider's name in config.toml, and the variable holding its key
CODEX_PROVIDER = "scripted"
CODEX_KEY_ENV = "SCRIPTED_ENDPOINT_API_KEY"


def codex_shell(command: str, escalate: str | None = None) -> ToolCall:
    """Codex's shell tool (``exec_command``, for :data:`CODEX_MODEL`) running ``command``
    in the session's cwd. With ``escalate`` (the question shown) it asks to run outside
    the sandbox, which under ``-a on-request`` asks for approval first; under
    ``approval_policy = "untrusted"`` any command not known to be read-only asks."""
    args: dict[str, Any] = {"cmd": command}
    if escalate is not None:
        args |= {"sandbox_permissions": "require_escalated", "justification": escalate}
    return ToolCall("exec_command", args)


def codex_home(home: Path, endpoint: ModelEndpoint, *projects: Path) -> Path:
    """Make ``home`` a HOME whose ``.codex`` (CODEX_HOME, returned) has Codex 0.171 use
    ``endpoint`` for :data:`CODEX_MODEL` with no login (the key is in :func:`codex_env`)
    and reach its prompt at once: ``projects`` trusted, no model-migration screen, no
    update check, analytics or plugin/app traffic (docs/development.md; it still tries
    to fetch its announcement tip). Approval ``on-request`` in a ``workspace-write``
    sandbox (0.171 refuses ``untrusted``): a command runs unasked in the sandbox, and
    one asking to leave it (:func:`codex_shell` with ``escalate``) shows "Would you like
    to run the following command?", where ``y`` (or Enter) runs it. Its plan tool
    ``update_plan`` is on (0.171 offers :data:`CODEX_MODEL` none by default: a call of
    it is "unsupported call: update_plan"). Launch with
    ``--no-daemon``, else a shared app-server daemon outlives the TUI."""
    codex = home / ".codex"
    codex.mkdir(parents=True, exist_ok=True)
    trusted = "".join(
        f'[projects.{json.dumps(os.path.realpath(p))}]\ntrust_level = "trusted"\n\n'
        for p in projects
    )
    (codex / "config.toml").write_text(
        f"""model = "{CODEX_MODEL}"
model_provider = "{CODEX_PROVIDER}"
approval_policy = "on-request"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.{CODEX_PROVIDER}]
name = "Scripted endpoint"
base_url = "{endpoint.base_url}/v1"
env_key = "{CODEX_KEY_ENV}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
remote_plugin = false
apps = false
plugin_sharing = false

[analytics]
enabled = false

[feedback]
enabled = false

[tools.update_plan]
enabled = true

[tui]
show_tooltips = false

[notice]
hide_full_access_warning = true
hide_rate_limit_model_nudge = true
hide_world_writable_warning = true

[notice.model_migrations]
"{CODEX_MODEL}" = "{CODEX_MODEL_OFFER}"

{trusted}"""
    )
    return codex


def codex_env(endpoint: ModelEndpoint, home: Path) -> dict[str, str]:
    """The environment for Codex to use ``endpoint`` (set up by :func:`codex_home` in
    ``home``) and nothing else on a network."""
    return {
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        CODEX_KEY_ENV: "sk-scripted-endpoint-" + "x" * 24,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def codex_token_usage(usage: Usage) -> dict[str, int]:
    """What Codex 0.171's rollout holds as ``total_token_usage`` (its last
    ``token_count`` event) after replies of summed ``usage`` from :class:`OpenAIResponses`
    (its input counts include the cached ones)."""
    prompt = usage.input + usage.cache_read + usage.cache_creation
    return {
        "input_tokens": prompt,
        "cached_input_tokens": usage.cache_read,
        "cache_write_input_tokens": usage.cache_creation,
        "output_tokens": usage.output,
        "reasoning_output_tokens": 0,
        "total_tokens": prompt + usage.output,
    }


# -- Qwen Code against an endpoint ------------------------------------------------------

#: the model Qwen Code is told to use (any name: the endpoint serves every one)
QWEN_MODEL = "qwen-scripted"


def qwen_shell(command: str, description: str = "Run a command") -> ToolCall:
    """Qwen Code's shell tool (``run_shell_command``) running ``command`` in the
    session's cwd; in approval mode ``default`` a command that writes asks first
    ("Allow execution of: 'echo'?", where Enter allows it once)."""
    return ToolCall(
        "run_shell_command",
        {"command": command, "description": description, "is_background": False},
    )


def qwen_side_request(body: Mapping[str, Any]) -> bool:
    """Whether a chat request of Qwen Code 0.24 is one of its side requests (which carry
    its tools too): the follow-up suggestion after a turn (its last user message starts
    ``[SUGGESTION MODE:``) or the managed-memory extraction subagent."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    text = json.dumps(messages[0]) + json.dumps(messages[-1])
    return "[SUGGESTION MODE:" in text or "managed memory extraction subagent" in text


def qwen_home(home: Path) -> Path:
    """Make ``home`` a HOME whose ``~/.qwen/settings.json`` (returned) has Qwen Code
    0.24.4 use an OpenAI-compatible endpoint (``OPENAI_*`` of :func:`qwen_env`) with no
    login, ask before a tool that writes (``tools.approvalMode: "default"``; its own
    default, "auto", lets a classifier approve), offer its plan tool ``todo_write`` (off
    by default), and make no request of its own beyond
    the turns: no update check (``general.enableAutoUpdate``), usage statistics,
    follow-up suggestions, memory extraction or feedback dialog. It shows no
    folder-trust dialog (folder trust is off unless configured)."""
    qwen = home / ".qwen"
    qwen.mkdir(parents=True, exist_ok=True)
    settings = {
        "$version": 4,
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": QWEN_MODEL},
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "tools": {"approvalMode": "default", "todoWrite": {"enabled": True}},
        "ui": {"enableFollowupSuggestions": False, "enableUserFeedback": False},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    }
    path = qwen / "settings.json"
    path.write_text(json.dumps(settings))
    return path


def qwen_env(endpoint: ModelEndpoint, home: Path) -> dict[str, str]:
    """The environment for Qwen Code to use ``endpoint`` (set up by :func:`qwen_home`
    in ``home``) and nothing else on a network; Node.js 22 first on PATH."""
    node = "/opt/jupyter-agents-node22/bin"
    return {
        "HOME": str(home),
        "PATH": f"{node}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "OPENAI_BASE_URL": endpoint.base_url + "/v1",
        "OPENAI_MODEL": QWEN_MODEL,
        "OPENAI_API_KEY": "sk-scripted-endpoint-" + "x" * 24,
        "QWEN_CODE_SKIP_UPDATE_CHECK_ONCE": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


# -- OpenCode against an endpoint -------------------------------------------------------

#: the provider and model OpenCode is told to use (names in its opencode.json)
OPENCODE_PROVIDER = "scripted"
OPENCODE_MODEL = "scripted-model"


def opencode_home(home: Path, endpoint: ModelEndpoint) -> Path:
    """Make ``home`` a HOME whose ``~/.config/opencode`` (returned) has OpenCode 1.18 use
    ``endpoint`` (:class:`OpenAIChat`, through ``@ai-sdk/openai-compatible`` with
    ``includeUsage``) for :data:`OPENCODE_MODEL`, ask before every shell command
    (``"permission": {"bash": "ask"}``; it runs them unasked by default), with no
    update check or sharing. Before it loads a plugin, OpenCode installs
    ``@opencode-ai/plugin`` from the npm registry into each config folder whose
    ``package-lock.json`` does not name it (offline it waits about 80 s for that to
    fail); an empty ``node_modules`` and a lock naming it count as installed, so
    nothing is fetched (our plugin imports nothing from it)."""
    config = home / ".config" / "opencode"
    (config / "node_modules").mkdir(parents=True, exist_ok=True)
    lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    (config / "package-lock.json").write_text(json.dumps(lock))
    settings = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{OPENCODE_PROVIDER}/{OPENCODE_MODEL}",
        "permission": {"bash": "ask"},
        "provider": {
            OPENCODE_PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted endpoint",
                "options": {
                    "baseURL": endpoint.base_url + "/v1",
                    "apiKey": "sk-scripted-endpoint-" + "x" * 24,
                    "includeUsage": True,
                },
                "models": {OPENCODE_MODEL: {"name": "Scripted model"}},
            }
        },
    }
    (config / "opencode.json").write_text(json.dumps(settings))
    return config


def opencode_env(home: Path) -> dict[str, str]:
    """The environment for OpenCode to use the HOME :func:`opencode_home` made (its XDG
    folders inside it) and nothing else on a network: no update check, models.dev
    catalogue fetch, LSP download or sharing; its temporary files (about 19 MB of
    ``.so`` files per start, never removed) in ``home/tmp``."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "TMPDIR": str(home / "tmp"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


# -- Gemini CLI against an endpoint -----------------------------------------------------

#: the key Gemini CLI sends (``x-goog-api-key``; the endpoint ignores it)
GEMINI_KEY = "scripted-gemini-key-" + "x" * 20


def gemini_shell(command: str, description: str = "Run a command") -> ToolCall:
    """Gemini CLI's shell tool running ``command``: one that changes files shows its
    "Allow execution of [Shell]?" dialog (its default approval mode)."""
    return ToolCall("run_shell_command", {"command": command, "description": description})


def gemini_home(home: Path, *projects: Path) -> Path:
    """Make ``home`` a HOME in which Gemini CLI 0.61 uses an API key (its key and the
    endpoint come from :func:`gemini_env`) and reaches its prompt at once: ``projects``
    trusted (else its folder-trust dialog comes first, and hooks run only in a trusted
    folder), no auto-update or update notice, usage statistics and telemetry off."""
    gemini = home / ".gemini"
    gemini.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ui": {"hideTips": True},
    }
    (gemini / "settings.json").write_text(json.dumps(settings))
    trusted = {os.path.realpath(p): "TRUST_FOLDER" for p in projects}
    (gemini / "trustedFolders.json").write_text(json.dumps(trusted))
    return home


def gemini_env(endpoint: ModelEndpoint, home: Path) -> dict[str, str]:
    """The environment for Gemini CLI to use ``endpoint`` (``GOOGLE_GEMINI_BASE_URL``,
    an API key) with the HOME :func:`gemini_home` made, and nothing else on a
    network."""
    return {
        "HOME": str(home),
        "GEMINI_API_KEY": GEMINI_KEY,
        "GOOGLE_GEMINI_BASE_URL": endpoint.base_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


# -- GitHub Copilot CLI against an endpoint ---------------------------------------------

#: the API key Copilot CLI sends (``Authorization: Bearer``; the endpoint ignores it)
COPILOT_KEY = "sk-scripted-copilot-" + "x" * 24


def copilot_shell(command: str, description: str = "Run a command") -> ToolCall:
    """Copilot CLI's shell tool (``bash``) running ``command``."""
    return ToolCall("bash", {"command": command, "description": description})


def copilot_home(home: Path, *projects: Path) -> Path:
    """Make ``home`` a HOME in which Copilot CLI reaches its prompt at once: ``projects``
    trusted (``trustedFolders`` of ``~/.copilot/config.json``, what its folder-trust
    dialog's "remember" writes), no banner."""
    config = home / ".copilot"
    config.mkdir(parents=True, exist_ok=True)
    trusted = [os.path.realpath(p) for p in projects]
    (config / "config.json").write_text(json.dumps({"trustedFolders": trusted}))
    (config / "settings.json").write_text(json.dumps({"banner": "never"}))
    return home


def copilot_env(endpoint: ModelEndpoint, home: Path) -> dict[str, str]:
    """The environment for Copilot CLI to use ``endpoint`` (OpenAI chat completions, its
    default wire format for a provider of one's own) and nothing else on a network:
    offline mode (no GitHub login, telemetry, web tools or update checks), no automatic
    update. The native binary unpacks its 235 MB package into a cache on first run: the
    test runner's own cache is shared (``COPILOT_PKG_CACHE_HOME``), not one per HOME."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return {
        "HOME": str(home),
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_BASE_URL": endpoint.base_url + "/v1",
        "COPILOT_PROVIDER_API_KEY": COPILOT_KEY,
        "COPILOT_MODEL": "gpt-4o",
        "COPILOT_AUTO_UPDATE": "false",
        "COPILOT_PKG_CACHE_HOME": os.path.join(cache, "copilot"),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
