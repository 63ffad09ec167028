"""Token usage of agent sessions: the records the agent CLIs write, and what they cost.

Pure: no file, no store. :mod:`jupyter_agents.spend.ledger` reads conversation files with these
parsers and keeps the totals; :mod:`jupyter_agents.spend.limits` weighs them against a limit.

**Token kinds** (:class:`Tokens`), disjoint, so they add up and are priced once each:
``input`` (input not read from a cache), ``output`` (including reasoning),
``cache_creation`` (input written to a prompt cache) and ``cache_read`` (input read from
it).

**Claude Code** writes each assistant message into its conversation file with
``message.model`` and ``message.usage`` (``input_tokens``, ``output_tokens``,
``cache_creation_input_tokens``, ``cache_read_input_tokens``: the kinds above, as the
Anthropic API reports them). One message whose reply has several content blocks is
written as several records carrying the same ``message.id`` (and its usage, which can
grow while it streams): :func:`parse_claude` keys each record by that id, and the
ledger counts a message once, at the largest counts seen per kind.

**Codex** records ``token_count`` events in its rollout (``{"timestamp", "type":
"event_msg", "payload": {"type": "token_count", "info": {"total_token_usage",
"last_token_usage", "model_context_window"}, "rate_limits"}}``; openai/codex
``codex-rs/protocol/src/protocol.rs`` ``TokenCountEvent``/``TokenUsageInfo``/``TokenUsage``:
``input_tokens`` includes ``cached_input_tokens``, ``output_tokens`` includes
``reasoning_output_tokens``), and the model of each turn in ``turn_context`` records
(``payload.model``). :func:`parse_codex` counts ``last_token_usage`` of every event
whose cumulative ``total_tokens`` moved (codex repeats an event unchanged, e.g. for a
rate-limit update), as ``input - cached`` input, ``cached`` cache reads and ``output``.

**Prices** (:class:`PriceTable`) are US dollars per million tokens of each kind, per
model: a key is a model id or a pattern with ``*`` (``claude-opus-4-5*`` matches the
dated ids); the exact id wins, else the longest matching pattern. A model that matches
nothing is "unknown": its tokens are counted, its cost is None. Prompt caching's 1-hour
writes and long-context tiers are priced at the default (5-minute, shortest-context)
rates.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple

#: the token kinds, in the order they are shown
KINDS: tuple[str, ...] = ("input", "output", "cache_creation", "cache_read")
#: when :data:`DEFAULT_PRICES` were taken from the providers' published list prices
PRICES_AS_OF = "2026-12-02"


def _row(input: float, output: float, cache_creation: float, cache_read: float) -> dict[str, float]:
    return {
        "input": input,
        "output": output,
        "cache_creation": cache_creation,
        "cache_read": cache_read,
    }


#: list prices in US dollars per million tokens as of :data:`PRICES_AS_OF` (Anthropic's
#: and OpenAI's pricing pages; OpenAI's models have no cache writes). Check your provider:
#: prices change, and contracts, regions and batch or priority tiers differ.
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    # Anthropic
    "claude-opus-5*": _row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-8*": _row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-7*": _row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-6*": _row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-5*": _row(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-1*": _row(15.00, 75.00, 18.75, 1.50),
    "claude-opus-4-2*": _row(15.00, 75.00, 18.75, 1.50),  # claude-opus-4-20250514
    "claude-sonnet-5*": _row(2.00, 10.00, 2.50, 0.20),
    "claude-sonnet-4*": _row(3.00, 15.00, 3.75, 0.30),
    "claude-haiku-4-5*": _row(1.00, 5.00, 1.25, 0.10),
    "claude-3-5-haiku*": _row(0.80, 4.00, 1.00, 0.08),
    # OpenAI
    "gpt-5.6-sol*": _row(5.00, 30.00, 6.25, 0.50),
    "gpt-5.6-terra*": _row(2.00, 12.00, 2.50, 0.20),
    "gpt-5.6-luna*": _row(0.20, 1.20, 0.25, 0.02),
    "gpt-5.5*": _row(5.00, 30.00, 0.0, 0.50),
    "gpt-5.4": _row(2.50, 15.00, 0.0, 0.25),
    "gpt-5.4-mini*": _row(0.75, 4.50, 0.0, 0.075),
    "gpt-5.4-nano*": _row(0.20, 1.25, 0.0, 0.02),
    "gpt-5.3-codex*": _row(1.75, 14.00, 0.0, 0.175),
    "gpt-5.2*": _row(1.75, 14.00, 0.0, 0.175),
    "gpt-5.1*": _row(1.25, 10.00, 0.0, 0.125),
    "gpt-5": _row(1.25, 10.00, 0.0, 0.125),
    "gpt-5-codex*": _row(1.25, 10.00, 0.0, 0.125),
    "gpt-5-mini*": _row(0.25, 2.00, 0.0, 0.025),
}


@dataclasses.dataclass(slots=True)
class Tokens:
    """Tokens by kind (:data:`KINDS`)."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(*(a + b for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> tuple[int, int, int, int]:
        return (self.input, self.output, self.cache_creation, self.cache_read)

    @property
    def total(self) -> int:
        """Every token of every kind.

        >>> Tokens(1, 2, 3, 4).total
        10
        """
        return sum(self.values())

    def to_model(self) -> dict[str, int]:
        """The JSON of the REST ``usage`` object: each kind and ``total``."""
        return {**dataclasses.asdict(self), "total": self.total}

    @classmethod
    def of(cls, values: Iterable[int]) -> Tokens:
        return cls(*values)


