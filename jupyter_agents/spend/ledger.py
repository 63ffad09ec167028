"""The usage ledger: what each agent session spent, read incrementally from its
conversation files into the session store, and who was watching when it did.

**Reading.** :meth:`UsageLedger.update` reads each conversation of each agent session
from where the last read stopped (its offset is kept in the store, so every byte is
parsed once, by whichever process read it: the server, the CLI, a kernel), only whole
lines, at most :data:`READ_CHUNK` bytes per file per call. The file read is the
archived copy (:mod:`jupyter_agents.agents.archive`) where the archive keeps a whole one, else
the CLI's own file: the two hold the same bytes, so the offset carries over. The
:data:`TAIL` bytes before the offset are checked on every read: a file that was
rewritten or truncated is read again from its start, and counts nothing twice
(records keyed by message id count once; each kind's reader carries what it needs, such
as a cumulative total: :meth:`~jupyter_agents.agents.base.AgentKind.usage_reader`). A
line that should hold usage and does not parse is skipped and counted (``skipped``),
never an error.

**Totals** are kept per session, conversation, model, UTC day and whether the tokens
were spent while nobody watched; costs are priced when read out (:class:`PriceTable`),
so a new price table reprices everything.

**Nobody watching.** A session is *unattended* from when no viewer that can type is
connected to it (the last one left, the server started, the session was created) until
one connects (:meth:`set_watched`, told by :class:`~jupyter_agents.server.activity.Attendance`;
kept as :class:`Stretches`).
A record written while unattended counts as spent while nobody watched, and into the
session's *allowance*: what it spent unattended since the last human input
(:meth:`reset_allowance`), in tokens, dollars and working seconds (:meth:`tick`), which
:mod:`jupyter_agents.spend.limits` weighs against the unattended limit. Records written before
the ledger knew a session (e.g. before an upgrade) count as attended.

Blocking; thread-safe; several processes may use one store at once (each read of a file
is one transaction that commits only if no other process moved its offset meanwhile).
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from jupyter_agents.agents.archive import ConversationFile
from jupyter_agents.agents.base import AgentKind
from jupyter_agents.agents.usage import TOKEN_KINDS, BadRecord, Record, Tokens
from jupyter_agents.core import clock
from jupyter_agents.core.errors import StoreError
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore
from jupyter_agents.spend.prices import PriceTable, Summary

#: the most bytes of one file parsed per :meth:`UsageLedger.update`
READ_CHUNK = 4 << 20
#: lines parsed between two yields of the GIL: parsing is pure Python, and a thread
#: that holds the GIL keeps the IO loop's thread waiting for it (up to the 5 ms switch
#: interval) whenever that wants to run; about 0.5 ms of parsing each
YIELD_LINES = 50
#: bytes before a file's offset checked on every read (was it rewritten?)
TAIL = 64
#: the unattended stretches kept per session before the latest (records read late are
#: still placed in the stretch they were written in)
STRETCHES = 32
#: the least seconds between two ``usage`` events of one session
USAGE_EVENT_INTERVAL = 5.0
#: the longest working time one :meth:`UsageLedger.tick` adds (a tick that comes late
#: after a pause, e.g. a suspended machine, does not count the pause)
MAX_TICK = 30.0

_SUMS = ", ".join(f"SUM({k})" for k in TOKEN_KINDS)


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else clock.iso(epoch)


def _day(epoch: float) -> str:
    """The UTC date of ``epoch`` (records of one second share it: cached)."""
    return _day_of_second(int(epoch))


@functools.lru_cache(maxsize=256)
def _day_of_second(second: int) -> str:
    return clock.day(second)


def _created(session: Session) -> float:
    try:
        return clock.epoch(session.created)
    except ValueError:
        return time.time()


@dataclasses.dataclass
class Change:
    """What one :meth:`UsageLedger.update` added to a session."""

    tokens: Tokens = dataclasses.field(default_factory=Tokens)
    unattended: Tokens = dataclasses.field(default_factory=Tokens)
    records: int = 0
    skipped: int = 0


@dataclasses.dataclass
class Allowance:
    """What a session spent while nobody watched since the last human input (``since``,
    epoch seconds): tokens, dollars (of known models) and working seconds; ``hit`` when
    the unattended limit was last acted on in this allowance (None: not yet)."""

    since: float
    tokens: Tokens = dataclasses.field(default_factory=Tokens)
    cost: float = 0.0
    seconds: float = 0.0
    hit: float | None = None
    reason: str | None = None

    def to_model(self) -> dict[str, Any]:
        return {
            "since": _iso(self.since),
            "tokens": self.tokens.to_model(),
            "cost": round(self.cost, 6),
            "seconds": round(self.seconds, 1),
        }


@dataclasses.dataclass
class Stretches:
    """When nobody watched a session, as the ledger keeps it (epoch seconds): the ledger knew it
    from ``tracked``; the latest unattended stretch began at ``unattended_since`` and
    ended at ``watched_since`` (None: it goes on); ``earlier`` holds the
    :data:`STRETCHES` stretches before it, ``[start, end]``."""

    tracked: float
    unattended_since: float | None
    watched_since: float | None
    earlier: builtins.list[builtins.list[float]] = dataclasses.field(default_factory=list)

    def unattended(self, when: float) -> bool:
        """Whether a record written at ``when`` was written while nobody watched.

        >>> a = Stretches(10.0, unattended_since=40.0, watched_since=50.0, earlier=[[20, 30]])
        >>> [a.unattended(t) for t in (5.0, 15.0, 25.0, 35.0, 45.0, 55.0)]
        [False, False, True, False, True, False]
        """
        if when < self.tracked:
            return False
        start = self.unattended_since
        if start is not None and when >= start:
            return self.watched_since is None or when < self.watched_since
        return any(a <= when < b for a, b in self.earlier)


@dataclasses.dataclass
class SessionUsage:
    """Everything the ledger knows of one session (:meth:`UsageLedger.usage`)."""

    total: Summary = dataclasses.field(default_factory=Summary)
    unattended: Summary = dataclasses.field(default_factory=Summary)
    conversations: dict[str, Summary] = dataclasses.field(default_factory=dict)
    unattended_seconds: float = 0.0
    allowance: Allowance | None = None
    watched: bool = False
    skipped: int = 0
    #: a per-session unattended limit (None: the configured one applies)
    limit: dict[str, float] | None = None

    def to_model(
        self, prices: PriceTable, limit: Mapping[str, float], source: str | None
    ) -> dict[str, Any]:
        """The REST ``usage`` object (rest-api.yml ``Usage``); ``limit`` is the one that
        applies (``source``: ``session``, ``config`` or None when there is none)."""
        unattended = self.unattended.to_model(prices)
        return {
            **self.total.to_model(prices),
            "models": {
                model: {"tokens": t.to_model(), "cost": _rounded(prices.cost(model, t))}
                for model, t in sorted(self.total.models.items())
            },
            "conversations": [
                {"conversation_id": cid, **summary.to_model(prices)}
                for cid, summary in self.conversations.items()
            ],
            "unattended": {
                "tokens": unattended["tokens"],
                "cost": unattended["cost"],
                "seconds": round(self.unattended_seconds, 1),
            },
            "allowance": None if self.allowance is None else self.allowance.to_model(),
            "limit": dict(limit) or None,
            "limit_source": source if limit else None,
            "limit_reached": None if self.allowance is None else _iso(self.allowance.hit),
            "limit_reason": None if self.allowance is None else self.allowance.reason,
            "watched": self.watched,
            "skipped_records": self.skipped,
        }


def _rounded(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 6)


@dataclasses.dataclass(frozen=True)
class DayRow:
    """One row of :meth:`UsageLedger.days`: a session's tokens of one model on one UTC
    day (``unattended``: those spent while nobody watched)."""

    day: str
    session_id: str
    model: str
    unattended: bool
    tokens: Tokens


class Throttle:
    """Which of the sessions that changed are due an event now: each at most every
    ``interval`` seconds; one held back is due at the first call after that (whether or
    not it changed again)."""

    def __init__(self, interval: float = USAGE_EVENT_INTERVAL) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: set[str] = set()

    def due(self, changed: Iterable[str], now: float | None = None) -> builtins.list[str]:
        """
        >>> t = Throttle(5.0)
        >>> t.due(["a"], now=0.0), t.due(["a"], now=1.0), t.due([], now=6.0)
        (['a'], [], ['a'])
        """
        now = time.monotonic() if now is None else now
        found = []
        for sid in dict.fromkeys([*changed, *sorted(self._held)]):
            if now - self._last.get(sid, -math.inf) >= self.interval:
                self._last[sid] = now
                self._held.discard(sid)
                found.append(sid)
            else:
                self._held.add(sid)
        return found


@dataclasses.dataclass(frozen=True)
class ReadFrom:
    """Where a read of one conversation file started: the offset stored for it, and
    whether one was stored at all (a file never read has none)."""

    offset: int
    stored: bool

    @property
    def expected(self) -> int | None:
        """The stored offset the read's commit requires (None: no row yet)."""
        return self.offset if self.stored else None


