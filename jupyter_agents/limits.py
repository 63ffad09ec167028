"""The unattended limit: an agent that spends too much while nobody watches is stopped
the way a person would stop it.

**What counts.** A session's *allowance* (:class:`~jupyter_agents.ledger.Allowance`) is
what it spent while no viewer that can type was connected (a read-only watcher cannot
stop it, so it does not count), since the last human input (a viewer's ``stdin`` frame):
tokens of every kind, dollars (of models in the price table) and working seconds (a
tick in which its attention was ``working`` or it wrote usage). Input from a person
starts a fresh allowance; watching without typing neither adds to it nor resets it.

**The limit** (``AgentsApp.unattended_limit``, or a session's own: :func:`check_limit`)
holds ``tokens``, ``cost`` (US dollars) and ``seconds``, any of them; ``{}`` is none.
When an allowance goes past one of them while the agent works and nobody watches,
:class:`UnattendedGuard` interrupts its turn with the key a person would press
(:data:`INTERRUPT_KEYS`: Escape for Claude Code and for Codex, whose TUI sends
``Op::Interrupt`` on Esc while a task runs: openai/codex
``codex-rs/tui/src/bottom_pane/mod.rs``), written to its terminal through its backend,
sets its attention to ``error`` with the reason (an ``attention`` event: JupyterLab
shows a notification) and logs one line. Nothing is killed. If the agent keeps
spending, the key is sent again at most every :data:`RETRY` seconds.

:func:`check_limit` and :func:`exceeded` are pure; :class:`Attendance` runs on the IO
loop (told by :class:`~jupyter_agents.streams.Streams`) and writes to the ledger in one
worker thread, in order; :class:`UnattendedGuard` decides in a worker thread and sends
keys on the IO loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .errors import AgentsError, InvalidRequest
from .ledger import Allowance, Change
from .store import Session
from .usage import format_cost, format_tokens

if TYPE_CHECKING:
    from .sessions import SessionService
    from .streams import Streams

#: the keys of a limit
LIMIT_KEYS = ("tokens", "cost", "seconds")
#: the value documented as a starting point for ``AgentsApp.unattended_limit``
RECOMMENDED = {"cost": 5.0, "seconds": 3600.0}
#: what interrupts a turn, per agent kind (the key a person presses)
INTERRUPT_KEYS: dict[str, str] = {"claude": "\x1b", "codex": "\x1b"}
#: seconds before the key is sent again to an agent still spending past its limit
RETRY = 60.0
#: seconds a stream opened only to send the key waits for its session to answer
SEND_TIMEOUT = 10.0


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

    >>> from jupyter_agents.usage import Tokens
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


class Attendance:
    """Who watches each session and when a person typed, from the live terminals
    (:class:`~jupyter_agents.streams.Streams` calls it on the IO loop), into the usage
    ledger (:meth:`~jupyter_agents.ledger.UsageLedger.set_watched`,
    :meth:`~jupyter_agents.ledger.UsageLedger.reset_allowance`) by one worker thread,
    in the order things happened. Input is written once after each unattended stretch
    (the first keystroke), not per keystroke."""

    def __init__(self, service: SessionService, log: logging.Logger | None = None) -> None:
        self.service = service
        self.log = log or logging.getLogger("jupyter_agents")
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "jupyter-agents-attendance")
        self._watched: dict[str, int] = {}
        #: sessions whose allowance is fresh since their last unattended stretch
        self._fresh: set[str] = set()

    def viewers(self, session_id: str, count: int) -> None:
        """``count`` viewers that can type watch the session now."""
        was = self._watched.get(session_id, 0)
        if count:
            self._watched[session_id] = count
        else:
            self._watched.pop(session_id, None)
            self._fresh.discard(session_id)
        if bool(was) != bool(count):
            self._write(self.service.usage.set_watched, session_id, bool(count), time.time())

    def human_input(self, session_id: str) -> None:
        """A person typed into the session: its allowance starts again (once per
        stretch: one dict lookup for every later keystroke)."""
        if session_id not in self._fresh:
            self._fresh.add(session_id)
            self._write(self.service.usage.reset_allowance, session_id, time.time())

    def _write(self, fn: Any, *args: Any) -> None:
        def run() -> None:
            try:
                fn(*args)
            except AgentsError as e:
                self.log.warning("jupyter_agents: attendance not recorded: %s", e)
            except Exception:
                self.log.exception("jupyter_agents: attendance not recorded")

        with contextlib.suppress(RuntimeError):  # shut down
            self._writer.submit(run)

    def flush(self) -> None:
        """Wait for every write so far (blocking: tests and shutdown)."""
        self._writer.submit(lambda: None).result()

    def close(self) -> None:
        self._writer.shutdown(wait=True)


class UnattendedGuard:
    """Applies the unattended limit (module docstring) each refresh of the server:
    :meth:`check` in a worker thread (reads the ledger, decides, records), then
    :meth:`interrupt` on the IO loop (sends the keys)."""

    def __init__(
        self,
        service: SessionService,
        streams: Streams,
        log: logging.Logger | None = None,
        clock: Any = time.time,
    ) -> None:
        self.service = service
        self.streams = streams
        self.log = log or logging.getLogger("jupyter_agents")
        self.clock = clock

    def check(self, changes: Mapping[str, Change]) -> list[tuple[Session, str]]:
        """Count the working time of unwatched agents, then the sessions to interrupt
        now and why (their attention is ``error`` with the reason, published, logged).
        Blocking."""
        ledger = self.service.usage
        running = self.service.store.list(["running"], INTERRUPT_KEYS)
        working = [s for s in running if s.attention == "working" or s.id in changes]
        ledger.tick(s.id for s in working)
        now = self.clock()
        found = ledger.usage(s.id for s in working)
        chosen: list[tuple[Session, str]] = []
        for session in working:
            usage = found.get(session.id)
            if usage is None or usage.watched or usage.allowance is None:
                continue
            limit = ledger.limit if usage.limit is None else usage.limit
            reason = exceeded(limit, usage.allowance) if limit else None
            if reason is None:
                continue
            hit = usage.allowance.hit
            if hit is not None and (now - hit < RETRY or session.id not in changes):
                continue  # acted on: again only if it still spends, and not at once
            ledger.note_limit(session.id, now, reason)
            self.service.store.update(
                session.id,
                attention="error",
                attention_reason=reason,
                attention_since=_iso(now),
            )
            session = self.service.store.get(session.id)
            self.service.publish("attention", session)
            self.log.warning(
                "jupyter_agents: interrupted session %s (terminal %r): %s",
                session.id,
                session.name,
                reason,
            )
            chosen.append((session, reason))
        return chosen

    async def interrupt(self, chosen: list[tuple[Session, str]]) -> None:
        """Send each session its kind's interrupt key (on the IO loop)."""
        for session, _ in chosen:
            if not await send_keys(self.streams, session, INTERRUPT_KEYS[session.kind]):
                self.log.warning(
                    "jupyter_agents: could not send the interrupt key to session %s",
                    session.id,
                )