class Record(NamedTuple):
    """One usage record of a conversation file: ``key`` (Claude's message id: records
    with the same key are one message; None: count as it is), ``model``, when it was
    written (epoch seconds; None if the record does not say) and its tokens."""

    key: str | None
    model: str
    when: float | None
    tokens: Tokens


class BadRecord(ValueError):
    """A line that should hold usage but does not parse (skipped and counted)."""


def _epoch(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def _count(value: object) -> int:
    """A token count: a non-negative int (absent: 0); anything else is :class:`BadRecord`."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRecord(f"not a token count: {value!r:.40}")
    return value


def _json(line: bytes) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError as e:
        raise BadRecord(str(e)[:80]) from None
    if not isinstance(data, dict):
        raise BadRecord("not a JSON object")
    return data


def parse_claude(line: bytes) -> Record | None:
    """The usage of one line of a Claude Code conversation file; None for lines that hold
    none (only lines naming ``"usage"`` are decoded at all); :class:`BadRecord` for one
    that should and does not.

    >>> line = b'{"type": "assistant", "timestamp": "2026-12-01T10:00:00Z", "message": '
    >>> line += b'{"id": "msg_1", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, '
    >>> line += b'"output_tokens": 20, "cache_read_input_tokens": 900}}}'
    >>> parse_claude(line).tokens
    Tokens(input=3, output=20, cache_creation=0, cache_read=900)
    >>> parse_claude(b'{"type": "user", "message": {"content": "hi"}}') is None
    True
    """
    if b'"usage"' not in line:
        return None
    entry = _json(line)
    message = entry.get("message")
    if entry.get("type") != "assistant" or not isinstance(message, dict):
        return None
    usage = message.get("usage")
    if not isinstance(usage, dict):
        raise BadRecord("message.usage is not an object")
    tokens = Tokens(
        _count(usage.get("input_tokens")),
        _count(usage.get("output_tokens")),
        _count(usage.get("cache_creation_input_tokens")),
        _count(usage.get("cache_read_input_tokens")),
    )
    if tokens.total == 0:
        return None  # synthetic messages (and every message offline) cost nothing
    model = message.get("model")
    key = message.get("id")
    return Record(
        key if isinstance(key, str) and key else None,
        model if isinstance(model, str) and model else "unknown",
        _epoch(entry.get("timestamp")),
        tokens,
    )


@dataclasses.dataclass
class CodexCursor:
    """What :func:`parse_codex` carries from line to line of one rollout: the model of
    the current turn, the cumulative ``total_tokens`` last counted and the time of the
    last event counted (a rollout read again from its start counts nothing twice)."""

    model: str = "unknown"
    total: int | None = None
    last: float | None = None

    def dump(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def load(cls, text: str | None) -> CodexCursor:
        try:
            data = json.loads(text or "{}")
            return cls(str(data.get("model", "unknown")), data.get("total"), data.get("last"))
        except (ValueError, AttributeError, TypeError):
            return cls()


def parse_codex(line: bytes, cursor: CodexCursor) -> Record | None:
    """The usage of one line of a Codex rollout (``cursor`` is updated: the model from
    ``turn_context``, the total counted); None for lines that add none; :class:`BadRecord`
    for a ``token_count`` event that does not parse.

    >>> c = CodexCursor()
    >>> parse_codex(b'{"type": "turn_context", "payload": {"model": "gpt-5.4"}}', c)
    >>> ev = (b'{"timestamp": "2026-12-01T10:00:00Z", "type": "event_msg", "payload": '
    ...       b'{"type": "token_count", "info": {"total_token_usage": {"total_tokens": 150}, '
    ...       b'"last_token_usage": {"input_tokens": 100, "cached_input_tokens": 60, '
    ...       b'"output_tokens": 50, "reasoning_output_tokens": 20, "total_tokens": 150}}}}')
    >>> r = parse_codex(ev, c)
    >>> r.model, r.tokens
    ('gpt-5.4', Tokens(input=40, output=50, cache_creation=0, cache_read=60))
    >>> parse_codex(ev, c) is None  # the same event again: total unchanged
    True
    """
    if b'"turn_context"' in line:
        entry = _json(line)
        payload = entry.get("payload")
        if entry.get("type") == "turn_context" and isinstance(payload, dict):
            model = payload.get("model")
            if isinstance(model, str) and model:
                cursor.model = model
        return None
    if b'"token_count"' not in line:
        return None
    entry = _json(line)
    payload = entry.get("payload")
    if entry.get("type") != "event_msg" or not isinstance(payload, dict):
        return None
    if payload.get("type") != "token_count":
        return None
    info = payload.get("info")
    if info is None:
        return None  # usage not known yet (codex sends rate limits first)
    if not isinstance(info, dict):
        raise BadRecord("token_count info is not an object")
    total_usage, last_usage = info.get("total_token_usage"), info.get("last_token_usage")
    if not isinstance(total_usage, dict) or not isinstance(last_usage, dict):
        raise BadRecord("token_count without total_token_usage and last_token_usage")
    total = _count(total_usage.get("total_tokens"))
    when = _epoch(entry.get("timestamp"))
    if total == cursor.total:
        return None  # repeated (e.g. for a rate-limit update)
    if when is not None and cursor.last is not None and when < cursor.last:
        return None  # counted before (the rollout is being read again)
    given = _count(last_usage.get("input_tokens"))
    cached = min(_count(last_usage.get("cached_input_tokens")), given)
    tokens = Tokens(given - cached, _count(last_usage.get("output_tokens")), 0, cached)
    cursor.total = total
    if when is not None:
        cursor.last = when
    return Record(None, cursor.model, when, tokens) if tokens.total else None


#: the parser of each agent kind whose conversation files carry usage
FORMATS = ("claude", "codex")


# -- prices ---------------------------------------------------------------------------


def check_prices(value: object) -> dict[str, dict[str, float]]:
    """A price table as ``AgentsApp.prices`` takes it, or ``ValueError`` saying what is
    wrong: model (or ``*`` pattern) -> {kind: US dollars per million tokens}, with
    ``input`` and ``output`` given, every price a finite number >= 0, no other kinds.

    >>> check_prices({"m": {"input": 1, "output": 2}})
    {'m': {'input': 1.0, 'output': 2.0, 'cache_creation': 0.0, 'cache_read': 0.0}}
    >>> check_prices({"m": {"input": 1}})
    Traceback (most recent call last):
    ...
    ValueError: model 'm': input and output prices are required (US dollars per million tokens)
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a dict of model -> prices, not {type(value).__name__}")
    table: dict[str, dict[str, float]] = {}
    for model, prices in value.items():
        if not isinstance(model, str) or not model:
            raise ValueError(f"a model must be a non-empty string, not {model!r:.40}")
        if not isinstance(prices, Mapping):
            raise ValueError(f"model {model!r}: prices must be a dict of kind -> price")
        unknown = set(prices) - set(KINDS)
        if unknown:
            raise ValueError(
                f"model {model!r}: unknown token kinds {sorted(map(str, unknown))}; "
                f"kinds are {', '.join(KINDS)}"
            )
        if not {"input", "output"} <= set(prices):
            raise ValueError(
                f"model {model!r}: input and output prices are required "
                "(US dollars per million tokens)"
            )
        row: dict[str, float] = {}
        for kind in KINDS:
            price = prices.get(kind, 0.0)
            if (
                isinstance(price, bool)
                or not isinstance(price, (int, float))
                or not math.isfinite(price)
                or price < 0
            ):
                raise ValueError(f"model {model!r}: {kind} price must be a number >= 0")
            row[kind] = float(price)
        table[model] = row
    return table


class PriceTable:
    """Prices per model (module docstring); ``table`` as :func:`check_prices` returns it."""

    def __init__(self, table: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.table = check_prices(DEFAULT_PRICES if table is None else table)
        self._patterns = sorted(
            (k for k in self.table if "*" in k), key=lambda k: len(k.replace("*", "")), reverse=True
        )
        self._found: dict[str, dict[str, float] | None] = {}

    def prices(self, model: str) -> dict[str, float] | None:
        """The prices of ``model``; None when it is unknown.

        >>> t = PriceTable({"claude-opus-4*": {"input": 15, "output": 75},
        ...                 "claude-opus-4-5*": {"input": 5, "output": 25}})
        >>> t.prices("claude-opus-4-5-20251101")["input"], t.prices("claude-opus-4-1")["input"]
        (5.0, 15.0)
        >>> t.prices("gpt-9") is None
        True
        """
        if model in self._found:
            return self._found[model]
        found = self.table.get(model)
        if found is None:
            found = next(
                (self.table[p] for p in self._patterns if fnmatch.fnmatchcase(model, p)), None
            )
        if len(self._found) < 4096:
            self._found[model] = found
        return found

    def cost(self, model: str, tokens: Tokens) -> float | None:
        """What ``tokens`` of ``model`` cost in US dollars; None for an unknown model."""
        prices = self.prices(model)
        if prices is None:
            return None
        return sum(prices[k] * n for k, n in zip(KINDS, tokens.values(), strict=True)) / 1e6


# -- summaries ------------------------------------------------------------------------


@dataclasses.dataclass
class Summary:
    """Tokens by model, priced: what one session (or conversation, or day) used."""

    models: dict[str, Tokens] = dataclasses.field(default_factory=dict)

    def add(self, model: str, tokens: Tokens) -> None:
        self.models[model] = self.models.get(model, Tokens()) + tokens

    @property
    def tokens(self) -> Tokens:
        return sum(self.models.values(), Tokens())

    def cost(self, prices: PriceTable) -> float | None:
        """The priced part's cost (None when nothing is priced: no model is known)."""
        costs = [prices.cost(m, t) for m, t in self.models.items()]
        known = [c for c in costs if c is not None]
        return sum(known) if known else (None if costs else 0.0)

    def unknown(self, prices: PriceTable) -> list[str]:
        """The models without a price (their tokens are not in :meth:`cost`)."""
        return sorted(m for m in self.models if prices.prices(m) is None)

    def to_model(self, prices: PriceTable) -> dict[str, Any]:
        """``{tokens, cost, unknown_models}``; cost rounded to 1e-6 dollars."""
        cost = self.cost(prices)
        return {
            "tokens": self.tokens.to_model(),
            "cost": None if cost is None else round(cost, 6),
            "unknown_models": self.unknown(prices),
        }


def format_cost(cost: float | None, unknown: bool = False) -> str:
    """A cost for a table cell: ``$0.42``; ``-`` when nothing could be priced; a ``+``
    when some tokens were of unknown models.

    >>> format_cost(0.4213), format_cost(None), format_cost(12.5, unknown=True)
    ('$0.42', '-', '$12.50+')
    """
    if cost is None:
        return "-"
    text = f"${cost:.2f}" if cost >= 0.01 or cost == 0 else f"${cost:.4f}"
    return text + ("+" if unknown else "")


def format_tokens(n: int) -> str:
    """A token count for a table cell.

    >>> format_tokens(950), format_tokens(12_345), format_tokens(3_400_000)
    ('950', '12.3k', '3.4M')
    """
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"