@dataclasses.dataclass(frozen=True)
class ReadTo:
    """Where a read of one conversation file ended: the offset after its last whole
    line, the digest of the bytes before it (to notice a rewritten file) and what the
    kind's reader carries on (:meth:`~jupyter_agents.agents.usage.UsageReader.dump`)."""

    offset: int
    tail: str
    cursor: str | None


class UsageLedger:
    """The usage of the agent sessions of one store (module docstring). ``prices`` price
    the allowance as records come in and the totals when read out; ``limit`` is the
    configured unattended limit (:func:`~jupyter_agents.spend.limits.check_limit`)."""

    def __init__(
        self,
        store: SessionStore,
        prices: PriceTable | None = None,
        limit: Mapping[str, float] | None = None,
        log: logging.Logger | None = None,
        kinds: Mapping[str, AgentKind] | None = None,
    ) -> None:
        #: the store whose connection (and file) the ledger uses; it owns and closes it
        self.store = store
        self.path = store.path
        self.prices = prices or PriceTable()
        self.limit = dict(limit or {})
        self.log = log or logging.getLogger("jupyter_agents")
        #: the kinds whose sessions' usage is read (those that report it), by name
        self.kinds = {
            name: kind
            for name, kind in (kinds if kinds is not None else _builtin_kinds()).items()
            if kind.reports_usage
        }
        #: sessions read after they ended (nothing more to read until they run again)
        self._final: set[str] = set()
        #: when :meth:`tick` last ran (monotonic)
        self._ticked: float | None = None
        #: bytes parsed, lines decoded (for the benchmark and tests)
        self.parsed_bytes = 0
        self.decoded_lines = 0

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the store's connection; an SQLite failure (e.g. a
        store locked for longer than the busy timeout) is a :class:`StoreError`, which
        callers log and go on from (so is a closed store: :class:`StoreClosed`)."""
        with self.store.connection() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: the usage ledger cannot write ({e})") from e
            try:
                yield db
            except BaseException as e:
                db.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise StoreError(f"{self.path}: the usage ledger cannot write ({e})") from e
                raise
            else:
                db.execute("COMMIT")

    def _query(self, sql: str, params: Iterable[Any] = ()) -> builtins.list[tuple[Any, ...]]:
        with self.store.connection() as db:
            try:
                return [tuple(row) for row in db.execute(sql, tuple(params)).fetchall()]
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: the usage ledger cannot read ({e})") from e

    # -- attendance ----------------------------------------------------------------

    def track(self, session: Session, when: float | None = None) -> None:
        """Start following a new session: unattended (and its allowance running) from
        ``when`` (default: its creation) until a viewer connects."""
        when = _created(session) if when is None else when
        with self._transaction() as db:
            self._ensure(db, session.id, when)

    @staticmethod
    def _ensure(db: sqlite3.Connection, session_id: str, when: float) -> None:
        db.execute(
            "INSERT OR IGNORE INTO usage_sessions (session_id, tracked_since, "
            "unattended_since, allowance_since) VALUES (?, ?, ?, ?)",
            (session_id, when, when, when),
        )

    def set_watched(self, session_id: str, watched: bool, when: float) -> None:
        """A viewer that can type connected to the session (``watched``) or the last one
        left, at ``when``."""
        with self._transaction() as db:
            self._ensure(db, session_id, when)
            if watched:
                db.execute(
                    "UPDATE usage_sessions SET watched = 1, watched_since = ? "
                    "WHERE session_id = ? AND watched = 0",
                    (when, session_id),
                )
                return
            row = db.execute(
                "SELECT unattended_since, watched_since, stretches FROM usage_sessions "
                "WHERE session_id = ? AND watched = 1",
                (session_id,),
            ).fetchone()
            if row is None:
                return
            earlier = _stretches(row[2])
            if row[0] is not None and row[1] is not None:
                earlier = [*earlier, [row[0], row[1]]][-STRETCHES:]
            db.execute(
                "UPDATE usage_sessions SET watched = 0, unattended_since = ?, "
                "watched_since = NULL, stretches = ? WHERE session_id = ?",
                (when, json.dumps(earlier), session_id),
            )

    def unwatch_all(self, when: float) -> int:
        """Nobody watches any session now (a server starts: the viewers of one that
        ended without saying so are gone); how many were recorded as watched."""
        watched = [
            r[0] for r in self._query("SELECT session_id FROM usage_sessions WHERE watched = 1")
        ]
        for session_id in watched:
            self.set_watched(session_id, False, when)
        return len(watched)

    def reset_allowance(self, session_id: str, when: float) -> None:
        """A person typed into the session at ``when``: a fresh allowance starts."""
        with self._transaction() as db:
            self._ensure(db, session_id, when)
            db.execute(
                "UPDATE usage_sessions SET allowance_since = ?, allow_input = 0, "
                "allow_output = 0, allow_cache_creation = 0, allow_cache_read = 0, "
                "allow_cost = 0, allow_seconds = 0, limit_hit = NULL, limit_reason = NULL "
                "WHERE session_id = ?",
                (when, session_id),
            )

    def set_limit(self, session_id: str, limit: Mapping[str, float] | None) -> None:
        """The session's own unattended limit (``{}``: none for it; None: the configured
        one), already checked (:func:`~jupyter_agents.spend.limits.check_limit`)."""
        with self._transaction() as db:
            self._ensure(db, session_id, time.time())
            db.execute(
                "UPDATE usage_sessions SET limit_override = ? WHERE session_id = ?",
                (None if limit is None else json.dumps(dict(limit)), session_id),
            )

    def limit_of(self, session_id: str) -> tuple[dict[str, float], str | None]:
        """The unattended limit that applies to a session and where it comes from
        (``session``, ``config``; ``({}, None)``: none)."""
        rows = self._query(
            "SELECT limit_override FROM usage_sessions WHERE session_id = ?", (session_id,)
        )
        override = _limit(rows[0][0]) if rows else None
        if override is not None:
            return override, "session" if override else None
        return dict(self.limit), "config" if self.limit else None

    def note_limit(self, session_id: str, when: float, reason: str) -> None:
        """The unattended limit was acted on (the agent interrupted) at ``when``."""
        with self._transaction() as db:
            db.execute(
                "UPDATE usage_sessions SET limit_hit = ?, limit_reason = ?, "
                "interrupts = interrupts + 1 WHERE session_id = ?",
                (when, reason, session_id),
            )

    def tick(self, working: Iterable[str]) -> None:
        """The sessions in ``working`` worked since the last tick: the time between adds
        to the working seconds (lifetime and allowance) of those nobody watches. The
        first tick of a process only starts the clock."""
        now = time.monotonic()
        last, self._ticked = self._ticked, now
        ids = list(working)
        if last is None or not ids:
            return
        elapsed = min(now - last, MAX_TICK)
        with self._transaction() as db:
            db.executemany(
                "UPDATE usage_sessions SET unattended_seconds = unattended_seconds + ?, "
                "allow_seconds = allow_seconds + ? WHERE session_id = ? AND watched = 0",
                [(elapsed, elapsed, sid) for sid in ids],
            )

    # -- reading -------------------------------------------------------------------

    def update(
        self,
        sessions: Iterable[Session],
        files_of: Callable[[Session], builtins.list[ConversationFile]],
        now: float | None = None,
    ) -> dict[str, Change]:
        """Read what the conversation files of ``sessions`` (of kinds that report usage)
        gained; what it added, by session.
        A session that is not running is read once more, then not until it runs again."""
        changes: dict[str, Change] = {}
        for session in sessions:
            if session.kind not in self.kinds:
                continue
            if session.status != "running" and session.id in self._final:
                continue
            change = Change()
            done = True
            for file in files_of(session):
                done = self._read_file(session, file, change, now) and done
            if session.status == "running" or not done:
                self._final.discard(session.id)
            else:
                self._final.add(session.id)
            if change.records or change.skipped:
                changes[session.id] = change
        return changes

    def _read_file(
        self, session: Session, file: ConversationFile, change: Change, now: float | None
    ) -> bool:
        """Read what ``file`` gained (at most :data:`READ_CHUNK`); whether it was read
        to its end."""
        try:
            fd = os.open(file.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return True
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return True
            rows = self._query(
                "SELECT offset, tail, cursor FROM usage_files "
                "WHERE session_id = ? AND conversation_id = ?",
                (session.id, file.conversation),
            )
            offset, tail, cursor = rows[0] if rows else (0, "", None)
            start = offset
            before = b""
            if offset:
                before = os.pread(fd, min(TAIL, offset), max(0, offset - TAIL))
                if offset > st.st_size or _digest(before) != tail:
                    start, before = 0, b""  # rewritten or truncated: read it again
            if start >= st.st_size:
                return True
            data = os.pread(fd, min(READ_CHUNK, st.st_size - start), start)
            end = data.rfind(b"\n") + 1
            skipped = 0
            if end == 0 and len(data) == READ_CHUNK:
                # one line longer than a whole chunk: passed over (and counted skipped)
                end = self._line_end(fd, start + len(data), st.st_size) - start
                skipped, data = 1, b""
                if end > 0:
                    keep = min(TAIL, start + end)
                    before = os.pread(fd, keep, start + end - keep)
        finally:
            os.close(fd)
        if end <= 0:
            return True  # no whole line yet
        self.parsed_bytes += min(end, len(data))
        reader = self.kinds[session.kind].usage_reader(cursor)
        records: list[Record] = []
        for n, line in enumerate(data[:end].split(b"\n")):
            if n % YIELD_LINES == YIELD_LINES - 1:
                time.sleep(0)  # let the IO loop's thread have the GIL
            try:
                record = reader.parse(line)
            except BadRecord:
                skipped += 1
                continue
            if record is not None:
                records.append(record)
        self._apply(
            session,
            file.conversation,
            ReadFrom(offset, bool(rows)),
            ReadTo(start + end, _digest((before + data[:end])[-TAIL:]), reader.dump()),
            records,
            skipped,
            change,
            time.time() if now is None else now,
        )
        return bool(start + end >= st.st_size)

    @staticmethod
    def _line_end(fd: int, offset: int, size: int) -> int:
        """The offset after the next newline at or after ``offset`` (``size``: none)."""
        while offset < size:
            data = os.pread(fd, min(READ_CHUNK, size - offset), offset)
            if not data:
                break
            found = data.find(b"\n")
            if found >= 0:
                return offset + found + 1
            offset += len(data)
        return -1

    def _apply(
        self,
        session: Session,
        conversation: str,
        was: ReadFrom,
        state: ReadTo,
        records: list[Record],
        skipped: int,
        change: Change,
        now: float,
    ) -> None:
        """Count ``records`` and move the file's offset, in one transaction that only
        commits while the offset is still ``was`` (else another process counted them).
        A few statements per call, whatever the number of records: totals are summed
        per bucket first, messages looked up and written in batches."""
        with self._transaction() as db:
            moved = db.execute(
                "SELECT offset FROM usage_files WHERE session_id = ? AND conversation_id = ?",
                (session.id, conversation),
            ).fetchall()
            if (moved[0][0] if moved else None) != was.expected:
                return
            self._ensure(db, session.id, now)
            row = db.execute(
                "SELECT tracked_since, unattended_since, watched_since, allowance_since, "
                "stretches FROM usage_sessions WHERE session_id = ?",
                (session.id,),
            ).fetchone()
            stretches = Stretches(row[0], row[1], row[2], _stretches(row[4]))
            allowance_since = row[3]
            seen = self._messages(db, session.id, {r.key for r in records if r.key})
            grown: set[str] = set()
            # summed as plain lists: this loop runs once per record
            buckets: dict[tuple[str, str, bool], list[int]] = {}
            added, alone, allow = [0] * 4, [0] * 4, [0] * 4
            allow_cost = 0.0
            for record in records:
                counts: tuple[int, ...] = record.tokens.values()
                if record.key is not None:
                    before = seen.get(record.key)
                    if before is not None:
                        after = tuple(max(n, b) for n, b in zip(counts, before, strict=True))
                        counts = tuple(a - b for a, b in zip(after, before, strict=True))
                        if not any(counts):
                            continue
                        seen[record.key] = after
                    else:
                        seen[record.key] = counts
                    grown.add(record.key)
                when = now if record.when is None else record.when
                unattended = stretches.unattended(when)
                bucket = buckets.setdefault((record.model, _day(when), unattended), [0] * 5)
                for i, n in enumerate(counts):
                    bucket[i] += n
                    added[i] += n
                bucket[4] += 1
                change.records += 1
                if unattended:
                    alone = [a + n for a, n in zip(alone, counts, strict=True)]
                    if when >= allowance_since:
                        allow = [a + n for a, n in zip(allow, counts, strict=True)]
                        allow_cost += self.prices.cost(record.model, Tokens.of(counts)) or 0.0
            change.tokens = change.tokens + Tokens.of(added)
            change.unattended = change.unattended + Tokens.of(alone)
            db.executemany(
                "INSERT INTO usage_totals (session_id, conversation_id, model, day, "
                "unattended, input, output, cache_creation, cache_read, records) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
                "input = input + excluded.input, output = output + excluded.output, "
                "cache_creation = cache_creation + excluded.cache_creation, "
                "cache_read = cache_read + excluded.cache_read, "
                "records = records + excluded.records",
                [
                    (session.id, conversation, model, day, int(unwatched), *sums)
                    for (model, day, unwatched), sums in buckets.items()
                ],
            )
            db.executemany(
                "INSERT INTO usage_messages (session_id, message_id, input, output, "
                "cache_creation, cache_read) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO "
                "UPDATE SET input = excluded.input, output = excluded.output, "
                "cache_creation = excluded.cache_creation, cache_read = excluded.cache_read",
                [(session.id, key, *seen[key]) for key in grown],
            )
            if any(allow) or skipped:
                db.execute(
                    "UPDATE usage_sessions SET allow_input = allow_input + ?, "
                    "allow_output = allow_output + ?, "
                    "allow_cache_creation = allow_cache_creation + ?, "
                    "allow_cache_read = allow_cache_read + ?, allow_cost = allow_cost + ?, "
                    "skipped = skipped + ? WHERE session_id = ?",
                    (*allow, allow_cost, skipped, session.id),
                )
            change.skipped += skipped
            db.execute(
                "INSERT INTO usage_files (session_id, conversation_id, offset, tail, cursor) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET offset = excluded.offset, "
                "tail = excluded.tail, cursor = excluded.cursor",
                (session.id, conversation, state.offset, state.tail, state.cursor),
            )
        self.decoded_lines += len(records) + skipped

    @staticmethod
    def _messages(
        db: sqlite3.Connection, session_id: str, keys: set[str]
    ) -> dict[str, tuple[int, ...]]:
        """The counts kept of those of ``keys`` (message ids) seen before: a
        message is counted once, at its largest counts per kind."""
        found: dict[str, tuple[int, ...]] = {}
        wanted = sorted(keys)
        for i in range(0, len(wanted), 400):  # SQLite's bound-parameter limit
            part = wanted[i : i + 400]
            for key, *counts in db.execute(
                "SELECT message_id, input, output, cache_creation, cache_read "  # noqa: S608
                f"FROM usage_messages WHERE session_id = ? AND message_id IN "
                f"({','.join('?' * len(part))})",
                [session_id, *part],
            ):
                found[key] = tuple(counts)
        return found

    # -- reading out -----------------------------------------------------------------

    def usage(self, session_ids: Iterable[str]) -> dict[str, SessionUsage]:
        """What the ledger knows of each of ``session_ids`` (sessions it never saw are
        left out)."""
        wanted = list(dict.fromkeys(session_ids))
        found: dict[str, SessionUsage] = {}
        for i in range(0, len(wanted), 400):  # SQLite's bound-parameter limit
            part = wanted[i : i + 400]
            marks = ",".join("?" * len(part))
            for sid, cid, model, unattended, *sums in self._query(
                f"SELECT session_id, conversation_id, model, unattended, {_SUMS} "  # noqa: S608
                f"FROM usage_totals WHERE session_id IN ({marks}) "
                "GROUP BY session_id, conversation_id, model, unattended ORDER BY MIN(rowid)",
                part,
            ):
                entry = found.setdefault(sid, SessionUsage())
                tokens = Tokens.of(sums)
                entry.total.add(model, tokens)
                entry.conversations.setdefault(cid, Summary()).add(model, tokens)
                if unattended:
                    entry.unattended.add(model, tokens)
            for row in self._query(
                "SELECT session_id, allowance_since, allow_input, allow_output, "  # noqa: S608
                "allow_cache_creation, allow_cache_read, allow_cost, allow_seconds, "
                "limit_hit, limit_reason, unattended_seconds, watched, skipped, "
                f"limit_override FROM usage_sessions WHERE session_id IN ({marks})",
                part,
            ):
                entry = found.setdefault(row[0], SessionUsage())
                entry.allowance = Allowance(
                    row[1], Tokens.of(row[2:6]), row[6], row[7], row[8], row[9]
                )
                entry.unattended_seconds = row[10]
                entry.watched = bool(row[11])
                entry.skipped = row[12]
                entry.limit = _limit(row[13])
        return found

    def model(self, session: Session, usage: SessionUsage | None = None) -> dict[str, Any] | None:
        """The REST ``usage`` object of a session (None for kinds that report no usage)."""
        if session.kind not in self.kinds:
            return None
        if usage is None:
            usage = self.usage([session.id]).get(session.id, SessionUsage())
        if usage.limit is not None:
            limit, source = usage.limit, "session"
        else:
            limit, source = self.limit, "config"
        return usage.to_model(self.prices, limit, source)

    def days(self, session_ids: Iterable[str] | None = None) -> builtins.list[DayRow]:
        """Tokens per UTC day, session, model and attendance, oldest day first."""
        where, params = "", []
        if session_ids is not None:
            params = list(session_ids)
            if not params:
                return []
            where = f"WHERE session_id IN ({','.join('?' * len(params))}) "
        rows = self._query(
            f"SELECT day, session_id, model, unattended, {_SUMS} FROM usage_totals "  # noqa: S608
            f"{where}GROUP BY day, session_id, model, unattended ORDER BY day, MIN(rowid)",
            params,
        )
        return [DayRow(r[0], r[1], r[2], bool(r[3]), Tokens.of(r[4:])) for r in rows]


def _stretches(text: str | None) -> builtins.list[builtins.list[float]]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [list(map(float, v)) for v in value if isinstance(v, list) and len(v) == 2]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _limit(text: str | None) -> dict[str, float] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _builtin_kinds() -> dict[str, AgentKind]:
    """The built-in kinds, for a ledger made without a session service's."""
    from jupyter_agents.agents.kinds import BUILTIN

    return {kind.name: kind([kind.name]) for kind in BUILTIN}
