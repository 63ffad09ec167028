"""Notifier: a notice of each new pending permission request, to the owner's channels.

The session service publishes a ``request`` event whenever a session's pending requests
change, from whichever thread made the change (the hook listener, a REST answer).
:meth:`Notifier.offer` only hands the session's id to the IO loop
(``call_soon_threadsafe``) into a bounded queue (:data:`QUEUE_SIZE`; when full the id is
dropped and a line logged), so it never blocks the hook path or a request. One worker
task reads the queue, lists the session's pending requests off the loop, and for each it
has not seen: asks the :class:`Policy` (quiet hours; a visible Lab tab of the owner,
:class:`Presence`), mints the request's answer tokens (:mod:`.tokens`) and hands the
:class:`~.notice.Notice` to every channel at once, in a task of its own (at most
:data:`IN_FLIGHT`), each delivery bounded by the channel's own timeout and this one's
(:attr:`Notifier.timeout`); a failure is a log line. A
request held back (a tab was visible, or quiet hours) is notified once the policy lets
it through while it is still pending: when a tab says it is hidden
(:meth:`Notifier.presence_changed`), when the last visible tab's presence expires, or
when the quiet hours end (the worker looks every quarter of the presence TTL, at least
once a second). One answered or ended meanwhile is not.

The channels are the owner's only: the Web Push subscriptions the owner registered
(owner-only routes) and the ntfy topic the configuration names. A share's watcher has
neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from jupyter_agents.core import clock
from jupyter_agents.core.events import SessionEvent
from jupyter_agents.notify.notice import Notice
from jupyter_agents.notify.tokens import AnswerTokens
from jupyter_agents.sessions.requests import PermissionDesk

#: sessions waiting to be looked at; beyond this an event is dropped (and logged)
QUEUE_SIZE = 64
#: request ids remembered as notified (the oldest forgotten first)
SEEN = 2000
#: notices being delivered at once; beyond it the worker waits for one to finish
IN_FLIGHT = 32
#: Lab tabs whose visibility is remembered
MAX_TABS = 64
_QUIET = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)")
When = Literal["no_visible_tab", "always"]
#: why a request is held back while one of the owner's Lab tabs is visible
VISIBLE = "a Lab tab is visible"


def parse_quiet_hours(text: str) -> tuple[int, int] | None:
    """``"HH:MM-HH:MM"`` as (start, end) minutes after midnight; None for ``""``;
    ValueError for anything else.

    >>> parse_quiet_hours("22:30-07:00")
    (1350, 420)
    >>> parse_quiet_hours("") is None
    True
    """
    if not text.strip():
        return None
    found = _QUIET.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"quiet hours must look like 22:00-07:00, not {text!r}")
    h1, m1, h2, m2 = (int(g) for g in found.groups())
    return h1 * 60 + m1, h2 * 60 + m2


def in_quiet_hours(quiet: tuple[int, int] | None, minute: int) -> bool:
    """Whether ``minute`` (after local midnight) falls in ``quiet`` (start included,
    end excluded; a span may cross midnight).

    >>> [in_quiet_hours((1320, 420), m) for m in (1319, 1320, 0, 419, 420)]
    [False, True, True, True, False]
    >>> in_quiet_hours((540, 1020), 600), in_quiet_hours(None, 600)
    (True, False)
    """
    if quiet is None or quiet[0] == quiet[1]:
        return False
    start, end = quiet
    return start <= minute < end if start < end else minute >= start or minute < end


@dataclasses.dataclass(frozen=True)
class Policy:
    """When to notify: ``when`` ``no_visible_tab`` (only while no Lab tab of the owner
    says it is visible) or ``always``; never in ``quiet`` hours (local time)."""

    when: When = "no_visible_tab"
    quiet: tuple[int, int] | None = None

    def quiet_hours(self) -> str | None:
        """The quiet hours as ``HH:MM-HH:MM``, or None.

        >>> Policy(quiet=(1350, 420)).quiet_hours()
        '22:30-07:00'
        """
        if self.quiet is None:
            return None
        (h1, m1), (h2, m2) = divmod(self.quiet[0], 60), divmod(self.quiet[1], 60)
        return f"{h1:02d}:{m1:02d}-{h2:02d}:{m2:02d}"

    def held_back(self, visible: bool, minute: int) -> str | None:
        """Why not to notify now, or None to notify.

        >>> Policy().held_back(True, 0), Policy("always").held_back(True, 0)
        ('a Lab tab is visible', None)
        >>> Policy("always", (0, 60)).held_back(False, 30)
        'quiet hours'
        """
        if in_quiet_hours(self.quiet, minute):
            return "quiet hours"
        if self.when == "no_visible_tab" and visible:
            return VISIBLE
        return None


class Presence:
    """Which of the owner's Lab tabs said they are visible, for ``ttl`` seconds each
    (a tab repeats it while visible; one that closes or sleeps stops saying it)."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}

    def report(self, tab: str, visible: bool) -> None:
        """Tab ``tab`` is visible now (for :attr:`ttl` s), or no longer."""
        now = self._clock()
        with self._lock:
            self._until.pop(tab, None)
            if visible:
                self._until[tab] = now + self.ttl
            for key, until in list(self._until.items()):
                if until <= now or len(self._until) > MAX_TABS:
                    del self._until[key]

    def visible(self) -> int:
        """How many tabs are visible now."""
        now = self._clock()
        with self._lock:
            return sum(1 for until in self._until.values() if until > now)


