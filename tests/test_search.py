"""Transcripts people can use: search across sessions (the library on real transcript
writers, then the REST route and the CLI on a real server) and the three exports
(text checked against what pyte, a terminal emulator, shows; HTML; asciicast v2 against
the timing index)."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import urllib.parse
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyte
import pytest

from jupyter_agents.backends.broker.recorder import Recorder
from jupyter_agents.core.records import Session
from jupyter_agents.pytest_plugin import (
    ServerProcess,
    kill_backends,
    poll,
    transcript,
    transcript_bytes,
)
from jupyter_agents.sessions.query import Query
from jupyter_agents.sessions.search import search
from jupyter_agents.terminal.transcripts import MAX_CHUNK, Transcript

both_backends = pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)


# -- the library, on transcripts written by the broker's recorder ----------------------


def record(tmp_path: Path, sid: str, writes: list[bytes], cap: int = 32 << 20) -> Transcript:
    recorder = Recorder(sid, tmp_path / sid, cap)
    for data in writes:
        recorder.write(data)
    recorder.close()
    return Transcript(sid, tmp_path / sid)


def session(sid: str, created: str = "2026-12-01T00:00:00+00:00") -> Session:
    return Session(sid, sid, "exited", "broker", created=created)


def find(
    transcripts: dict[str, Transcript], pattern: str, budget: int = 1 << 30, **options: Any
) -> list[tuple[str, int, str]]:
    """Every hit for ``pattern``, page after page: (session, offset, line)."""
    query = Query(pattern, **options)
    sessions = [session(sid) for sid in transcripts]
    hits: list[tuple[str, int, str]] = []
    for _ in range(1000):
        page = search(sessions, transcripts.__getitem__, lambda s: [], query, budget)
        hits += [(h.session.id, h.offset, h.line) for h in page.hits]
        if page.next is None:
            return hits
        query = Query(pattern, **{**options, "cursor": page.next})
    raise AssertionError("paging never ended")


def test_search_finds_text_split_across_writes_segments_and_reads(tmp_path):
    cap = 256 << 10  # 64 KiB segments
    filler = b"".join(b"filler line %05d\r\n" % i for i in range(3448))  # 65,512 bytes
    writes = [filler, b"one line of the text NEE", b"DLE", b" and caf\xc3", b"\xa9 here\r\n"]
    t = record(tmp_path, "s1", writes, cap)
    assert Path(tmp_path / "s1" / "65536.log").read_bytes().startswith(b"DLE")  # a boundary
    (hit,) = find({"s1": t}, "needle")
    assert hit == ("s1", 65_512, "one line of the text NEEDLE and café here")
    assert find({"s1": t}, "café") == [hit]
    assert find({"s1": t}, "needle", case=True) == []
    # a line across the boundary of two 4 MiB reads of the scan
    big = b"x" * (MAX_CHUNK - 5) + b"\r\nbig NEEDLE\r\n"
    t2 = record(tmp_path, "s2", [big[:MAX_CHUNK], big[MAX_CHUNK:]])
    assert find({"s2": t2}, "big needle") == [("s2", MAX_CHUNK - 3, "big NEEDLE")]


def test_search_sees_text_as_a_terminal_shows_it(tmp_path):
    writes = [
        b"\x1b]0;TITLEWORD\x07$ ls\r\n",  # a window title is not text
        b"\x1b[1;31mred\x1b[0m ne\x1b[1medle\x1b[0m\r\n",  # a word split by colours
        b"progress 10%\rprogress 99%\r\n",  # overwritten
        b"downloading\r\x1b[Kdone\r\n",  # erased
    ]
    t = record(tmp_path, "s1", writes)
    lines = {p: [line for _, _, line in find({"s1": t}, p)] for p in ("needle", "99%", "done")}
    assert lines == {"needle": ["red needle"], "99%": ["progress 99%"], "done": ["done"]}
    for hidden in ("TITLEWORD", "1;31", "31m", "[0m", "10%", "downloading"):
        assert find({"s1": t}, hidden) == [], hidden
    assert [line for _, _, line in find({"s1": t}, r"^pro\w+ \d+%$", regex=True)] == [
        "progress 99%"
    ]


def test_a_regex_that_starts_with_text_finds_what_the_full_scan_finds(tmp_path):
    """A regex starting with text has its candidate lines found by that text in the raw
    bytes (escapes between its characters, case-blind as Python's regex is: the Kelvin
    sign is a k); the lines are the ones the scan of all text finds."""
    writes = [
        b"xy\x1b[1mzzy-NEEEdle 42\x1b[0m\r\n",  # split by a colour
        b"xyzzy-nedle 7 trailing\r\n",  # no match at the end
        b"\xe2\x84\xaaelvin 5\r\n",  # KELVIN SIGN
        b"xyzzy-needle 8\r\n",
    ]
    t = record(tmp_path, "s1", writes)
    for pattern, lines in [
        (r"xyzzy-ne+dle \d+$", ["xyzzy-NEEEdle 42", "xyzzy-needle 8"]),
        (r"kelvin \d", ["\u212aelvin 5"]),
    ]:
        assert [line for _, _, line in find({"s1": t}, pattern, regex=True)] == lines
        # the same lines as a regex with no leading text, which scans all text
        assert [line for _, _, line in find({"s1": t}, "(?:" + pattern + ")", regex=True)] == lines
    assert [line for _, _, line in find({"s1": t}, "kelvin")] == ["\u212aelvin 5"]


def test_search_pages_and_budgets_give_every_hit_once_in_order(tmp_path):
    transcripts = {
        sid: record(
            tmp_path,
            sid,
            [b"".join(b"%s line %d match\r\nnoise\r\n" % (sid.encode(), i) for i in range(7))],
        )
        for sid in ("a", "b", "c")
    }
    everything = find(transcripts, "match")
    assert len(everything) == 21 and len(set(everything)) == 21
    assert [h[0] for h in everything] == ["c"] * 7 + ["b"] * 7 + ["a"] * 7  # newest... by id
    assert find(transcripts, "match", limit=3) == everything
    assert find(transcripts, "match", limit=1) == everything
    assert find(transcripts, "match", budget=64) == everything  # stops mid-transcript


# -- end to end: a real server, the REST routes and the CLI ------------------------------


def api(server: ServerProcess, path: str, **params: str) -> tuple[int, Any]:
    return server.request("GET", f"{path}?{urllib.parse.urlencode(params)}")


def jupyter_agents(
    state_dir: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_agents.clients.cli", *args, "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_search_route_filters_errors_and_cli(agents_server, fake_agents, tmp_path):
    server = agents_server(env=fake_agents.env)
    a, b = server.new("shell", tmp_path), server.new("shell", tmp_path)
    c = server.new("claude", tmp_path)
    for shell, word in ((a, "ALPHA"), (b, "BETA")):  # typed MARK$((1+1)), printed MARK2
        server.type_line(shell["name"], f"echo MARK$((1+1))-{word}", f"MARK2-{word}")
    server.type_line(c["name"], "find-me-in-the-conversation", "claude heard")
    poll(lambda: b"MARK2-BETA" in transcript_bytes(server.state_dir, b["id"]), what="b's output")
    assert server.request("DELETE", f"/api/agents/sessions/{b['id']}")[0] == 204

    def hits(**params: str) -> list[tuple[str, str]]:
        status, page = api(server, "/api/agents/search", **params)
        assert status == 200, page
        return sorted((h["session"], h["source"]) for h in page["hits"])

    assert hits(q="mark2") == sorted([(a["id"], "transcript"), (b["id"], "transcript")])
    assert hits(q="mark2", session=a["id"]) == [(a["id"], "transcript")]
    assert hits(q="mark2", status="killed") == [(b["id"], "transcript")]
    assert hits(q="mark2", kind="claude") == []
    found = hits(q="find-me-in-the", kind="claude")  # typed, replied, and in its file
    assert set(found) == {(c["id"], "conversation"), (c["id"], "transcript")}
    assert hits(q="mark2", since="1h") and not hits(q="mark2", since="2099-01-01T00:00:00")
    status, page = api(server, "/api/agents/search", q="MARK2-ALPHA")
    (hit,) = page["hits"]
    assert hit["line"] == "MARK2-ALPHA" and hit["match"] == [0, 11] and hit["at"] >= 0
    assert abs(datetime.fromisoformat(hit["time"]) - datetime.now(timezone.utc)) < timedelta(
        minutes=5
    )
    log = transcript_bytes(server.state_dir, a["id"])
    assert log[hit["offset"] - 1] == ord("\n")  # the raw line: escapes, \r, then the text
    assert log[hit["offset"] :].split(b"\n")[0].endswith(b"\rMARK2-ALPHA\r")

    for params, message in [
        ({"q": "(", "regex": "true"}, "bad regex"),
        ({"q": "x", "kind": "nope"}, "unknown kind"),
        ({"q": "x", "status": "nope"}, "unknown status"),
        ({"q": "x", "since": "yesterday"}, "since must be"),
        ({"q": "x", "limit": "0"}, "limit must be"),
        ({"q": "x", "cursor": "nonsense"}, "invalid cursor"),
        ({"q": "x", "regex": "maybe"}, "regex must be"),
        ({}, "q must be"),
    ]:
        status, body = api(server, "/api/agents/search", **params)
        assert status == 400 and message in body["message"], (params, body)
    status, body = api(server, "/api/agents/search", q="x", session="nosuchsession")
    assert status == 404, body

    env = fake_agents.env
    found = jupyter_agents(server.state_dir, env, "grep", "mark2", "--status", "running")
    assert found.returncode == 0 and f"{a['id']} {a['name']} " in found.stdout, found
    assert "MARK2-ALPHA" in found.stdout and "BETA" not in found.stdout
    missing = jupyter_agents(server.state_dir, env, "grep", "no-such-text-anywhere")
    assert missing.returncode == 1 and missing.stdout == ""
    bad = jupyter_agents(server.state_dir, env, "grep", "(", "--regex")
    assert bad.returncode == 2 and "bad regex" in bad.stderr


class Text(HTMLParser):
    """The text of an HTML page's <pre>, and whether it has any script or link."""

    def __init__(self) -> None:
        super().__init__()
        self.text, self.inside, self.active = "", False, []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.inside |= tag == "pre"
        if tag in ("script", "link", "img", "iframe") or any(k.startswith("on") for k, _ in attrs):
            self.active.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self.inside &= tag != "pre"

    def handle_data(self, data: str) -> None:
        self.text += data if self.inside else ""


