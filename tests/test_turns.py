"""An agent's turns as events of one shape (GET /api/agents/sessions/<id>/turns): a real
server, real tmux and the fake agent CLIs (tests/fakes/fake_agent.py, whose records
are those the real CLIs write); the real CLIs' own records are read in
tests/test_real_turns.py.

Read from a position, a reader gets what follows with no event twice and none missed
while the CLI appends; a record being written is left for the next read; damaged,
overlong and hostile records cost a bounded page and come out as text; the notebook
export validates and holds each tool call's command and output."""

from __future__ import annotations

import contextlib
import html
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import pytest
import yaml
from IPython.core.error import UsageError
from test_conversations import FAST, cli, wait_archived

from jupyter_agents.agents.claude import ClaudeKind, project_slug
from jupyter_agents.agents.turns import MAX_TEXT
from jupyter_agents.core import clock
from jupyter_agents.pytest_plugin import EventClient, ServerProcess, poll, power_loss, transcript

SCHEMA = yaml.safe_load(
    (Path(__file__).parents[1] / "jupyter_agents/event_schemas/turn/v1.yaml").read_text()
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def turns(server: ServerProcess, sid: str, after: str | None = None, limit: int | None = None):
    query = "&".join(f"{k}={v}" for k, v in (("after", after), ("limit", limit)) if v is not None)
    status, page = server.request("GET", f"/api/agents/sessions/{sid}/turns?{query}")
    assert status == 200, page
    for event in page["events"]:
        jsonschema.validate(event, SCHEMA)
    return page


def shown(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What a view shows of each event, in one line."""
    return [
        (e["type"], e.get("text") or e.get("title") or e.get("output") or "")
        for e in events
        if e["type"] != "other"
    ]


def test_claude_and_codex_turns_in_order_and_from_a_position(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    coder = server.new("codex", project)
    shell = server.new("shell", project)
    empty = {"events": [], "next": "0:0:0:00000000", "more": False, "reset": False}
    page = turns(server, agent["id"])
    assert {k: v for k, v in page.items() if k != "replay_start"} == empty  # (printed yet or not)

    server.type_line(agent["name"], "list the files please", "claude heard: list the files")
    wait_archived(server.state_dir, agent["id"])
    first = turns(server, agent["id"])
    assert shown(first["events"]) == [
        ("user_message", "list the files please"),
        ("tool_call", "Bash: echo fake"),
        ("tool_call_update", "fake"),
        ("thought", "the user typed a line"),
        ("agent_message", "claude heard: list the files please"),
    ]
    call, done = (e for e in first["events"] if e["type"].startswith("tool_call"))
    assert call["tool_kind"] == "execute" and call["input"]["command"] == "echo fake"
    assert call["tool_call_id"] == done["tool_call_id"] and done["status"] == "completed"

    # a reader that has the first page gets only what follows, as the CLI appends
    server.type_line(agent["name"], "and again", "claude heard: and again")
    more = turns(server, agent["id"], after=first["next"])
    assert shown(more["events"])[0] == ("user_message", "and again")
    assert shown(more["events"])[-1] == ("agent_message", "claude heard: and again")
    whole = turns(server, agent["id"])["events"]
    assert whole == first["events"] + more["events"]
    # from any event's id, page by page, one event at a time: the same events
    after, paged = whole[1]["id"], []
    while True:
        page = turns(server, agent["id"], after=after, limit=1)
        paged += page["events"]
        if not page["events"]:
            break
        after = page["next"]
    assert paged == whole[2:]
    assert turns(server, agent["id"], after=whole[-1]["id"])["events"] == []

    server.type_line(coder["name"], "and codex too", "codex heard: and codex too")
    wait_archived(server.state_dir, coder["id"])
    events = turns(server, coder["id"])["events"]
    assert shown(events) == [
        ("user_message", "and codex too"),
        ("tool_call", "shell: echo fake"),
        ("tool_call_update", "fake\n"),
        ("agent_message", "codex heard: and codex too"),
    ]
    assert {e["raw_type"] for e in events if e["type"] == "other"} == {
        "session_meta",
        "turn_context",
    }

    for path, code, message in [
        (f"{shell['id']}/turns", 400, "is a shell session"),
        (f"{agent['id']}/turns?after=1:2", 400, "invalid position"),
        (f"{agent['id']}/turns?limit=0", 400, "limit"),
        ("nope/turns", 404, "nope"),
    ]:
        status, body = server.request("GET", f"/api/agents/sessions/{path}")
        assert status == code and message in body["message"], (path, status, body)


def test_a_record_being_written_waits_and_bad_records_cost_a_bounded_page(
    agents_server, fake_agents, project
):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "first-turn", "claude heard: first-turn")
    source = wait_archived(server.state_dir, agent["id"])
    before = turns(server, agent["id"])
    hostile = '<img src="https://example.com/x.png"><script>alert(1)</script>\x1b[2J'
    huge = "y" * (MAX_TEXT * 3)
    records = [
        b"\xff\xfe{this is not json\n",
        json.dumps({"type": "assistant", "message": {"content": hostile}}).encode() + b"\n",
        json.dumps({"type": "assistant", "message": {"content": huge}}).encode() + b"\n",
        b'{"type": "file-history-snapshot", "snapshot": {}}\n',
    ]
    with source.open("ab") as f:
        f.writelines(records)
        f.write(b'{"type": "user", "message": {"role": "user", "content": "cut of')  # mid-write
    page = turns(server, agent["id"], after=before["next"])
    assert [(e["type"], e.get("raw_type")) for e in page["events"]] == [
        ("other", "not JSON"),
        ("agent_message", None),
        ("agent_message", None),
        ("other", "file-history-snapshot"),
    ]
    _, said, long, _ = page["events"]
    assert said["text"] == hostile  # as text: the view renders it, never as HTML
    assert len(long["text"]) == MAX_TEXT and long["cut"] is True
    with source.open("ab") as f:  # the CLI finishes the record
        f.write(b' now"}}\n')
    (last,) = turns(server, agent["id"], after=page["next"])["events"]
    assert (last["type"], last["text"]) == ("user_message", "cut of now")


def test_a_record_longer_than_the_limit_is_one_event(tmp_path, monkeypatch):
    from jupyter_agents.agents.archive import ConversationFile
    from jupyter_agents.sessions import turns as reader

    monkeypatch.setattr(reader, "MAX_RECORD", 1000)
    path = tmp_path / "c.jsonl"
    text = json.dumps({"type": "user", "message": {"content": "x" * 5000}})
    path.write_text(text + "\n" + json.dumps({"type": "user", "message": {"content": "ok"}}) + "\n")
    page = reader.read_turns(ClaudeKind(["claude"]), [ConversationFile("c", path, False)])
    assert [(e["type"], e.get("raw_type") or e.get("text")) for e in page.events] == [
        ("other", f"a record of {len(text) + 1} bytes, not read"),
        ("user_message", "ok"),
    ]


def test_a_file_the_cli_rewrote_starts_the_view_over(tmp_path):
    """A CLI may rewrite its file (Claude Code 2.1.197 removes a record by rewriting
    what follows it): a position read before is stale then, and the next page starts
    over (reset) rather than skip or repeat what moved."""
    from jupyter_agents.agents.archive import ConversationFile
    from jupyter_agents.sessions import turns as reader

    def said(text: str, who: str = "user") -> str:
        return json.dumps({"type": who, "message": {"content": text}}) + "\n"

    path = tmp_path / "c.jsonl"
    path.write_text(said("one") + said("two", "assistant"))
    files = [ConversationFile("c", path, False)]
    kind = ClaudeKind(["claude"])
    first = reader.read_turns(kind, files)
    assert [e["text"] for e in first.events] == ["one", "two"] and not first.reset
    with path.open("a") as f:  # appended: what follows, nothing again
        f.write(said("three"))
    page = reader.read_turns(kind, files, first.next)
    assert [e["text"] for e in page.events] == ["three"] and not page.reset
    # rewritten, a metadata record on top: the old position is stale
    path.write_text(
        '{"type": "ai-title", "aiTitle": "t"}\n' + said("one") + said("two", "assistant")
    )
    page = reader.read_turns(kind, files, page.next)
    assert page.reset
    assert [e.get("text", e["type"]) for e in page.events] == ["other", "one", "two"]
    after = reader.read_turns(kind, files, reader.parse_position(page.events[1]["id"]))
    assert [e["text"] for e in after.events] == ["two"] and not after.reset


#: a conversation file as Claude Code 2.1.197 wrote it (trimmed: bulky fields dropped)
#: in a run of tests/test_real_turns.py under load: its queued writes put the answer's
#: two records (bytes 208 and 502) before the prompt's (1048) and its attachments,
#: which the answer names as its parent; the file was only ever appended to
QUEUED_WRITES = Path(__file__).parent / "data" / "claude-2.1.197-prompt-after-answer.jsonl"
#: its turns in conversation order (the ``parentUuid`` chain)
CHAIN = [
    ("user_message", "print the marker"),
    ("agent_message", "Planning-it"),
    ("tool_call", "TaskCreate: Print the marker"),
    ("tool_call_update", "Task #1 created successfully: Print the marker"),
    ("plan", ""),
    ("agent_message", "Starting-it"),
]


def _follow(kind, files, after, limit, view=()):
    """Every page from ``after``: what a reader that showed ``view`` shows then (a page
    that starts over draws it anew), and where it is."""
    from jupyter_agents.sessions import turns as reader

    shown_now = list(view)
    while True:
        page = reader.read_turns(kind, files, after, limit)
        shown_now = list(page.events) if page.reset else shown_now + page.events
        after = page.next
        if not page.more:
            return shown_now, after


def test_a_prompt_written_after_its_answer_comes_before_it(tmp_path):
    """One read of a file whose records Claude Code wrote out of order gives the turns in
    the order of their parentUuid chain, and so does every page size that follows
    ``next`` (each event once, with the same id)."""
    from jupyter_agents.agents.archive import ConversationFile
    from jupyter_agents.sessions import turns as reader

    lines = QUEUED_WRITES.read_bytes().splitlines(keepends=True)
    types = [json.loads(line)["type"] for line in lines]
    assert types.index("assistant") < types.index("user")  # as the CLI laid it out
    kind, files = ClaudeKind(["claude"]), [ConversationFile("c", QUEUED_WRITES, False)]
    whole = reader.read_turns(kind, files, limit=reader.MAX_EVENTS)
    assert shown(whole.events)[: len(CHAIN)] == CHAIN, shown(whole.events)
    assert shown(whole.events)[-1] == ("agent_message", "Printed-it")
    assert not whole.more and whole.next.offset == len(b"".join(lines))
    for limit in range(1, 8):
        events, end = _follow(kind, files, reader.START, limit)
        assert events == whole.events and end == whole.next, limit
        # from any event's id: what follows it, nothing twice
        for n, event in enumerate(whole.events):
            after = reader.parse_position(event["id"])
            assert _follow(kind, files, after, limit)[0] == whole.events[n + 1 :], (limit, n)


def test_a_reader_that_passed_the_answer_draws_the_turn_again_when_its_prompt_comes(tmp_path):
    """Followed as the CLI writes it: a reader that read the answer before the prompt's
    records were written (they name none of the answer's) gets a page that starts over
    (``reset``) once they are, in conversation order; at any cut of the file and page
    size, what it shows in the end is the one read of the whole file."""
    from jupyter_agents.agents.archive import ConversationFile
    from jupyter_agents.sessions import turns as reader

    data = QUEUED_WRITES.read_bytes()
    kind = ClaudeKind(["claude"])
    path = tmp_path / "c.jsonl"
    files = [ConversationFile("c", path, False)]
    whole = reader.read_turns(kind, [ConversationFile("c", QUEUED_WRITES, False)], limit=1000)

    path.write_bytes(data[: data.index(b'{"type":"file-history-snapshot"')])  # a first flush
    first = reader.read_turns(kind, files)
    assert shown(first.events)[:2] == [("agent_message", "Planning-it"), CHAIN[2]]
    path.write_bytes(data)  # the next: the prompt and its attachments, then the rest
    again = reader.read_turns(kind, files, first.next)
    assert again.reset and shown(again.events)[: len(CHAIN)] == CHAIN
    assert again.events == whole.events

    starts = [n for n in range(len(data)) if n == 0 or data[n - 1 : n] == b"\n"]
    cuts = sorted({*starts, *(n + 7 for n in starts), len(data)})
    for limit in (1, 2, 1000):
        view: list[dict[str, Any]] = []
        after = reader.START
        for cut in cuts:
            path.write_bytes(data[:cut])
            view, after = _follow(kind, files, after, limit, view)
            ids = [e["id"] for e in view]
            assert len(set(ids)) == len(ids), (limit, cut)
        assert view == whole.events, limit


def test_a_conversation_as_a_notebook(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    coder = server.new("codex", project)
    server.type_line(agent["name"], "list the files please", "claude heard: list the files")
    server.type_line(coder["name"], "and codex too", "codex heard: and codex too")
    for session in (agent, coder):
        wait_archived(server.state_dir, session["id"])
        status, body = server.request(
            "GET", f"/api/agents/sessions/{session['id']}/conversation?format=ipynb"
        )
        assert status == 200
        nb = nbformat.reads(json.dumps(body), as_version=4)  # (the client parsed it)
        nbformat.validate(nb)
        assert nb.metadata["jupyter_agents"]["session"] == session["id"]
        (code,) = [c for c in nb.cells if c.cell_type == "code"]
        assert code.source == "echo fake" and code.metadata["editable"] is False
        assert code.outputs[0]["text"].startswith("fake")
        texts = [c.source for c in nb.cells if c.cell_type == "markdown"]
        assert any("> list the files please" in t or "> and codex too" in t for t in texts)


#: what the real CLIs record of a turn with a plan and a shell call (trimmed; written by
#: Codex 0.171.0, Copilot CLI 1.0.102, Gemini CLI 0.61.0, Qwen Code 0.24.4 and OpenCode
#: 1.18.33 with our plugin, in tests/test_real_*_turns.py), and the events a view shows
REAL_RECORDS: dict[str, tuple[list[dict[str, Any]], list[tuple[str, Any]]]] = {
    "codex": (
        [
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "update_plan",
                    "arguments": '{"plan": [{"step": "Print it", "status": "in_progress"}]}',
                    "call_id": "c1",
                },
            },
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": "Plan updated",
                },
            },
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "exec_command",
                    "arguments": '{"cmd": "printf x", "sandbox_permissions": "require_escalated"}',
                    "call_id": "c2",
                },
            },
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": "Chunk ID: 4a8476\nWall time: 0.0000 seconds\nProcess exited with "
                    "code 0\nOriginal token count: 2\nOutput:\nturn-42\n",
                },
            },
            {"type": "token_usage_record", "payload": {"usage": {"input_tokens": 1}}},
        ],
        [
            ("tool_call", 'update_plan: {"plan": [{"step": "Print it", "status": "in_progress"}]}'),
            ("plan", [{"content": "Print it", "status": "in_progress"}]),
            ("tool_call_update", "Plan updated"),
            ("tool_call", "exec_command: printf x"),
            ("tool_call_update", "turn-42\n"),
            ("other", "token_usage_record"),
        ],
    ),
    "qwen": (
        [
            {
                "type": "tool_result",
                "message": {
                    "parts": [
                        {
                            "functionResponse": {
                                "id": "c1",
                                "name": "todo_write",
                                "response": {"output": "Todos have been modified successfully."},
                            }
                        }
                    ]
                },
                "toolCallResult": {
                    "callId": "c1",
                    "status": "success",
                    "resultDisplay": {
                        "type": "todo_list",
                        "todos": [{"id": "1", "content": "Print it", "status": "in_progress"}],
                    },
                },
            },
            {
                "type": "tool_result",
                "message": {
                    "parts": [
                        {
                            "functionResponse": {
                                "id": "c2",
                                "name": "run_shell_command",
                                "response": {
                                    "output": "Command: printf x\nDirectory: (root)\nOutput: "
                                    "turn-42\nError: (none)\nExit Code: 0"
                                },
                            }
                        }
                    ]
                },
                "toolCallResult": {
                    "callId": "c2",
                    "status": "success",
                    "resultDisplay": {
                        "type": "shell_result",
                        "exitCode": 0,
                        "outcome": "completed",
                        "output": "turn-42",
                        "text": "turn-42",
                    },
                },
            },
        ],
        [
            ("tool_call_update", "Todos have been modified successfully."),
            ("plan", [{"content": "Print it", "status": "in_progress"}]),
            ("tool_call_update", "turn-42"),
        ],
    ),
    "copilot": (
        [
            {
                "type": "tool.execution_complete",
                "data": {
                    "toolCallId": "c1",
                    "success": True,
                    "shellExecution": {"exitCode": 0},
                    "result": {"content": "turn-42\n<shellId: 0 completed with exit code 0>"},
                },
            },
            {"type": "assistant.turn_end", "data": {"turnId": "0"}},
        ],
        [("tool_call_update", "turn-42"), ("other", "assistant.turn_end")],
    ),
    "gemini": (
        [
            {
                "type": "gemini",
                "content": "Planning-it",
                "toolCalls": [
                    {
                        "id": "c1",
                        "name": "write_todos",
                        "args": {"todos": [{"description": "Print it", "status": "in_progress"}]},
                        "status": "success",
                        "result": [
                            {
                                "functionResponse": {
                                    "id": "c1",
                                    "name": "write_todos",
                                    "response": {"output": "Successfully updated the todo list."},
                                }
                            }
                        ],
                    },
                    {
                        "id": "c2",
                        "name": "run_shell_command",
                        "args": {"command": "printf x"},
                        "status": "success",
                        "result": [
                            {
                                "functionResponse": {
                                    "id": "c2",
                                    "name": "run_shell_command",
                                    "response": {
                                        "output": "<untrusted_context>\nOutput: turn-42\n"
                                        "Process Group PGID: 5338\n</untrusted_context>"
                                    },
                                }
                            }
                        ],
                    },
                ],
            },
            {  # what the model is sent of it: said above
                "type": "user",
                "content": [
                    {
                        "functionResponse": {
                            "id": "c2",
                            "name": "run_shell_command",
                            "response": {"output": "Output: turn-42"},
                        }
                    }
                ],
            },
        ],
        [
            (
                "tool_call",
                'write_todos: {"todos": [{"description": "Print it", "status": "in_progress"}]}',
            ),
            ("tool_call_update", "Successfully updated the todo list."),
            ("plan", [{"content": "Print it", "status": "in_progress"}]),
            ("tool_call", "run_shell_command: printf x"),
            ("tool_call_update", "turn-42"),
        ],
    ),
    "opencode": (
        [
            {
                "type": "part",
                "role": "assistant",
                "part": {
                    "type": "tool",
                    "tool": "todowrite",
                    "callID": "c1",
                    "state": {
                        "status": "completed",
                        "input": {"todos": [{"content": "Print it", "status": "in_progress"}]},
                        "output": "[]",
                    },
                },
            },
        ],
        [
            (
                "tool_call",
                'todowrite: {"todos": [{"content": "Print it", "status": "in_progress"}]}',
            ),
            ("tool_call_update", "[]"),
            ("plan", [{"content": "Print it", "status": "in_progress"}]),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_RECORDS))
def test_a_real_clis_plan_and_shell_output(name):
    """A plan tool's call is a ``plan`` too; a shell's output is the command's own, not
    the text the CLI framed it in for the model."""
    from jupyter_agents.agents.kinds import make_kinds

    kind = make_kinds(["sh"], {})[name]
    records, expected = REAL_RECORDS[name]
    events = [e for record in records for e in kind.turns(record)]
    for e in events:
        jsonschema.validate({**e, "id": "0:0:1:00000000"}, SCHEMA)
    what = {
        "tool_call": "title",
        "tool_call_update": "output",
        "plan": "entries",
        "other": "raw_type",
    }
    assert [(e["type"], e[what[e["type"]]]) for e in events] == expected


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "qwen", "copilot", "opencode"])
def test_every_kind_maps_an_unknown_record_to_other(name):
    from jupyter_agents.agents.kinds import make_kinds

    kind = make_kinds(["sh"], {})[name]
    events = list(kind.turns({"type": "something-new", "timestamp": "2026-12-07T05:00:00Z"}))
    assert events and all(e["type"] == "other" for e in events), events
    for event in events:
        jsonschema.validate({**event, "id": "0:0:1:00000000"}, SCHEMA)


def test_cli_prints_turns_and_follows_until_the_session_ends(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    server.type_line(agent["name"], "cli-prompt", "claude heard: cli-prompt")
    wait_archived(server.state_dir, agent["id"])
    state = server.state_dir

    done = cli(state, "turns", agent["id"], env=fake_agents.env)
    assert done.returncode == 0, done.stderr
    lines = [line[9:] for line in done.stdout.decode().splitlines()]  # after the time
    assert lines == [
        "you   cli-prompt",
        "tool  Bash: echo fake",
        "  ->  fake",
        "think the user typed a line",
        "agent claude heard: cli-prompt",
    ]
    assert all(len(line) <= 80 for line in done.stdout.decode().splitlines())
    done = cli(state, "turns", agent["id"], "--json", env=fake_agents.env)
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    done = cli(state, "turns", agent["id"], "--after", events[-2]["id"], env=fake_agents.env)
    assert done.stdout.decode().splitlines()[0][9:] == "agent claude heard: cli-prompt"

    follower = subprocess.Popen(
        [sys.executable, "-m", "jupyter_agents.clients.cli", "follow", agent["id"],
         "--after", events[-1]["id"], "--state-dir", str(state)],
        stdout=subprocess.PIPE, env={**os.environ, **fake_agents.env},
    )  # fmt: skip
    try:
        server.type_line(agent["name"], "followed-prompt", "claude heard: followed-prompt")
        assert follower.stdout is not None
        first = follower.stdout.readline().decode()  # what came after, as it came
        assert first[9:].rstrip() == "you   followed-prompt", first
        assert server.request("DELETE", f"/api/agents/sessions/{agent['id']}")[0] == 204
        assert follower.wait(timeout=30) == 0  # it ended with the session
        rest = follower.stdout.read().decode().splitlines()
        assert rest[-1][9:] == "agent claude heard: followed-prompt"
    finally:
        follower.kill()
        follower.wait()
        if follower.stdout is not None:
            follower.stdout.close()


def test_a_growing_conversation_is_pushed_as_a_turns_event(agents_server, fake_agents, project):
    """No timer: the refresh tick is an hour away, and a record the CLI appends is
    announced by a ``turns`` event, after which the view reads only what is new."""
    server = agents_server(env=fake_agents.env, args=["--AgentsApp.refresh_interval=3600"])
    events = EventClient(server)
    try:
        agent = server.new("claude", project)
        sid = agent["id"]
        server.type_line(agent["name"], "first-turn", "claude heard: first-turn")
        poll(lambda: events.of(sid, "turns"), what="a turns event for the first prompt")
        page = poll(
            lambda: (
                (p := turns(server, sid))["events"]
                and p["events"][-1].get("text") == "claude heard: first-turn"
                and p
            ),
            what="the first turn's events",
        )
        (source,) = Path(fake_agents.home).glob(".claude/projects/*/*.jsonl")
        seen = len(events.of(sid, "turns"))
        record = {"type": "assistant", "message": {"content": "written-by-hand"}}
        with source.open("a") as f:
            f.write(json.dumps(record) + "\n")
        poll(lambda: len(events.of(sid, "turns")) > seen, what="a turns event for the record")
        (new,) = turns(server, sid, after=page["next"])["events"]
        assert (new["type"], new["text"]) == ("agent_message", "written-by-hand")
        event = events.of(sid, "turns")[-1]
        assert (event["status"], event["kind"]) == ("running", "claude")
    finally:
        events.close()


def test_a_page_says_where_the_replay_starts(agents_server, fake_agents, project):
    """``replay_start`` is the time of the transcript's first timed byte, the 0 s from
    which a replay (and a search hit's ``at``) counts: a turn's place in the replay is
    its time minus it."""
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    sid = agent["id"]
    server.type_line(agent["name"], "when-was-it", "claude heard: when-was-it")
    page = poll(lambda: (p := turns(server, sid))["events"] and p, what="the first turn's events")
    timeline = transcript(server.state_dir, sid).timeline()
    first_ms = timeline[0][1]
    assert page["replay_start"] == clock.from_epoch(first_ms / 1000).isoformat(
        timespec="milliseconds"
    )
    prompt = next(e for e in page["events"] if e["type"] == "user_message")
    assert clock.parse(prompt["at"]) >= clock.parse(page["replay_start"])


#: what the fake CLIs answer to a line, by kind (tests/fakes/fake_agent.py)
HEARD = {"claude": "claude heard: {}", "codex": "codex heard: {}"}


@pytest.fixture
def magic(agents_server, fake_agents, monkeypatch, tmp_path):
    """``%agent`` in an IPython of this process, on a server's state dir, with the fake
    CLIs' HOME (where the kinds find their files): ``(server, run)``; ``run(line)`` is
    ``%agent line``'s value."""
    from IPython.core.interactiveshell import InteractiveShell

    def start(*args: str):
        server = agents_server(env=fake_agents.env, args=list(args))
        for key, value in {
            **fake_agents.env,
            "JUPYTER_AGENTS_STATE_DIR": str(server.state_dir),
        }.items():
            monkeypatch.setenv(key, value)
        return server, lambda line: shell.run_line_magic("agent", line)

    (tmp_path / "nb").mkdir()
    monkeypatch.chdir(tmp_path / "nb")  # (the notebook's folder; the state dir is not in it)
    shell: Any = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_agents")
    try:
        yield start
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("kind", ["claude", "codex"])  # the fakes that write conversations
def test_a_notebook_of_a_conversation_that_went_on_differs_by_the_new_turns_cells(
    magic, project, tmp_path, kind
):
    """Exported, one more turn, exported again: both validate, and nbdime's diff of the
    two is the new turn's cells added at the end, nothing else."""
    import nbdime

    server, agent = magic(*FAST)
    session = server.new(kind, project)
    server.type_line(session["name"], "first-prompt", HEARD[kind].format("first-prompt"))
    wait_archived(server.state_dir, session["id"])
    written = agent(f"conversation {session['id']} --notebook")
    assert written.path.parent == server.state_dir / "notebooks"
    first = nbformat.read(written.path, as_version=4)

    server.type_line(session["name"], "second-prompt", HEARD[kind].format("second-prompt"))
    wait_archived(server.state_dir, session["id"])
    second_path = tmp_path / "second.ipynb"
    assert agent(f"conversation {session['id']} --notebook -o {second_path}").path == second_path
    second = nbformat.read(second_path, as_version=4)
    for nb in (first, second):
        nbformat.validate(nb)
        assert nb.metadata["jupyter_agents"]["kind"] == kind

    diff = nbdime.diff_notebooks(first, second)
    assert [(d.op, d.key) for d in diff] == [("patch", "cells")], diff
    (added,) = diff[0].diff
    assert (added.op, added.key) == ("addrange", len(first.cells))
    assert added.valuelist == second.cells[len(first.cells) :]
    said = [c.source for c in added.valuelist if c.cell_type == "markdown"]
    assert any("> second-prompt" in text for text in said), said
    assert any(HEARD[kind].format("second-prompt") in text for text in said), said
    assert not any("first-prompt" in c.source for c in added.valuelist)
    assert [c.source for c in added.valuelist if c.cell_type == "code"] == ["echo fake"]


def test_agent_conversation_in_ipython(magic, project, tmp_path, capsys):
    """``%agent conversation``: the Markdown printed; ``--notebook`` a read-only file in
    the state dir (or at ``-o``), replaced when written again, never a file of the
    user's; a link where the notebook's folder reaches it, else its path."""
    server, agent = magic(*FAST)
    session = server.new("claude", project)
    sid = session["id"]
    shell = server.new("shell", project)
    server.type_line(session["name"], "magic-prompt", "claude heard: magic-prompt")
    wait_archived(server.state_dir, sid)

    capsys.readouterr()
    assert agent(f"conversation {session['name']}") is None
    shown = capsys.readouterr().out
    assert shown.startswith(f"# claude session {session['name']} ({sid})")
    assert "> magic-prompt" in shown and "claude heard: magic-prompt" in shown

    written = agent(f"conversation {sid} --notebook")
    path = server.state_dir / "notebooks" / f"claude-{session['name']}-{sid}-conversation.ipynb"
    assert written.path == path and oct(path.stat().st_mode & 0o777) == "0o400"
    assert str(path) in repr(written) and "read-only notebook" in repr(written)
    assert written.relative() is None  # not under this folder: its path, no link
    assert html.escape(str(path)) in written._repr_html_() and "<a " not in written._repr_html_()
    before = path.read_bytes()
    assert agent(f"conversation {sid} --notebook").path == path  # again: replaced, the same
    assert path.read_bytes() == before

    (tmp_path / "nb" / "notes").mkdir()
    here = agent(f"conversation {sid} --notebook -o 'notes/my turns.ipynb'")
    assert (
        here.path == tmp_path / "nb" / "notes" / "my turns.ipynb"
        and here.relative() == "notes/my turns.ipynb"
    )
    assert '<a href="notes/my%20turns.ipynb"' in here._repr_html_()
    assert here.path.read_bytes() == before

    mine = tmp_path / "analysis.ipynb"
    mine.write_text("{}")
    for line, message in [
        (f"conversation {sid} --notebook -o {mine}", "is not a notebook of session"),
        (f"conversation {sid} --notebook -o {tmp_path / 'x.md'}", "ends in .ipynb"),
        (f"conversation {sid} --notebook -o {tmp_path / 'none' / 'x.ipynb'}", "no folder"),
        (f"conversation {sid} -o {tmp_path / 'x.ipynb'}", "-o is for --notebook"),
        (f"conversation {shell['id']} --notebook", "is a shell session"),
        (f"conversation {shell['id']}", "is a shell session"),
        ("conversation nope --notebook", "no session with id"),
    ]:
        with pytest.raises(UsageError, match=message):
            agent(line)
    assert mine.read_text() == "{}"
    assert not (tmp_path / "x.ipynb").exists()

    # pruned, the session's notebook in the state dir goes with it; one written elsewhere stays
    from jupyter_agents.clients.cli import main
    from jupyter_agents.core.store import SessionStore

    assert server.request("DELETE", f"/api/agents/sessions/{sid}")[0] == 204
    store = SessionStore(server.state_dir / "sessions.db")
    store.update(sid, last_activity="2020-01-01T00:00:00Z")
    store.close()
    assert main(["prune", "--older-than", "90d", "--yes"]) == 0
    assert not path.exists() and here.path.exists()


def test_agent_watch_in_a_terminal_prints_turns_as_they_come(magic, project, capsys, monkeypatch):
    """In IPython without a kernel, ``%agent watch`` prints what ``jupyter agents turns
    -f`` prints, as the agent writes it, and returns when the session ends. No timer:
    the server refreshes hourly and the reader's own recheck is an hour away, so every
    line comes from a write that woke it."""
    from jupyter_agents.sessions import turnreader

    monkeypatch.setattr(turnreader, "RECHECK", 3600.0)
    server, agent = magic("--AgentsApp.refresh_interval=3600")
    session = server.new("claude", project)
    shell = server.new("shell", project)
    with pytest.raises(UsageError, match="is a shell session"):
        agent(f"watch {shell['id']}")
    capsys.readouterr()

    printed: list[str] = []

    def lines() -> list[str]:
        printed.extend(capsys.readouterr().out.splitlines())
        return [line[9:] for line in printed]  # after the time

    watching = threading.Thread(target=agent, args=(f"watch {session['id']}",), daemon=True)
    watching.start()  # before the first prompt: no file to watch yet
    try:
        server.type_line(session["name"], "watched-one", "claude heard: watched-one")
        poll(lambda: "agent claude heard: watched-one" in lines(), what="the first turn")
        assert watching.is_alive()
        server.type_line(session["name"], "watched-two", "claude heard: watched-two")
        poll(lambda: "agent claude heard: watched-two" in lines(), what="the second turn")
        assert lines() == [
            *("you   watched-one", "tool  Bash: echo fake", "  ->  fake"),
            *("think the user typed a line", "agent claude heard: watched-one"),
            *("you   watched-two", "tool  Bash: echo fake", "  ->  fake"),
            *("think the user typed a line", "agent claude heard: watched-two"),
        ]
        assert server.request("DELETE", f"/api/agents/sessions/{session['id']}")[0] == 204
        poll(lambda: not watching.is_alive(), what="the watch to end with the session")
    finally:
        if watching.is_alive():  # (a failure above): end it with the session
            server.request("DELETE", f"/api/agents/sessions/{session['id']}")
            watching.join(timeout=30)


def test_agent_watch_in_a_notebook_is_a_widget_that_grows_while_the_kernel_is_free(
    agents_server, fake_agents, project
):
    """A real kernel: ``%agent watch`` gives a widget whose Output shows the turns (as
    ``jupyter agents turns`` prints them) and grows as the agent writes, sent to the
    front end while the kernel runs other cells; closed, it stops; it ends with the
    session and says how. No timer, as in the terminal."""
    from jupyter_client.manager import KernelManager

    server = agents_server(env=fake_agents.env, args=["--AgentsApp.refresh_interval=3600"])
    session = server.new("claude", project)
    sid = session["id"]
    server.type_line(session["name"], "before-watch", "claude heard: before-watch")
    env = {**os.environ, **fake_agents.env, "JUPYTER_AGENTS_STATE_DIR": str(server.state_dir)}
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(project))
    kc = km.client()
    kc.start_channels()
    states: dict[str, dict[str, Any]] = {}  # comm id -> the widget's state as sent
    printed: list[str] = []

    def take(msg: dict[str, Any]) -> None:
        content = msg["content"]
        if msg["msg_type"] == "comm_open":
            states[content["comm_id"]] = dict(content["data"]["state"])
        elif msg["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
            states.setdefault(content["comm_id"], {}).update(content["data"]["state"])
        elif msg["msg_type"] == "stream":
            printed.append(content["text"])
        elif msg["msg_type"] == "error":
            printed.append(f"ERROR {content['ename']}: {content['evalue']}")

    def run(code: str) -> str:
        printed.clear()
        kc.execute_interactive(code, output_hook=take, timeout=60)
        return "".join(printed)

    def shown() -> list[str]:
        """The watch's lines as the front end has them, after the time."""
        (output,) = [s for s in states.values() if s.get("_model_name") == "OutputModel"]
        text = "".join(o["text"] for o in output.get("outputs", []))
        return [line[9:] for line in text.splitlines()]

    def header() -> str:
        return next(s["value"] for s in states.values() if s.get("_model_name") == "HTMLModel")

    def until(check: Any, what: str) -> Any:
        def seen() -> Any:
            with contextlib.suppress(queue.Empty):
                while True:
                    take(kc.get_iopub_msg(timeout=0.1))
            return check()

        return poll(seen, timeout=60, what=what)

    try:
        kc.wait_for_ready(timeout=60)
        assert not run(
            "%load_ext jupyter_agents\n"
            "import jupyter_agents.sessions.turnreader as _reader\n"
            "_reader.RECHECK = 3600.0\n"
            f"w = %agent watch {sid}\n"
            "w"
        )
        until(lambda: "agent claude heard: before-watch" in shown(), "the turn before")
        assert run("print('free', w.watching)") == "free True\n"  # the kernel is free
        server.type_line(session["name"], "while-watched", "claude heard: while-watched")
        until(lambda: "agent claude heard: while-watched" in shown(), "the turn after")
        assert shown() == [
            *("you   before-watch", "tool  Bash: echo fake", "  ->  fake"),
            *("think the user typed a line", "agent claude heard: before-watch"),
            *("you   while-watched", "tool  Bash: echo fake", "  ->  fake"),
            *("think the user typed a line", "agent claude heard: while-watched"),
        ]
        assert "watching" in header()
        # another watch of the same running session, closed: it stops, the first goes on
        assert run(f"w2 = %agent watch {sid}\nw2.close()\nprint(w2.watching, w.watching)") == (
            "False True\n"
        )
        assert server.request("DELETE", f"/api/agents/sessions/{sid}")[0] == 204
        until(lambda: "ended: killed" in header(), "the watch to say the session ended")
        assert run("print(w.watching)") == "False\n"
        assert "UsageError" in run("%agent watch nope")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_restore_after_a_reboot_continues_the_same_turns(agents_server, fake_agents, project):
    """A view that read up to a position before a reboot reads, after the restore, the
    resumed CLI's turns from there: no reset, nothing read twice, nothing missed."""
    server = agents_server(env=fake_agents.env, args=FAST)
    agent = server.new("claude", project)
    sid = agent["id"]
    server.type_line(agent["name"], "before-reboot", "claude heard: before-reboot")
    wait_archived(server.state_dir, sid)
    before = poll(
        lambda: (
            (p := turns(server, sid))["events"]
            and p["events"][-1].get("text") == "claude heard: before-reboot"
            and p
        ),
        what="the first turn's events",
    )
    power_loss(server)
    server = agents_server(env=fake_agents.env, args=FAST)
    assert server.model(sid)["status"] == "interrupted"
    status, restored = server.request("POST", f"/api/agents/sessions/{sid}/restore")
    assert status == 200 and "--resume" in restored["argv"], restored
    server.type_line(restored["name"], "after-restore", "claude heard: after-restore")
    after = poll(
        lambda: (
            (p := turns(server, sid, after=before["next"]))["events"]
            and p["events"][-1].get("text") == "claude heard: after-restore"
            and p
        ),
        what="the resumed turn's events",
    )
    assert not after["reset"]
    assert [e for e in shown(after["events"]) if e[0].endswith("message")] == [
        ("user_message", "after-restore"),
        ("agent_message", "claude heard: after-restore"),
    ], shown(after["events"])
    ids = [e["id"] for e in before["events"]] + [e["id"] for e in after["events"]]
    assert len(ids) == len(set(ids))
    assert [e["id"] for e in turns(server, sid)["events"]] == ids  # the same, from the start


def test_a_first_file_written_after_the_hook_ran_is_still_watched(
    agents_server, fake_agents, project
):
    """A CLI writes its first conversation file a moment after its hook ran, so the
    hook's event can find no file yet: the server looks again for a while, and what the
    file holds is announced by a ``turns`` event with no later event to wake it (the
    refresh tick is an hour away)."""
    server = agents_server(env=fake_agents.env, args=["--AgentsApp.refresh_interval=3600"])
    events = EventClient(server)
    try:
        agent = server.new("claude", project)
        sid = agent["id"]
        poll(lambda: events.of(sid, "attention"), what="the start hook's event")
        slug = project_slug(str(project.resolve()))
        folder = Path(fake_agents.home) / ".claude" / "projects" / slug
        assert not folder.exists()  # nothing was typed: no file, no folder
        folder.mkdir(parents=True)
        record = {
            "type": "user",
            "timestamp": clock.now().isoformat(),
            "message": {"role": "user", "content": "written-after-the-hook"},
        }
        (folder / f"{agent['conversation_id']}.jsonl").write_text(json.dumps(record) + "\n")
        poll(lambda: events.of(sid, "turns"), what="a turns event for the first file")
        said = [e["text"] for e in turns(server, sid)["events"] if e["type"] == "user_message"]
        assert said == ["written-after-the-hook"]
    finally:
        events.close()