class Links:
    """Where the owner's devices reach this server, for absolute links (ntfy's actions):
    ``configured`` (a setting), else the base URL of the owner's latest presence or
    subscription call (:meth:`learn`: the URL the Lab page itself was loaded from),
    else ``fallback`` (the server's connection URL)."""

    def __init__(self, configured: str, fallback: str) -> None:
        self.configured = configured
        self.fallback = fallback
        self.learned: str | None = None

    def learn(self, base_url: str) -> None:
        self.learned = base_url

    def agents_url(self) -> str:
        """``{base_url}agents/``, absolute.

        >>> links = Links("", "http://127.0.0.1:8888/")
        >>> links.learn("https://hub.example.org/user/a/")
        >>> links.agents_url()
        'https://hub.example.org/user/a/agents/'
        """
        base = self.configured or self.learned or self.fallback
        return base.rstrip("/") + "/agents/"


class Channel(Protocol):
    """Where notices go. ``name``; :meth:`refused` says why it cannot send (None: it
    can); :meth:`send` delivers one notice, bounded in time: how many deliveries were
    made (0: there was nowhere to send it, e.g. no device) and what happened, in words;
    it raises when it failed."""

    name: str

    def refused(self) -> str | None: ...

    async def send(self, notice: Notice) -> tuple[int, str]: ...


