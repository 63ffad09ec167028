"""What agent sessions' tokens cost: price tables, priced summaries, and how costs and
counts are shown. Pure: no file, no store. The tokens come from the kinds' usage
readers (:mod:`jupyter_agents.agents.usage`), through the ledger
(:mod:`jupyter_agents.spend.ledger`); :mod:`jupyter_agents.spend.limits` weighs them
against a limit.

**Prices** (:class:`PriceTable`) are US dollars per million tokens of each kind, per
model: a key is a model id or a pattern with ``*`` (``model-a-4-5*`` matches the dated
ids); the exact id wins, else the longest matching pattern. A model that matches
nothing is "unknown": its tokens are counted, its cost is None. Prompt caching's 1-hour
writes and long-context tiers are priced at the default (5-minute, shortest-context)
rates.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Mapping
from typing import Any

from jupyter_agents.agents.kinds import builtin_prices
from jupyter_agents.agents.usage import TOKEN_KINDS, Tokens

#: when :data:`DEFAULT_PRICES` were taken from the providers' published list prices
PRICES_AS_OF = "2026-12-02"
#: list prices of the built-in kinds' models (each kind's ``prices``: the providers'
#: pricing pages), US dollars per million tokens, as of :data:`PRICES_AS_OF`. Check your
#: provider: prices change, and contracts, regions and batch or priority tiers differ.
DEFAULT_PRICES: dict[str, dict[str, float]] = builtin_prices()


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
        unknown = set(prices) - set(TOKEN_KINDS)
        if unknown:
            raise ValueError(
                f"model {model!r}: unknown token kinds {sorted(map(str, unknown))}; "
                f"kinds are {', '.join(TOKEN_KINDS)}"
            )
        if not {"input", "output"} <= set(prices):
            raise ValueError(
                f"model {model!r}: input and output prices are required "
                "(US dollars per million tokens)"
            )
        row: dict[str, float] = {}
        for kind in TOKEN_KINDS:
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

        >>> t = PriceTable({"model-a-4*": {"input": 15, "output": 75},
        ...                 "model-a-4-5*": {"input": 5, "output": 25}})
        >>> t.prices("model-a-4-5-20251101")["input"], t.prices("model-a-4-1")["input"]
        (5.0, 15.0)
        >>> t.prices("model-b-9") is None
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
        return sum(prices[k] * n for k, n in zip(TOKEN_KINDS, tokens.values(), strict=True)) / 1e6


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
