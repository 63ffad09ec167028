"""SessionStore: the per-user record of every terminal and agent session.

One SQLite file in the state dir, opened by the server, the CLI and kernels at once:
a journal mode its filesystem supports (:func:`journal_mode`: WAL on a local disk), a
busy timeout, and ``BEGIN IMMEDIATE`` around every change so concurrent
writers queue instead of failing. The schema version lives in ``PRAGMA user_version``
and is migrated forward on open; a file written by a newer version, or one that is not a
jupyter_agents store at all, is refused with :class:`~jupyter_agents.core.errors.StoreError`.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from jupyter_agents.core.errors import (
    Conflict,
    NotFound,
    StoreClosed,
    StoreError,
    StoreUnavailable,
)
from jupyter_agents.core.paths import (
    OBJECT_STORE_FILESYSTEMS,
    filesystem_type,
    on_network_filesystem,
)
from jupyter_agents.core.records import (
    Admission,
    PushSubscription,
    Session,
    Share,
    Status,
)

#: how long :meth:`SessionStore.close` waits for a statement in flight (s)
CLOSE_TIMEOUT = 10.0

#: the journal modes ``AgentsApp.journal_mode`` may name besides ``auto``
JOURNAL_MODES = ("wal", "delete", "truncate", "persist")


def journal_mode(path: Path, configured: str = "auto") -> str:
    """The SQLite journal mode for a store at ``path``: ``configured`` unless it is
    ``auto``; else ``wal`` on a local filesystem and ``delete`` (a rollback journal) on
    a network one (SQLite's WAL needs memory shared on one host). A filesystem over
    object storage (:data:`~jupyter_agents.core.paths.OBJECT_STORE_FILESYSTEMS`) is refused
    with :class:`~jupyter_agents.core.errors.StoreError` naming it: it has no locks SQLite
    could use. Every process opening the store decides alike (the mode of a WAL file
    persists in it)."""
    if configured != "auto":
        if configured not in JOURNAL_MODES:
            raise StoreError(f"unknown journal mode {configured!r}; one of {JOURNAL_MODES}")
        return configured
    fs = filesystem_type(path.parent)
    if fs in OBJECT_STORE_FILESYSTEMS:
        raise StoreError(
            f"{path.parent} is on {fs} (object storage), which cannot hold the session "
            "store (SQLite needs file locks); choose AgentsApp.state_dir on a local disk "
            "or NFS"
        )
    return "delete" if on_network_filesystem(path.parent) else "wal"


#: Forward migrations; ``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id              TEXT PRIMARY KEY,
        name            TEXT NOT NULL,
        kind            TEXT NOT NULL DEFAULT 'shell',
        status          TEXT NOT NULL CHECK (status IN
                            ('running', 'exited', 'interrupted', 'orphaned', 'killed')),
        backend         TEXT NOT NULL,
        cwd             TEXT,
        argv            TEXT NOT NULL DEFAULT '[]',
        pid             INTEGER,
        pid_created     REAL,
        created         TEXT NOT NULL,
        last_activity   TEXT NOT NULL,
        exit_code       INTEGER,
        conversation_id TEXT,
        rows            INTEGER,
        cols            INTEGER
    );
    CREATE UNIQUE INDEX sessions_live_name ON sessions (name) WHERE status = 'running';
    CREATE INDEX sessions_status ON sessions (status);
    """,
    # agent sessions: launch args, the environment to restore with, resume flags; one
    # conversation belongs to one session
    """
    ALTER TABLE sessions ADD COLUMN args TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE sessions ADD COLUMN env TEXT;
    ALTER TABLE sessions ADD COLUMN ambiguous INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN reason TEXT;
    CREATE UNIQUE INDEX sessions_conversation ON sessions (conversation_id)
        WHERE conversation_id IS NOT NULL;
    """,
    # attention: what an agent session needs from its user, as its CLI reported it
    """
    ALTER TABLE sessions ADD COLUMN attention TEXT;
    ALTER TABLE sessions ADD COLUMN attention_since TEXT;
    ALTER TABLE sessions ADD COLUMN attention_reason TEXT;
    ALTER TABLE sessions ADD COLUMN attention_source TEXT;
    """,
    # read-only shares: who may watch which session until when (jupyter_agents.sharing.shares)
    """
    CREATE TABLE shares (
        id          TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL,
        viewer      TEXT,
        created     TEXT NOT NULL,
        expires     TEXT NOT NULL,
        revoked     TEXT
    );
    CREATE INDEX shares_session ON shares (session_id);
    """,
    # JupyterHub access that came with a grant: the id of the hub share code made for
    # it, and the users who got hub access through it (ended with the grant)
    """
    ALTER TABLE shares ADD COLUMN hub_code TEXT;
    CREATE TABLE share_admissions (
        share_id    TEXT NOT NULL,
        user        TEXT NOT NULL,
        admitted    TEXT NOT NULL,
        PRIMARY KEY (share_id, user)
    );
    """,
    # titles: the one a person gave the session, and the last one its program set; the
    # modes its program set, as followed from its transcript (terminal_state.Followed)
    """
    ALTER TABLE sessions ADD COLUMN title TEXT;
    ALTER TABLE sessions ADD COLUMN program_title TEXT;
    ALTER TABLE sessions ADD COLUMN modes TEXT;
    """,
    # token usage of agent sessions and who watched them (jupyter_agents.spend.ledger): totals
    # per conversation, model, day and attendance; messages counted by id; how
    # far each conversation file was read; per session, the attendance, the allowance
    # spent unattended since the last human input and its own unattended limit
    """
    CREATE TABLE usage_totals (
        session_id      TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        model           TEXT NOT NULL,
        day             TEXT NOT NULL,
        unattended      INTEGER NOT NULL,
        input           INTEGER NOT NULL DEFAULT 0,
        output          INTEGER NOT NULL DEFAULT 0,
        cache_creation  INTEGER NOT NULL DEFAULT 0,
        cache_read      INTEGER NOT NULL DEFAULT 0,
        records         INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, conversation_id, model, day, unattended)
    );
    CREATE TABLE usage_messages (
        session_id      TEXT NOT NULL,
        message_id      TEXT NOT NULL,
        input           INTEGER NOT NULL,
        output          INTEGER NOT NULL,
        cache_creation  INTEGER NOT NULL,
        cache_read      INTEGER NOT NULL,
        PRIMARY KEY (session_id, message_id)
    ) WITHOUT ROWID;
    CREATE TABLE usage_files (
        session_id      TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        offset          INTEGER NOT NULL,
        tail            TEXT NOT NULL,
        cursor          TEXT,
        PRIMARY KEY (session_id, conversation_id)
    );
    CREATE TABLE usage_sessions (
        session_id          TEXT PRIMARY KEY,
        tracked_since       REAL NOT NULL,
        watched             INTEGER NOT NULL DEFAULT 0,
        unattended_since    REAL,
        watched_since       REAL,
        stretches           TEXT NOT NULL DEFAULT '[]',
        unattended_seconds  REAL NOT NULL DEFAULT 0,
        allowance_since     REAL NOT NULL,
        allow_input         INTEGER NOT NULL DEFAULT 0,
        allow_output        INTEGER NOT NULL DEFAULT 0,
        allow_cache_creation INTEGER NOT NULL DEFAULT 0,
        allow_cache_read    INTEGER NOT NULL DEFAULT 0,
        allow_cost          REAL NOT NULL DEFAULT 0,
        allow_seconds       REAL NOT NULL DEFAULT 0,
        limit_override      TEXT,
        limit_hit           REAL,
        limit_reason        TEXT,
        interrupts          INTEGER NOT NULL DEFAULT 0,
        skipped             INTEGER NOT NULL DEFAULT 0
    );
    """,
    # the git worktree a session works in (jupyter_agents.sessions.worktrees), as JSON
    """
    ALTER TABLE sessions ADD COLUMN worktree TEXT;
    """,
    # the devices the owner turned Web Push on for (jupyter_agents.notify.subscriptions)
    """
    CREATE TABLE push_subscriptions (
        id          TEXT PRIMARY KEY,
        user        TEXT NOT NULL,
        endpoint    TEXT NOT NULL UNIQUE,
        p256dh      TEXT NOT NULL,
        auth        TEXT NOT NULL,
        name        TEXT NOT NULL,
        created     TEXT NOT NULL
    );
    """,
    # terminal or ACP (issue 58)
    """
    ALTER TABLE sessions ADD COLUMN mode TEXT NOT NULL DEFAULT 'terminal';
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


_COLUMNS = [f.name for f in dataclasses.fields(Session)]
_SHARE_COLUMNS = [f.name for f in dataclasses.fields(Share)]
_JSON_COLUMNS = ("argv", "args", "env", "worktree")
#: the tables of jupyter_agents.spend.ledger, keyed by session_id
_USAGE_TABLES = ("usage_totals", "usage_messages", "usage_files", "usage_sessions")


def _encode(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: json.dumps(v) if k in _JSON_COLUMNS and v is not None else v for k, v in values.items()
    }


def _session(row: sqlite3.Row) -> Session:
    """The record a ``sessions`` row holds (its JSON columns decoded)."""
    data = dict(row)
    for key in _JSON_COLUMNS:
        data[key] = None if data[key] is None else json.loads(data[key])
    data["ambiguous"] = bool(data["ambiguous"])
    return Session(**data)


class ShareTable(Protocol):
    """What sharing may do with the store (:class:`SessionStore` is one): the grants
    and who was admitted through them, and nothing of the sessions' records."""

    def add_share(self, share: Share) -> None: ...

    def share(self, share_id: str) -> Share: ...

    def shares(
        self, active_at: str | None = None, ids: Iterable[str] | None = None
    ) -> builtins.list[Share]: ...

    def set_share_hub_code(self, share_id: str, code_id: str | None) -> None: ...

    def admit(self, share_id: str, user: str, when: str) -> None: ...

    def admissions(self) -> builtins.list[Admission]: ...

    def forget_admissions(self, user: str, share_ids: Iterable[str]) -> None: ...

    def revoke_share(self, share_id: str, when: str) -> bool: ...


class PushTable(Protocol):
    """What notifications may do with the store (:class:`SessionStore` is one): the
    owner's Web Push subscriptions, and nothing of the sessions' records."""

    def add_push_subscription(self, subscription: PushSubscription) -> PushSubscription: ...

    def push_subscriptions(self, user: str) -> builtins.list[PushSubscription]: ...

    def remove_push_subscription(self, user: str, subscription_id: str) -> bool: ...

    def remove_push_endpoint(self, endpoint: str) -> bool: ...


class SessionStore:
    """The SQLite-backed session store of one state dir.

    All methods are synchronous and short; they are safe to call from several processes,
    and several threads, at once. Every write is one transaction.

    The store owns its process's one connection to the file; the usage ledger
    (:class:`~jupyter_agents.spend.ledger.UsageLedger`) borrows it through :meth:`connection`.
    :meth:`close` waits for the statement in flight, and every call after it raises
    :class:`~jupyter_agents.core.errors.StoreClosed`: SQLite does not survive a connection
    closed under a running statement.
    """

    #: the journal mode SQLite reported when the store was opened
    journal: str = ""

    def __init__(self, path: str | Path, journal: str = "auto") -> None:
        """Open (and migrate) the store at ``path``; ``journal``: ``auto`` or one of
        :data:`JOURNAL_MODES` (see :func:`journal_mode`)."""
        self.path = Path(path)
        mode = journal_mode(self.path, journal)
        # one connection, shared by this process's threads one call at a time
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._db = sqlite3.connect(
                self.path, timeout=10, isolation_level=None, check_same_thread=False
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA busy_timeout = 10000")
            self.journal = self._db.execute(f"PRAGMA journal_mode = {mode}").fetchone()[0]
            # NORMAL is durable enough with WAL only (SQLite's docs)
            sync = "NORMAL" if self.journal == "wal" else "FULL"
            self._db.execute(f"PRAGMA synchronous = {sync}")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(
                f"{self.path} is not a usable jupyter_agents session store ({e}); "
                "move it aside to start with an empty one"
            ) from e

    def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Close the connection once no thread uses it; later calls raise
        :class:`~jupyter_agents.core.errors.StoreClosed`. Waits at most ``timeout`` s for the
        statement in flight; if it has not ended by then the connection is left open
        (never closed under a statement) and False is returned. Idempotent."""
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            if not self._closed:
                self._closed = True
                self._db.close()
            return True
        finally:
            self._lock.release()

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, for this thread alone until the block ends (its rows are
        :class:`sqlite3.Row`); :class:`~jupyter_agents.core.errors.StoreClosed` once closed.
        SQLite's operational failures in the block (the store locked by another process
        past the busy timeout, a full disk) come out as
        :class:`~jupyter_agents.core.errors.StoreUnavailable` (503): every caller, the
        server's periodic work included, handles them as it handles any of our errors."""
        with self._lock:
            if self._closed:
                raise StoreClosed(f"{self.path}: the session store is closed (server stopping)")
            try:
                yield self._db
            except sqlite3.OperationalError as e:
                raise StoreUnavailable(
                    f"{self.path}: the session store cannot be used just now ({e}); "
                    "nothing was changed"
                ) from e

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self.connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            else:
                try:
                    db.execute("COMMIT")
                except sqlite3.OperationalError:  # (a rollback journal's readers): undone
                    db.execute("ROLLBACK")
                    raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[sqlite3.Row]:
        with self.connection() as db:
            return db.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        with self._transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this "
                    f"jupyter_agents understands ({SCHEMA_VERSION}); upgrade jupyter_agents"
                )
            if version == 0:
                tables = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
                if tables:
                    raise StoreError(f"{self.path} is an SQLite file of something else")
            for target in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {target + 1}")

    # -- reads -----------------------------------------------------------------------

    def get(self, session_id: str) -> Session:
        """The record with this id; :class:`NotFound` if there is none."""
        rows = self._query("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            raise NotFound(f"no session with id {session_id!r}")
        return _session(rows[0])

    def find_live(self, name: str) -> Session | None:
        """The ``running`` session called ``name``, if any."""
        rows = self._query("SELECT * FROM sessions WHERE name = ? AND status = 'running'", (name,))
        return _session(rows[0]) if rows else None

    def list(
        self, statuses: Iterable[Status] | None = None, kinds: Iterable[str] | None = None
    ) -> builtins.list[Session]:
        """Records in creation order, optionally only those in ``statuses`` and of
        ``kinds`` (rows of other kinds are not even decoded)."""
        where: builtins.list[str] = []
        params: builtins.list[str] = []
        for column, values in (("status", statuses), ("kind", kinds)):
            if values is not None:
                wanted = builtins.list(values)
                if not wanted:
                    return []
                where.append(f"{column} IN ({','.join('?' * len(wanted))})")
                params += wanted
        condition = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._query(
            f"SELECT * FROM sessions {condition}ORDER BY created, rowid",  # noqa: S608
            params,
        )
        return [_session(r) for r in rows]

    def get_many(self, ids: Iterable[str]) -> builtins.list[Session]:
        """The records among ``ids`` that exist (any status)."""
        wanted = list(ids)
        found: list[Session] = []
        for i in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
            part = wanted[i : i + 500]
            rows = self._query(
                f"SELECT * FROM sessions WHERE id IN ({','.join('?' * len(part))})",  # noqa: S608
                part,
            )
            found.extend(_session(r) for r in rows)
        return found

    def data_version(self) -> int:
        """A number that changes whenever another connection (another process) commits
        a change to the store: a cheap way to notice writes made elsewhere."""
        return int(self._query("PRAGMA data_version")[0][0])

    def live_names(self) -> set[str]:
        return {r[0] for r in self._query("SELECT name FROM sessions WHERE status='running'")}

    # -- writes ----------------------------------------------------------------------

    def add(self, session: Session) -> None:
        """Insert a new record. :class:`Conflict` if the id exists or a running session
        already has this name."""
        values = _encode(dataclasses.asdict(session))
        marks = ",".join("?" * len(_COLUMNS))
        try:
            with self._transaction() as db:
                db.execute(
                    f"INSERT INTO sessions ({','.join(_COLUMNS)}) VALUES ({marks})",  # noqa: S608
                    [values[c] for c in _COLUMNS],
                )
        except sqlite3.IntegrityError as e:
            raise Conflict(
                f"a session with id {session.id!r}, live name {session.name!r} or "
                f"conversation {session.conversation_id!r} already exists"
            ) from e

    def update(
        self,
        session_id: str,
        *,
        expect: Sequence[Status] | None = None,
        was: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> bool:
        """Set ``fields`` on one record, atomically.

        With ``expect``, the change applies only while the record's status is one of them;
        with ``was``, only while those fields still hold those values (compare-and-set: a
        concurrent writer's newer decision is never overwritten, and of two writers that
        read the same value only the first changes it). Returns whether a row changed.
        :class:`Conflict` if the change would give a live name or conversation id to a
        second session.
        """
        unknown = (set(fields) | set(was or {})) - set(_COLUMNS)
        if unknown:
            raise ValueError(f"unknown session fields {sorted(unknown)}")
        fields = _encode(fields)
        sets = ", ".join(f"{k} = ?" for k in fields)
        sql = f"UPDATE sessions SET {sets} WHERE id = ?"  # noqa: S608
        params: list[Any] = [*fields.values(), session_id]
        if expect is not None:
            sql += f" AND status IN ({','.join('?' * len(expect))})"
            params.extend(expect)
        for name, value in _encode(dict(was or {})).items():
            sql += f" AND {name} IS ?"
            params.append(value)
        try:
            with self._transaction() as db:
                return db.execute(sql, params).rowcount > 0
        except sqlite3.IntegrityError as e:
            raise Conflict(
                f"session {session_id!r}: its name or conversation id belongs to another session"
            ) from e

    def forget(self, session_id: str, expect: Sequence[Status]) -> Session | None:
        """Delete one record, only while its status is one of ``expect`` (and its usage,
        :mod:`jupyter_agents.spend.ledger`); the record deleted, or None (unknown, or in another
        status)."""
        marks = ",".join("?" * len(expect))
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT * FROM sessions WHERE id = ? AND status IN ({marks})",  # noqa: S608
                [session_id, *expect],
            ).fetchall()
            if not rows:
                return None
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            for table in _USAGE_TABLES:
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))  # noqa: S608
        return _session(rows[0])

    # -- shares ----------------------------------------------------------------------

    def add_share(self, share: Share) -> None:
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO shares ({','.join(_SHARE_COLUMNS)}) "  # noqa: S608
                f"VALUES ({','.join('?' * len(_SHARE_COLUMNS))})",
                [getattr(share, name) for name in _SHARE_COLUMNS],
            )

    def share(self, share_id: str) -> Share:
        """The grant with this id; :class:`NotFound` if there is none."""
        rows = self._query("SELECT * FROM shares WHERE id = ?", (share_id,))
        if not rows:
            raise NotFound(f"no share with id {share_id!r}")
        return Share(**dict(rows[0]))

    def shares(
        self, active_at: str | None = None, ids: Iterable[str] | None = None
    ) -> builtins.list[Share]:
        """Grants in creation order; with ``active_at``, only those active then; with
        ``ids``, only those among them."""
        if ids is None:
            rows = self._query("SELECT * FROM shares ORDER BY created, rowid")
        else:
            wanted = builtins.list(ids)
            rows = []
            for i in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                part = wanted[i : i + 500]
                marks = ",".join("?" * len(part))
                rows += self._query(f"SELECT * FROM shares WHERE id IN ({marks})", part)  # noqa: S608
            rows.sort(key=lambda r: r["created"])
        found = [Share(**dict(r)) for r in rows]
        return found if active_at is None else [s for s in found if s.active(active_at)]

    def set_share_hub_code(self, share_id: str, code_id: str | None) -> None:
        """Record (or, with None, forget) the hub share code made for a grant."""
        with self._transaction() as db:
            db.execute("UPDATE shares SET hub_code = ? WHERE id = ?", (code_id, share_id))

    def admit(self, share_id: str, user: str, when: str) -> None:
        """Record an :class:`Admission` (once per grant and user)."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO share_admissions (share_id, user, admitted) "
                "VALUES (?, ?, ?)",
                (share_id, user, when),
            )

    def admissions(self) -> builtins.list[Admission]:
        """Every :class:`Admission` not yet forgotten, oldest first."""
        rows = self._query("SELECT * FROM share_admissions ORDER BY admitted, rowid")
        return [Admission(**dict(r)) for r in rows]

    def forget_admissions(self, user: str, share_ids: Iterable[str]) -> None:
        """Drop ``user``'s admissions through ``share_ids`` (their hub access ended)."""
        with self._transaction() as db:
            db.executemany(
                "DELETE FROM share_admissions WHERE share_id = ? AND user = ?",
                [(share_id, user) for share_id in share_ids],
            )

    def revoke_share(self, share_id: str, when: str) -> bool:
        """Mark a grant revoked at ``when``; whether it was active until now."""
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE shares SET revoked = ? WHERE id = ? AND revoked IS NULL AND expires > ?",
                (when, share_id, when),
            )
            return cursor.rowcount > 0

    # -- Web Push subscriptions --------------------------------------------------------

    def add_push_subscription(self, subscription: PushSubscription) -> PushSubscription:
        """Keep a subscription; one for an endpoint kept already replaces its keys, name
        and user (the browser subscribed again) and keeps its id. The one kept."""
        s = subscription
        with self._transaction() as db:
            db.execute(
                "INSERT INTO push_subscriptions (id, user, endpoint, p256dh, auth, name, "
                "created) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (endpoint) DO UPDATE SET "
                "user = excluded.user, p256dh = excluded.p256dh, auth = excluded.auth, "
                "name = excluded.name",
                (s.id, s.user, s.endpoint, s.p256dh, s.auth, s.name, s.created),
            )
            row = db.execute(
                "SELECT * FROM push_subscriptions WHERE endpoint = ?", (s.endpoint,)
            ).fetchone()
        return PushSubscription(**dict(row))

    def push_subscriptions(self, user: str) -> builtins.list[PushSubscription]:
        """``user``'s subscriptions, oldest first."""
        rows = self._query(
            "SELECT * FROM push_subscriptions WHERE user = ? ORDER BY created, rowid", (user,)
        )
        return [PushSubscription(**dict(r)) for r in rows]

    def remove_push_subscription(self, user: str, subscription_id: str) -> bool:
        """Drop one of ``user``'s subscriptions; whether there was one."""
        with self._transaction() as db:
            cursor = db.execute(
                "DELETE FROM push_subscriptions WHERE id = ? AND user = ?",
                (subscription_id, user),
            )
            return cursor.rowcount > 0

    def remove_push_endpoint(self, endpoint: str) -> bool:
        """Drop the subscription of ``endpoint`` (its push service said it is gone)."""
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM push_subscriptions WHERE endpoint = ?", (endpoint,))
            return cursor.rowcount > 0


def new_session_id() -> str:
    """A fresh session id: ``\\w+``, sortable by creation time, unique in practice."""
    return f"{int(time.time() * 1000):x}{secrets.token_hex(4)}"
