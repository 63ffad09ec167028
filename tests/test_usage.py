"""Cost per session (issue 30): tokens by kind read incrementally from the agents'
conversation files (real files in the real shapes: Claude's assistant records with
``message.usage``, Codex's ``token_count`` events), priced from the price table, split
by whether anybody watched; through the ledger, a real server with the fake CLIs, the
REST model, the events and the CLI."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

from jupyter_agents.agents.archive import ConversationFile
from jupyter_agents.clients.cli import main
from jupyter_agents.clients.display import cost_cell
from jupyter_agents.config import AgentsSettings
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore
from jupyter_agents.pytest_plugin import EventClient, ServerProcess, poll
from jupyter_agents.spend.ledger import UsageLedger
from jupyter_agents.spend.prices import DEFAULT_PRICES, PriceTable, check_prices

# what the fakes write (tests/fakes/fake_agent.py), restated: the test must not trust them
TOOL = {"input": 4, "cache_creation": 2048, "cache_read": 12000, "output": 120}
REPLY = {"input": 6, "cache_creation": 180, "cache_read": 14000, "output": 64}
TURN = {k: TOOL[k] + REPLY[k] for k in TOOL}
CODEX_TURN = {"input": 3000, "cache_read": 6000, "output": 400, "cache_creation": 0}
SONNET = "claude-sonnet-4-5-20250929"
PRICES = {
    "claude-sonnet-4*": {"input": 3, "output": 15, "cache_creation": 3.75, "cache_read": 0.3},
    "gpt-5.4": {"input": 2.5, "output": 15, "cache_read": 0.25},
}


def cost(tokens: dict[str, int], prices: dict[str, float]) -> float:
    return sum(tokens[k] * prices.get(k, 0.0) for k in tokens) / 1e6


def tokens_of(model: dict[str, Any]) -> dict[str, int]:
    return {k: model["tokens"][k] for k in ("input", "output", "cache_creation", "cache_read")}


def claude_line(
    message_id: str | None, model: str, usage: dict[str, int], when: float | None = None
) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(when or time.time()))
    message: dict[str, Any] = {"role": "assistant", "model": model, "content": []}
    if message_id:
        message["id"] = message_id
    message["usage"] = {
        "input_tokens": usage.get("input", 0),
        "output_tokens": usage.get("output", 0),
        "cache_creation_input_tokens": usage.get("cache_creation", 0),
        "cache_read_input_tokens": usage.get("cache_read", 0),
    }
    return json.dumps({"type": "assistant", "timestamp": stamp, "message": message}) + "\n"


class Ledger:
    """A store and its ledger on disk, with sessions whose files the test writes."""

    def __init__(self, tmp_path: Path, prices: dict[str, Any] | None = None) -> None:
        self.dir = tmp_path
        self.store = SessionStore(tmp_path / "sessions.db")
        self.ledger = UsageLedger(self.store, PriceTable(prices or PRICES))
        self.files: dict[str, list[ConversationFile]] = {}

    def session(self, kind: str = "claude") -> Session:
        session = Session(uuid.uuid4().hex[:12], f"t{len(self.files)}", "running", "tmux")
        session.kind = kind
        session.conversation_id = str(uuid.uuid4())
        session.created = "2020-01-01T00:00:00Z"
        self.store.add(session)
        self.files[session.id] = []
        return session

    def conversation(self, session: Session, cid: str | None = None) -> Path:
        cid = cid or session.conversation_id or ""
        path = self.dir / f"{session.id}-{cid}.jsonl"
        path.touch()
        self.files[session.id].append(ConversationFile(cid, path, False))
        return path

    def update(self, *sessions: Session) -> dict[str, Any]:
        return self.ledger.update(
            [self.store.get(s.id) for s in sessions], lambda s: self.files[s.id]
        )

    def model(self, session: Session) -> dict[str, Any]:
        model = self.ledger.model(self.store.get(session.id))
        assert model is not None
        return model

    def close(self) -> None:
        self.store.close()  # the ledger's connection too


@pytest.fixture
def book(tmp_path: Path) -> Any:
    ledger = Ledger(tmp_path)
    yield ledger
    ledger.close()


def test_claude_totals_count_each_message_once_and_each_byte_once(book):
    session = book.session()
    path = book.conversation(session)
    with path.open("a") as f:
        f.write(json.dumps({"type": "user", "message": {"content": "usage please"}}) + "\n")
        f.write(claude_line("msg_1", SONNET, TOOL))
        # one reply in two records (a thinking and a text block), the first still streaming
        f.write(claude_line("msg_2", SONNET, {**REPLY, "output": 12}))
        f.write(claude_line("msg_2", SONNET, REPLY))
    book.update(session)
    model = book.model(session)
    assert tokens_of(model) == TURN
    assert model["cost"] == pytest.approx(cost(TURN, PRICES["claude-sonnet-4*"]), abs=1e-6)
    assert model["unknown_models"] == [] and model["skipped_records"] == 0
    assert list(model["models"]) == [SONNET]

    # appended later: only the new bytes are read; nothing before counts again
    first = path.stat().st_size
    assert book.ledger.parsed_bytes == first
    book.update(session)
    assert book.ledger.parsed_bytes == first
    with path.open("a") as f:
        f.write(claude_line("msg_3", SONNET, TOOL))
        f.write(claude_line("msg_2", SONNET, REPLY))  # the same message again: nothing
    changes = book.update(session)
    assert book.ledger.parsed_bytes == path.stat().st_size
    assert changes[session.id].records == 1
    model = book.model(session)
    assert tokens_of(model) == {k: TURN[k] + TOOL[k] for k in TURN}
    assert model["tokens"]["total"] == sum(TURN.values()) + sum(TOOL.values())


def test_unknown_models_count_tokens_without_a_cost(book):
    session = book.session()
    path = book.conversation(session)
    path.write_text(claude_line("m1", "claude-next-9", TOOL))
    book.update(session)
    model = book.model(session)
    assert model["cost"] is None and model["unknown_models"] == ["claude-next-9"]
    assert tokens_of(model) == TOOL
    assert cost_cell(model) == "14.2k tok"
    with path.open("a") as f:
        f.write(claude_line("m2", SONNET, REPLY))
    book.update(session)
    model = book.model(session)
    assert model["cost"] == pytest.approx(cost(REPLY, PRICES["claude-sonnet-4*"]), abs=1e-6)
    assert model["unknown_models"] == ["claude-next-9"]
    assert model["models"]["claude-next-9"]["cost"] is None
    assert cost_cell(model).endswith("+")  # some of it is not priced


def test_records_that_do_not_parse_are_skipped_and_counted(book):
    session = book.session()
    path = book.conversation(session)
    with path.open("a") as f:
        f.write('{"type": "assistant", "message": {"usage": {"input_tokens": 1\n')  # cut
        f.write(claude_line("ok", SONNET, TOOL))
        bad = json.loads(claude_line("bad", SONNET, TOOL))
        bad["message"]["usage"]["output_tokens"] = "many"
        f.write(json.dumps(bad) + "\n")
        f.write(claude_line("half", SONNET, REPLY)[:-20])  # being written: no newline yet
    book.update(session)
    model = book.model(session)
    assert model["skipped_records"] == 2
    assert tokens_of(model) == TOOL
    with path.open("a") as f:
        f.write(claude_line("half", SONNET, REPLY)[-20:])  # the line completes
    book.update(session)
    model = book.model(session)
    assert tokens_of(model) == TURN and model["skipped_records"] == 2


def test_a_rewritten_file_counts_nothing_twice(book):
    session = book.session()
    path = book.conversation(session)
    lines = [claude_line("a", SONNET, TOOL), claude_line("b", SONNET, REPLY)]
    path.write_text(lines[0])
    book.update(session)
    # the CLI rewrites its file (e.g. a compaction): same records and a new one
    path.write_text("".join([json.dumps({"type": "summary"}) + "\n", *lines]))
    book.update(session)
    assert tokens_of(book.model(session)) == TURN
    # and a truncated one is read from its start
    path.write_text(lines[1])
    book.update(session)
    assert tokens_of(book.model(session)) == TURN


def codex_lines(model: str, usage: dict[str, int], times: list[float]) -> str:
    """A rollout's lines: usage not known yet, a turn, its token count twice (repeated
    unchanged, as codex does for a rate-limit update), for each of ``times``."""
    out = [
        {
            "timestamp": "2026-12-01T00:00:00.000Z",
            "type": "session_meta",
            "payload": {"id": "x", "cwd": "/"},
        },
        {"timestamp": "2026-12-01T00:00:00.000Z", "type": "event_msg",
         "payload": {"type": "token_count", "info": None, "rate_limits": {}}},
    ]  # fmt: skip
    total = 0
    for when in times:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(when))
        out.append({"timestamp": stamp, "type": "turn_context", "payload": {"model": model}})
        total += usage["total_tokens"]
        info = {
            "total_token_usage": {**usage, "total_tokens": total},
            "last_token_usage": usage,
            "model_context_window": 272000,
        }
        event = {"type": "token_count", "info": info, "rate_limits": {}}
        out += [{"timestamp": stamp, "type": "event_msg", "payload": event}] * 2
    return "".join(json.dumps(line) + "\n" for line in out)


CODEX_LAST = {
    "input_tokens": 9000,
    "cached_input_tokens": 6000,
    "output_tokens": 400,
    "reasoning_output_tokens": 128,
    "total_tokens": 9400,
}


def test_codex_token_counts_once_each_as_disjoint_kinds(book):
    session = book.session("codex")
    path = book.conversation(session)
    now = time.time()
    path.write_text(codex_lines("gpt-5.4", CODEX_LAST, [now - 10, now - 5]))
    book.update(session)
    model = book.model(session)
    assert tokens_of(model) == {k: 2 * v for k, v in CODEX_TURN.items()}
    assert model["cost"] == pytest.approx(2 * cost(CODEX_TURN, PRICES["gpt-5.4"]), abs=1e-6)
    # the same rollout read again from its start (replaced): nothing counts twice
    path.write_text(codex_lines("gpt-5.4", CODEX_LAST, [now - 10, now - 5, now]))
    book.update(session)
    assert tokens_of(book.model(session)) == {k: 3 * v for k, v in CODEX_TURN.items()}


def test_codex_cache_writes_count_as_cache_creation(book):
    """Codex 0.171 counts the prompt tokens written to the cache apart
    (``cache_write_input_tokens``, inside ``input_tokens`` as the cached ones are): they
    are cache creation, not plain input."""
    session = book.session("codex")
    written = {**CODEX_LAST, "cache_write_input_tokens": 500}
    book.conversation(session).write_text(codex_lines("gpt-5.4", written, [time.time()]))
    book.update(session)
    assert tokens_of(book.model(session)) == {**CODEX_TURN, "input": 2500, "cache_creation": 500}


def test_clear_starts_a_new_conversation_of_the_same_session(book):
    session = book.session()
    old = book.conversation(session)
    old.write_text(claude_line("a", SONNET, TOOL))
    book.update(session)
    new = book.conversation(session, str(uuid.uuid4()))
    new.write_text(claude_line("b", SONNET, REPLY))
    book.update(session)
    model = book.model(session)
    assert tokens_of(model) == TURN
    assert [c["conversation_id"] for c in model["conversations"]] == [
        f.conversation for f in book.files[session.id]
    ]
    assert [tokens_of(c) for c in model["conversations"]] == [TOOL, REPLY]


def test_what_was_spent_while_nobody_watched(book):
    """Records are split by when they were written: while a viewer that can type was
    connected (watched) or not; the allowance counts only the unwatched ones since
    the last human input."""
    session = book.session()
    path = book.conversation(session)
    now = time.time()
    book.ledger.track(book.store.get(session.id), now - 100)  # unattended from the start
    book.ledger.set_watched(session.id, True, now - 80)
    book.ledger.reset_allowance(session.id, now - 75)  # a person typed
    book.ledger.set_watched(session.id, False, now - 60)
    with path.open("a") as f:
        f.write(claude_line("before", SONNET, TOOL, now - 90))  # unwatched, before input
        f.write(claude_line("watched", SONNET, REPLY, now - 70))  # watched
        f.write(claude_line("after", SONNET, TOOL, now - 50))  # unwatched since input
    book.update(session)
    model = book.model(session)
    assert tokens_of(model) == {k: 2 * TOOL[k] + REPLY[k] for k in TOOL}
    assert {k: model["unattended"]["tokens"][k] for k in TOOL} == {k: 2 * TOOL[k] for k in TOOL}
    allowance = model["allowance"]
    assert {k: allowance["tokens"][k] for k in TOOL} == TOOL
    assert allowance["cost"] == pytest.approx(cost(TOOL, PRICES["claude-sonnet-4*"]), abs=1e-6)
    assert model["watched"] is False
    # records of before the ledger knew the session (an upgrade) count as watched
    other = book.session()
    other_path = book.conversation(other)
    other_path.write_text(claude_line("old", SONNET, TOOL, now - 3600))
    book.update(other)
    assert book.model(other)["unattended"]["tokens"]["total"] == 0


def test_the_price_table_and_the_limit_are_checked():
    assert PriceTable().prices("claude-opus-4-5-20251101")["input"] == 5.0
    assert PriceTable().prices("claude-opus-4-1-20250805")["input"] == 15.0
    assert PriceTable().prices("gpt-5.4-mini")["input"] == 0.75  # the longest pattern
    assert check_prices(DEFAULT_PRICES)
    for bad in (
        {"m": {"input": 1}},
        {"m": {"input": 1, "output": -2}},
        {"m": {"input": 1, "output": 2, "cache_writes": 1}},
        {"m": "cheap"},
        ["m"],
    ):
        with pytest.raises(ValueError):
            check_prices(bad)
        with pytest.raises(TraitError, match="'prices' trait"):
            AgentsSettings(prices=bad)
    for bad_limit in ({"dollars": 5}, {"cost": 0}, {"tokens": 1.5}, {"seconds": "1h"}, [1]):
        with pytest.raises(TraitError, match="'unattended_limit' trait"):
            AgentsSettings(unattended_limit=bad_limit)
    assert AgentsSettings(unattended_limit={"tokens": 10, "cost": 1}).unattended_limit == {
        "tokens": 10,
        "cost": 1.0,
    }


# -- through a real server and the fake CLIs ------------------------------------------


def usage_of(server: ServerProcess, sid: str) -> dict[str, Any]:
    status, model = server.request("GET", f"/api/agents/sessions/{sid}")
    assert status == 200, model
    return dict(model["usage"])


def spent(server: ServerProcess, sid: str, total: int, timeout: float = 20) -> dict[str, Any]:
    """The session's usage once its tokens reach ``total``."""
    found: dict[str, Any] = {}

    def check() -> bool:
        found.update(usage_of(server, sid))
        return bool(found["tokens"]["total"] >= total)

    try:
        poll(check, timeout=timeout, what=f"{total} tokens")
    except AssertionError:
        raise AssertionError(f"usage never reached {total}: {found}") from None
    return found


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def priced_server(agents_server: Any, fake_agents: Any, tmp_path: Path) -> ServerProcess:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {"prices": PRICES, "refresh_interval": 0.3}})
    )
    return agents_server(env=fake_agents.env)  # type: ignore[no-any-return]


