"""SessionStore: schema, migrations, refusal of foreign files, concurrent writers."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3
import subprocess
import sys

import pytest

from jupyter_agents.core.errors import Conflict, NotFound, StoreClosed, StoreError
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SCHEMA_VERSION, SessionStore, new_session_id


def make(sid: str, name: str = "1", status: str = "running") -> Session:
    return Session(id=sid, name=name, status=status, backend="tmux", argv=["bash", "-l"])


def test_round_trip_and_model(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    store.add(make("a"))
    got = store.get("a")
    assert got.argv == ["bash", "-l"] and got.status == "running"
    model = got.to_model()
    assert set(model) == {
        "id",
        "name",
        "kind",
        "status",
        "backend",
        "cwd",
        "argv",
        "pid",
        "created",
        "last_activity",
        "exit_code",
        "conversation_id",
        "rows",
        "cols",
        "args",
        "ambiguous",
        "reason",
        "attention",
        "attention_since",
        "attention_reason",
        "attention_source",
        "title",
        "title_source",
        "worktree",
        "mode",
    }
    assert "env" not in model and "pid_created" not in model
    assert (model["title"], model["title_source"]) == (None, None)
    store.update("a", program_title="vim: notes.md")
    assert store.get("a").to_model()["title_source"] == "program"
    store.update("a", title="Fix the tests")
    model = store.get("a").to_model()
    assert (model["title"], model["title_source"]) == ("Fix the tests", "user")
    record = {"repo": "/r", "path": "/r.worktrees/b", "branch": "b", "base": "main"}
    store.update("a", worktree=record)
    assert store.get("a").worktree == record  # kept as JSON
    with pytest.raises(NotFound):
        store.get("nope")
    assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_list_filters_by_status_and_kind(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    for sid, kind, status in [("a", "shell", "running"), ("b", "claude", "running"),
                              ("c", "claude", "exited"), ("d", "codex", "running")]:  # fmt: skip
        store.add(dataclasses.replace(make(sid, sid, status), kind=kind))
    assert [s.id for s in store.list()] == ["a", "b", "c", "d"]
    assert [s.id for s in store.list(["running"], ["claude", "codex"])] == ["b", "d"]
    assert [s.id for s in store.list(None, {"claude"})] == ["b", "c"]
    assert store.list(["running"], []) == [] and store.list([]) == []


def test_live_names_are_unique_only_among_running(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    store.add(make("a", "1"))
    with pytest.raises(Conflict):
        store.add(make("b", "1"))
    assert store.update("a", status="exited", expect=("running",))
    store.add(make("b", "1"))
    assert not store.update("a", status="interrupted", expect=("running",))  # compare-and-set
    assert store.get("a").status == "exited"


def test_of_two_writers_that_saw_one_value_only_the_first_changes_it(tmp_path):
    """A hook's SessionStart and the refresh pass both follow one ``/clear`` from the id
    they read: the second finds it moved, changes nothing, so nothing is published twice."""
    store = SessionStore(tmp_path / "s.db")
    store.add(make("a", "1"))
    old = store.get("a").conversation_id
    assert store.update("a", conversation_id="new", was={"conversation_id": old})
    assert not store.update("a", conversation_id="new", was={"conversation_id": old})
    assert store.update("a", title="t", was={"conversation_id": "new", "title": None})
    assert (store.get("a").conversation_id, store.get("a").title) == ("new", "t")
    with pytest.raises(ValueError, match="nope"):
        store.update("a", title="x", was={"nope": 1})
    store.close()


def test_schema_version_and_refusals(tmp_path):
    path = tmp_path / "s.db"
    SessionStore(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer"):
        SessionStore(path)

    foreign = tmp_path / "foreign.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE other (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="something else"):
        SessionStore(foreign)

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a usable"):
        SessionStore(garbage)


def _writer(path: str, prefix: str, n: int) -> None:
    store = SessionStore(path)
    for i in range(n):
        store.add(make(f"{prefix}{i}", f"{prefix}{i}"))


def test_concurrent_writers_from_processes(tmp_path):
    path = str(tmp_path / "s.db")
    SessionStore(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, p, 100)) for p in ("a", "b", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(SessionStore(path).list()) == 300


def test_ids_are_word_characters_and_distinct():
    ids = {new_session_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(i.isalnum() for i in ids)


def test_one_conversation_belongs_to_one_session(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    first, second = make("a", "1"), make("b", "2")
    first.conversation_id = "c1"
    store.add(first)
    second.conversation_id = "c1"
    with pytest.raises(Conflict):
        store.add(second)
    second.conversation_id = None
    store.add(second)
    with pytest.raises(Conflict):
        store.update("b", conversation_id="c1")
    assert store.get("b").conversation_id is None
    assert store.get("a").conversation_id == "c1"


#: run in a child so that a crash (SQLite used after close segfaults) is a failure of
#: this test, not the end of the suite
CLOSE_RACE = r"""
import collections, sys, threading, time
from jupyter_agents.core.errors import StoreClosed
from jupyter_agents.spend.ledger import UsageLedger
from jupyter_agents.core.records import Session, Share, utcnow_iso
from jupyter_agents.core.store import SessionStore

path, rounds = sys.argv[1], int(sys.argv[2])
seed = SessionStore(path)
for i in range(200):
    seed.add(Session(id=f"s{i}", name=str(i), status="exited", backend="tmux"))
    seed.add_share(Share(f"h{i}", f"s{i}", None, utcnow_iso(), "2999-01-01T00:00:00Z"))
seed.close()
outcomes = []
for r in range(rounds):
    store = SessionStore(path)
    ledger = UsageLedger(store)
    started = threading.Barrier(9)

    def reader(n):
        started.wait()
        try:
            while True:
                [store.list, store.shares, lambda: ledger.usage(["s1", "s2"])][n % 3]()
        except Exception as e:
            outcomes.append(type(e).__name__)  # one append: atomic across threads

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.002 * (r % 5))
    assert store.close()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
print(sorted(collections.Counter(outcomes).items()))
"""


def test_close_under_running_queries(tmp_path):
    """Closing the store while eight threads query it (sessions, shares, the usage
    ledger on the same connection), 60 times: the child never crashes, and every reader
    ends with StoreClosed, the clear error of a closed store, not SQLite's own."""
    run = subprocess.run(
        [sys.executable, "-c", CLOSE_RACE, str(tmp_path / "s.db"), "60"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.strip() == "[('StoreClosed', 480)]", run.stdout


def test_calls_after_close_raise_store_closed(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    store.add(make("a"))
    assert store.close() and store.close()  # idempotent
    for call in (lambda: store.get("a"), lambda: store.add(make("b", "2")), store.list):
        with pytest.raises(StoreClosed, match="closed"):
            call()
    assert StoreClosed.status == 503