class _Quiet:
    """The listener of a stream opened only to send keys: it wants no output."""

    def __init__(self, ended: asyncio.Future[bool]) -> None:
        self.ended = ended

    def on_output(self, data: str) -> None:
        pass

    def on_exit(self, exit_code: int | None) -> None:
        if not self.ended.done():
            self.ended.set_result(False)


async def send_keys(streams: Streams, session: Session, keys: str) -> bool:
    """Write ``keys`` to a running session's terminal through its backend, as if typed:
    into its live stream when one is open here (a read-only watcher's), else into a
    stream opened for it (once it answers with its screen, so nothing typed is held
    back), closed again. Whether they were sent. Call on the IO loop."""
    term = streams.terminals.get(session.id)
    if term is not None:
        term.stream.write(keys)
        return True
    ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    try:
        stream = streams.backends.get(session.backend).attach(session.id, _Quiet(ready))
    except AgentsError:
        return False
    try:

        def answered(_: str) -> None:
            if not ready.done():
                ready.set_result(True)

        stream.snapshot(answered, screen_rows=session.rows or 24)
        try:
            sent = await asyncio.wait_for(ready, SEND_TIMEOUT)
        except asyncio.TimeoutError:
            sent = False
        if sent:
            stream.write(keys)
            await asyncio.sleep(0.2)  # let the write go out before the stream closes
        return sent
    finally:
        await stream.aclose()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat().replace("+00:00", "Z")
