"""The unattended limit: an agent that spends too much while nobody watches is stopped
the way a person would stop it.

**What counts.** A session's *allowance* (:class:`~jupyter_agents.spend.ledger.Allowance`) is
what it spent while no viewer that can type was connected (a read-only watcher cannot
stop it, so it does not count), since the last human input (a viewer's ``stdin`` frame):
tokens of every kind, dollars (of models in the price table) and working seconds (a
tick in which its attention was ``working`` or it wrote usage). Input from a person
starts a fresh allowance; watching without typing neither adds to it nor resets it.

**The limit** (``AgentsApp.unattended_limit``, or a session's own: :func:`check_limit`)
holds ``tokens``, ``cost`` (US dollars) and ``seconds``, any of them; ``{}`` is none.
When an allowance goes past one of them while the agent works and nobody watches,
:class:`~jupyter_agents.server.unattended.UnattendedGuard` interrupts its turn with the
key a person would press (its kind's
:attr:`~jupyter_agents.agents.base.AgentKind.interrupt_key`), written to its terminal
through its backend, sets its attention to ``error`` with the reason (an ``attention``
event: JupyterLab shows a notification) and logs one line. Nothing is killed. If the
agent keeps spending, the key is sent again at most every
:data:`~jupyter_agents.server.unattended.RETRY` seconds.

:func:`check_limit` and :func:`exceeded` are pure: limits as values. Who watches and
who typed is :class:`~jupyter_agents.server.activity.Attendance`; applying the limit to
running agents is :class:`~jupyter_agents.server.unattended.UnattendedGuard`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.spend.ledger import Allowance
from jupyter_agents.spend.prices import format_cost, format_tokens

#: the keys of a limit
LIMIT_KEYS = ("tokens", "cost", "seconds")
#: the value documented as a starting point for ``AgentsApp.unattended_limit``
RECOMMENDED = {"cost": 5.0, "seconds": 3600.0}


def check_limit(value: object) -> dict[str, float]:
    """An unattended limit: a dict with any of ``tokens`` (an int), ``cost`` (US
    dollars) and ``seconds``, each > 0; ``{}``: no limit. ``ValueError`` saying what is
    wrong otherwise.

    >>> check_limit({"cost": 5, "seconds": 3600})
    {'cost': 5.0, 'seconds': 3600.0}
    >>> check_limit({"dollars": 5})
    Traceback (most recent call last):
    ...
    ValueError: unknown keys ['dollars'] (a limit has tokens, cost, seconds)
    """
    if not isinstance(value, Mapping):
        raise ValueError(
            f"an unattended limit is a dict of tokens, cost and seconds, not {type(value).__name__}"
        )
    unknown = set(value) - set(LIMIT_KEYS)
    if unknown:
        raise ValueError(
            f"unknown keys {sorted(map(str, unknown))} (a limit has {', '.join(LIMIT_KEYS)})"
        )
    limit: dict[str, float] = {}
    for key in LIMIT_KEYS:
        if key not in value:
            continue
        number = value[key]
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"{key} must be a number, not {number!r:.40}")
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"{key} must be greater than 0 (leave it out for no {key} limit)")
        if key == "tokens" and number != int(number):
            raise ValueError("tokens must be a whole number")
        limit[key] = int(number) if key == "tokens" else float(number)
    return limit


def parse_override(value: object) -> dict[str, float] | None:
    """A session's own limit as a client gives it: None (back to the configured one),
    ``{}`` (none for this session) or a limit; :class:`InvalidRequest` (a 400) else."""
    if value is None:
        return None
    try:
        return check_limit(value)
    except ValueError as e:
        raise InvalidRequest(f"unattended_limit: {e}") from None


def describe(limit: Mapping[str, float]) -> str:
    """A limit for people.

    >>> describe({"tokens": 2_000_000, "cost": 5, "seconds": 5400}), describe({})
    ('2.0M tokens, $5.00, 90 min', 'none')
    """
    parts = []
    if "tokens" in limit:
        parts.append(f"{format_tokens(int(limit['tokens']))} tokens")
    if "cost" in limit:
        parts.append(format_cost(limit["cost"]))
    if "seconds" in limit:
        parts.append(_duration(limit["seconds"]))
    return ", ".join(parts) or "none"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def exceeded(limit: Mapping[str, float], allowance: Allowance) -> str | None:
    """Why ``allowance`` is past ``limit`` (the reason shown to the user), None if it
    is not.

    >>> from jupyter_agents.agents.usage import Tokens
    >>> exceeded({"cost": 5.0}, Allowance(0.0, Tokens(), cost=5.5))
    'unattended limit: $5.50 spent since the last input with nobody watching (limit $5.00)'
    >>> exceeded({"cost": 5.0, "seconds": 60}, Allowance(0.0, Tokens(), cost=1.0)) is None
    True
    """
    spent = None
    if "tokens" in limit and allowance.tokens.total > limit["tokens"]:
        spent = (
            f"{format_tokens(allowance.tokens.total)} tokens",
            describe({"tokens": limit["tokens"]}),
        )
    elif "cost" in limit and allowance.cost > limit["cost"]:
        spent = format_cost(allowance.cost), format_cost(limit["cost"])
    elif "seconds" in limit and allowance.seconds > limit["seconds"]:
        spent = f"{_duration(allowance.seconds)} of work", _duration(limit["seconds"])
    if spent is None:
        return None
    return (
        f"unattended limit: {spent[0]} spent since the last input with nobody watching "
        f"(limit {spent[1]})"
    )