class Notifier:
    """The module docstring. ``local_minute()``: minutes after local midnight now."""

    def __init__(
        self,
        desk: PermissionDesk,
        tokens: AnswerTokens,
        channels: Sequence[Channel],
        policy: Policy,
        presence: Presence,
        links: Links,
        log: logging.Logger,
        timeout: float = 15.0,
        local_minute: Callable[[], int] | None = None,
    ) -> None:
        self.desk = desk
        self.tokens = tokens
        self.channels = list(channels)
        self.policy = policy
        self.presence = presence
        self.links = links
        self.log = log
        self.timeout = timeout
        self._local_minute = local_minute or _local_minute
        self._queue: asyncio.Queue[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task[None] | None = None
        self._seen: dict[str, None] = {}
        #: requests held back by the policy (a visible tab, quiet hours), to be looked
        #: at again once it lets them through: request id -> session id
        self._held: dict[str, str] = {}
        self._deliveries: set[asyncio.Future[Any]] = set()
        #: counts: ``queued``, ``dropped`` (queue full), ``held`` (policy), and per
        #: delivery ``sent``, ``failed``, ``skipped`` (nowhere to send it)
        self.counts = dict.fromkeys(("queued", "dropped", "held", "sent", "failed", "skipped"), 0)

    def channel(self, name: str) -> Any:
        """The channel called ``name``, or None."""
        return next((c for c in self.channels if c.name == name), None)

    def start(self) -> None:
        """Start the worker, on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(QUEUE_SIZE)
        self._worker = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop the worker and the deliveries in flight (what is queued is dropped)."""
        self._loop = None
        tasks = [*self._deliveries, *([] if self._worker is None else [self._worker])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def offer(self, event: SessionEvent) -> None:
        """A session event, from any thread: a ``request`` event of a running session
        queues the session to be looked at. Never blocks."""
        loop = self._loop
        if loop is None or event.action != "request" or event.session.status != "running":
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._put, event.session.id)

    def _put(self, session_id: str) -> None:
        if self._queue is None:
            return
        try:
            self._queue.put_nowait(session_id)
            self.counts["queued"] += 1
        except asyncio.QueueFull:
            self.counts["dropped"] += 1
            self.log.warning(
                "jupyter_agents: notifications are behind; not looking at session %s now",
                session_id,
            )

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            try:
                session_id = await asyncio.wait_for(self._queue.get(), self._wake_every())
            except asyncio.TimeoutError:
                session_id = None
            try:
                if session_id is not None:
                    await self._look_at(session_id)
                elif self._held and self._lets_through():
                    for held in sorted(set(self._held.values())):
                        await self._look_at(held)
            except Exception:
                self.log.exception("jupyter_agents: notifying of session %s failed", session_id)

    def _wake_every(self) -> float:
        """How often the worker looks whether what held requests back is over (a tab
        that closes or sleeps says nothing: its presence just expires; quiet hours end)."""
        return max(1.0, self.presence.ttl / 4)

    def _lets_through(self) -> bool:
        """Whether the policy would notify now."""
        return self.policy.held_back(self.presence.visible() > 0, self._local_minute()) is None

    def presence_changed(self) -> None:
        """A tab said it is hidden: the requests held back are looked at again if the
        policy lets them through now. On the IO loop."""
        if self._held and self._lets_through():
            for session_id in sorted(set(self._held.values())):
                self._put(session_id)

    async def _look_at(self, session_id: str) -> None:
        requests = await asyncio.to_thread(self.desk.pending, [session_id])
        pending = {r["id"] for r in requests}
        for request_id, held_session in list(self._held.items()):
            if held_session == session_id and request_id not in pending:
                del self._held[request_id]  # answered or ended meanwhile
        for request in requests:
            if request["id"] in self._seen and request["id"] not in self._held:
                continue
            self._seen[request["id"]] = None
            while len(self._seen) > SEEN:
                del self._seen[next(iter(self._seen))]
            await self.notify(request)

    async def notify(self, request: dict[str, Any]) -> None:
        """Notify of one pending request (its REST model), unless the policy holds it
        back; every ready channel at once."""
        held = self.policy.held_back(self.presence.visible() > 0, self._local_minute())
        ready = [c for c in self.channels if c.refused() is None]
        again = request["id"] in self._held
        self._held.pop(request["id"], None)
        if held is not None and ready:  # notified once the policy lets it through
            self._held[request["id"]] = request["session_id"]
            while len(self._held) > SEEN:
                del self._held[next(iter(self._held))]
        if held is not None or not ready:
            if not again:
                self.counts["held"] += 1
            self.log.info(
                "jupyter_agents: permission request %s of session %s not notified: %s",
                request["id"],
                request["session_id"],
                held or "no channel is set up",
            )
            return
        labels = [s["label"] for s in request["suggestions"]]
        tokens = self.tokens.mint(request["id"], clock.epoch(request["until"]), labels)
        notice = Notice.of(request, tokens)
        # on their own: a push service that hangs holds up no other notice
        delivery = asyncio.ensure_future(
            asyncio.gather(*(self._deliver(c, notice, request) for c in ready))
        )
        self._deliveries.add(delivery)
        delivery.add_done_callback(self._deliveries.discard)
        if len(self._deliveries) >= IN_FLIGHT:
            await asyncio.wait(self._deliveries, return_when=asyncio.FIRST_COMPLETED)

    async def _deliver(self, channel: Channel, notice: Notice, request: dict[str, Any]) -> None:
        try:
            made, said = await asyncio.wait_for(channel.send(notice), self.timeout)
        except Exception as e:
            self.counts["failed"] += 1
            why = "timed out" if isinstance(e, asyncio.TimeoutError) else str(e) or type(e).__name__
            self.log.warning(
                "jupyter_agents: %s notification of permission request %s failed: %s",
                channel.name,
                request["id"],
                why,
            )
            return
        self.counts["sent" if made else "skipped"] += 1
        self.log.info(
            "jupyter_agents: %s notification of permission request %s of session %s: %s",
            channel.name,
            request["id"],
            request["session_id"],
            said,
        )


def _local_minute() -> int:
    now = time.localtime()
    return now.tm_hour * 60 + now.tm_min