def screen_lines(raw: bytes, cols: int, rows: int) -> list[str]:
    """What a terminal shows after ``raw``: its history and screen, blank ends dropped."""
    screen = pyte.HistoryScreen(cols, rows, history=10_000)
    stream = pyte.ByteStream(screen)
    stream.feed(raw)
    history = ["".join(line[x].data for x in range(cols)) for line in screen.history.top]
    lines = [line.rstrip() for line in [*history, *screen.display]]
    while lines and not lines[-1]:
        lines.pop()
    return lines


SCRIPT = r"""printf '\033[31mRED\033[0m plain \033[1;32mGREEN\033[0m\n'
printf 'progress 10%%'; sleep 0.3; printf '\rprogress 60%%'; sleep 0.3; printf '\rprogress done\n'
printf 'caf\303'; sleep 0.3; printf '\251 \342\202'; sleep 0.3; printf '\254 end\n'
"""


@both_backends
def test_exports_text_html_and_cast(agents_server, agents_backend, tmp_path):
    server = agents_server()
    script = tmp_path / "p.sh"
    script.write_text(SCRIPT)
    shell = server.new("shell", tmp_path)
    server.type_line(shell["name"], "sh p.sh; echo END$((2+3))", "END5")
    sid = shell["id"]
    # settled: the prompt after the output is in the transcript too (nothing comes later)
    raw = poll(
        lambda: (
            (t := transcript_bytes(server.state_dir, sid)).partition(b"END5\r\n")[2].endswith(b"# ")
            and t
        ),
        what="the transcript, up to the prompt after END5",
    )
    _, model = server.request("GET", f"/api/agents/sessions/{sid}")
    cols, rows = model["cols"] or 80, model["rows"] or 24

    status, text = api(server, f"/api/agents/sessions/{sid}/export", format="txt")
    assert status == 200
    text = text.decode() if isinstance(text, bytes) else str(text)
    lines = text.rstrip("\n").split("\n")
    assert lines == screen_lines(raw, cols, rows)
    assert {"RED plain GREEN", "progress done", "café € end"} <= set(lines)

    status, page = api(server, f"/api/agents/sessions/{sid}/export", format="html")
    assert status == 200
    parsed = Text()
    parsed.feed(page.decode())
    assert parsed.active == [] and html.unescape(parsed.text).rstrip("\n").split("\n") == lines
    assert '<span style="color:#cd0000">RED</span>' in page.decode()

    status, cast = api(server, f"/api/agents/sessions/{sid}/export", format="cast")
    assert status == 200
    header, *events = [json.loads(line) for line in cast.decode().splitlines()]
    assert header["version"] == 2 and (header["width"], header["height"]) == (cols, rows)
    assert all(len(e) == 3 and e[1] == "o" and isinstance(e[2], str) for e in events)
    times = [e[0] for e in events]
    assert times == sorted(times) and times[0] == 0
    assert "".join(e[2] for e in events) == raw.decode("utf-8", errors="replace")
    timeline = transcript(server.state_dir, sid).timeline()
    offset, starts = 0, {}
    for t, _, data in events:
        starts[offset] = t
        offset += len(data.encode())
    for o, ms in timeline:  # an event starts at every index entry (or at the character
        near = [s for s in starts if o - 3 <= s <= o]  # the entry splits), at its time
        assert near and starts[max(near)] == round((ms - timeline[0][1]) / 1000, 3), (o, ms)
    assert times[-1] - times[0] >= 1.0  # the script's four pauses

    assert api(server, f"/api/agents/sessions/{sid}/export", format="pdf")[0] == 400
    assert api(server, "/api/agents/sessions/nosuchsession/export", format="txt")[0] == 404


