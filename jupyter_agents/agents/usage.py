"""Token usage as agent CLIs record it: the token kinds, a usage record, and the reader
contract each kind that reports usage implements (:meth:`AgentKind.usage_reader
<jupyter_agents.agents.base.AgentKind.usage_reader>`). Pure: no file, no store.
:mod:`jupyter_agents.spend.ledger` reads conversation files with the readers and keeps
the totals; :mod:`jupyter_agents.spend.prices` prices them.

**Token kinds** (:class:`Tokens`), disjoint, so they add up and are priced once each:
``input`` (input not read from a cache), ``output`` (including reasoning),
``cache_creation`` (input written to a prompt cache) and ``cache_read`` (input read from
it).
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, NamedTuple

from jupyter_agents.core import clock

#: the token kinds, in the order they are shown
TOKEN_KINDS: tuple[str, ...] = ("input", "output", "cache_creation", "cache_read")


def price_row(
    input: float, output: float, cache_creation: float, cache_read: float
) -> dict[str, float]:
    """US dollars per million tokens of each kind (a kind's list prices are rows)."""
    return {
        "input": input,
        "output": output,
        "cache_creation": cache_creation,
        "cache_read": cache_read,
    }


@dataclasses.dataclass(slots=True)
class Tokens:
    """Tokens by kind (:data:`TOKEN_KINDS`)."""

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
    """One usage record of a conversation file: ``key`` (a message id, for CLIs that
    write one message as several records: records with the same key are one message,
    counted once at the largest counts seen per kind; None: count as it is), ``model``,
    when it was written (epoch seconds; None if the record does not say) and its
    tokens."""

    key: str | None
    model: str
    when: float | None
    tokens: Tokens

    @classmethod
    def of(cls, key: object, model: object, when: float | None, tokens: Tokens) -> Record:
        """A record from a CLI's own fields, whatever their types: a ``key`` that is
        not a non-empty string is None, a ``model`` that is not one is ``"unknown"``.

        >>> Record.of(7, "", None, Tokens(1, 0, 0, 0))[:2]
        (None, 'unknown')
        """
        return cls(
            key if isinstance(key, str) and key else None,
            model if isinstance(model, str) and model else "unknown",
            when,
            tokens,
        )


class BadRecord(ValueError):
    """A line that should hold usage but does not parse (skipped and counted)."""


def epoch(value: object) -> float | None:
    """An ISO 8601 time as epoch seconds (UTC when it names no zone); None if it is not one."""
    when = clock.parse_or_none(value)
    return None if when is None else clock.seconds(when)


def count(value: object) -> int:
    """A token count: a non-negative int (absent: 0); anything else is :class:`BadRecord`."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRecord(f"not a token count: {value!r:.40}")
    return value


def json_object(line: bytes) -> dict[str, Any]:
    """A line that holds a JSON object, decoded; :class:`BadRecord` otherwise."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise BadRecord(str(e)[:80]) from None
    if not isinstance(data, dict):
        raise BadRecord("not a JSON object")
    return data


class UsageReader(ABC):
    """Reads the usage records of one conversation file, a line at a time, in order.
    What it carries from line to line (:meth:`dump`) is saved with the offset read to,
    and given back (``saved``) when the file is read on, so that a file read in many
    calls, or again from its start, counts nothing twice."""

    @abstractmethod
    def parse(self, line: bytes) -> Record | None:
        """The usage of one line; None for lines that hold none; :class:`BadRecord` for
        one that should and does not (skipped and counted by the ledger)."""

    def dump(self) -> str | None:
        """What to save to read on later (None: nothing)."""
        return None