def test_a_claude_sessions_usage_and_cost_reach_rest_events_and_cli(
    agents_server, fake_agents, project, tmp_path, capsys, monkeypatch
):
    server = priced_server(agents_server, fake_agents, tmp_path)
    events = EventClient(server)
    try:
        shell = server.new("shell", project)
        agent = server.new("claude", project, args=["--model", SONNET])
        sid = agent["id"]
        client = server.ws(agent["name"])
        client.wait_for("FAKE CLAUDE conversation")
        client.stdin("hello\r")
        client.wait_for("claude heard: hello")
        usage = spent(server, sid, sum(TURN.values()))
        assert tokens_of(usage) == TURN
        price = PRICES["claude-sonnet-4*"]
        assert usage["cost"] == pytest.approx(cost(TURN, price), abs=1e-6)
        assert usage["watched"] is True and usage["unattended"]["tokens"]["total"] == 0
        status, listed = server.request("GET", "/api/agents/sessions")
        assert status == 200, listed
        rows = {m["id"]: m for m in listed}
        assert rows[shell["id"]]["usage"] is None
        assert tokens_of(rows[sid]["usage"]) == TURN
        # a "usage" event carries it (throttled: a few, not one per record)
        got = poll(lambda: events.of(sid, "usage"), what="a usage event")
        assert tokens_of(got[-1]["usage"]) == TURN

        # /clear: a new conversation in the same session, its own line in the usage
        first = usage["conversations"][0]["conversation_id"]
        client.stdin("/clear\r")
        client.wait_for("cleared; conversation")
        client.stdin("again\r")
        client.wait_for("claude heard: again")
        usage = spent(server, sid, 2 * sum(TURN.values()))
        assert tokens_of(usage) == {k: 2 * v for k, v in TURN.items()}
        conversations = usage["conversations"]
        assert [c["conversation_id"] == first for c in conversations] == [True, False]
        assert [tokens_of(c) for c in conversations] == [TURN, TURN]
        client.close()
        # a change held back by the throttle is sent with the next refresh after it
        poll(
            lambda: tokens_of(events.of(sid, "usage")[-1]["usage"])["output"] == 2 * TURN["output"],
            timeout=15,
            what="the held-back usage event",
        )
    finally:
        events.close()
    usage_events = events.of(sid, "usage")
    assert 2 <= len(usage_events) <= 6, len(usage_events)

    # the CLI: a cost column, and the report per session, day and in total
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(server.state_dir))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    capsys.readouterr()
    assert main(["list", "--wide"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "COST" in table[0]
    row = next(line for line in table if line.startswith(sid))
    assert f"${2 * cost(TURN, price):.2f}" in row
    assert main(["cost", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in report["sessions"]] == [sid]
    assert tokens_of(report["total"]) == {k: 2 * v for k, v in TURN.items()}
    assert report["total"]["cost"] == pytest.approx(2 * cost(TURN, price), abs=1e-6)
    assert len(report["days"]) == 1 and report["days"][0]["cost"] == report["total"]["cost"]
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: every line whole
    assert main(["cost"]) == 0
    text = capsys.readouterr().out
    assert sid in text and "while nobody watched" in text.lower()


def test_a_codex_sessions_token_counts(agents_server, fake_agents, project, tmp_path):
    server = priced_server(agents_server, fake_agents, tmp_path)
    agent = server.new("codex", project)
    client = server.ws(agent["name"])
    client.wait_for("FAKE CODEX thread")
    client.stdin("hello\r")
    client.wait_for("codex heard: hello")
    usage = spent(server, agent["id"], sum(CODEX_TURN.values()))
    time.sleep(1)  # the repeated event is in the file too: it must not count
    usage = usage_of(server, agent["id"])
    assert tokens_of(usage) == CODEX_TURN
    assert list(usage["models"]) == ["gpt-5.4"]
    assert usage["cost"] == pytest.approx(cost(CODEX_TURN, PRICES["gpt-5.4"]), abs=1e-6)
    client.close()


def test_tokens_spent_while_nobody_watched(agents_server, fake_agents, project, tmp_path):
    """A turn typed while watching is attended; what the agent spends after its last
    viewer left is not; a viewer watching again (without typing) stops the count."""
    server = priced_server(agents_server, fake_agents, tmp_path)
    agent = server.new("claude", project, args=["--model", SONNET])
    sid = agent["id"]
    client = server.ws(agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    client.stdin("hello\r")
    client.wait_for("claude heard: hello")
    spent(server, sid, sum(TURN.values()))
    client.stdin("/spend 50 0.1\r")
    client.wait_for("spending")
    client.close()
    poll(lambda: usage_of(server, sid)["unattended"]["tokens"]["total"] > 60_000, timeout=20)
    back = server.ws(agent["name"])
    back.wait_for(lambda c: len(c.messages) >= 2)
    poll(lambda: usage_of(server, sid)["watched"], what="watched again")
    time.sleep(1.0)  # records of while it was still unwatched may be read a bit later
    before = usage_of(server, sid)
    time.sleep(1.5)
    after = usage_of(server, sid)
    assert after["tokens"]["total"] > before["tokens"]["total"]  # it still spends...
    assert after["unattended"] == before["unattended"] or (
        after["unattended"]["tokens"]["total"] - before["unattended"]["tokens"]["total"]
        < 25_000  # (at most a record written as the viewer connected)
    )  # ...but watched now
    unattended = after["unattended"]
    assert 0 < unattended["tokens"]["total"] < after["tokens"]["total"] - sum(TURN.values())
    assert unattended["seconds"] > 0
    assert unattended["cost"] == pytest.approx(
        cost({k: unattended["tokens"][k] for k in TURN}, PRICES["claude-sonnet-4*"]),
        abs=1e-5,
    )
    back.stdin("\x1b")  # stop it
    poll(lambda: fake_agents.records("interrupted"), what="the fake stopped")
    back.close()