@both_backends
def test_a_line_is_found_once_at_its_time_across_three_restores(
    agents_server, agents_backend, tmp_path
):
    """A shell prints a marker once; then, three times, its backend dies (a reboot)
    and the session is restored, which shows the old tail again under a marker line.
    Search finds the marker once, dated within a second of its printing (not in 2083:
    a second writer's absolute index line is not read as a delta); the text export and
    ``jupyter agents grep`` show it once too."""
    server = agents_server()
    shell = server.new("shell", tmp_path)
    printed = datetime.now(timezone.utc)
    server.type_line(shell["name"], "echo ONCE-$((6*7))-ONLY", "ONCE-42-ONLY\r\n")
    poll(lambda: b"ONCE-42-ONLY" in transcript_bytes(server.state_dir, shell["id"]), what="it")
    for n in range(3):
        server.stop()
        kill_backends(server.state_dir)
        server.start()
        status, body = server.request("POST", f"/api/agents/sessions/{shell['id']}/restore")
        assert status == 200, body
        server.type_line(shell["name"], f"echo AFTER-{n}-$((1+1))", f"AFTER-{n}-2\r\n")
    raw = transcript_bytes(server.state_dir, shell["id"])
    # printed once; each restore replays the old tail, earlier replays included
    assert raw.count(b"ONCE-42-ONLY\r") == 1 + 1 + 2 + 4
    status, page = api(server, "/api/agents/search", q="ONCE-42-ONLY")
    assert status == 200, page
    hits = [h for h in page["hits"] if h["source"] == "transcript"]
    assert len(hits) == 1, hits
    when = datetime.fromisoformat(hits[0]["time"])
    assert abs((when - printed).total_seconds()) < 1.5, (when, printed)
    later = [h["time"] for h in api(server, "/api/agents/search", q="AFTER-2-2")[1]["hits"]]
    assert len(later) == 1
    assert abs(datetime.fromisoformat(later[0]) - datetime.now(timezone.utc)) < timedelta(
        seconds=30
    )
    status, text = server.request("GET", f"/api/agents/sessions/{shell['id']}/export?format=txt")
    assert status == 200 and isinstance(text, bytes)
    assert text.count(b"ONCE-42-ONLY") == 1, text.decode(errors="replace")[-2000:]
    assert text.count(b"AFTER-2-2") == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    grep = jupyter_agents(server.state_dir, env, "grep", "ONCE-42-ONLY")
    assert grep.returncode == 0, grep.stderr
    assert grep.stdout.count("ONCE-42-ONLY") == 1, grep.stdout
