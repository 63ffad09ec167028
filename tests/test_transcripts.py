"""Bounded, segmented transcripts: the reader across segments, the broker's recorder with
its timing index (tmux's writer has the same tests in test_tmux_writer.py), the cap end
to end, and a full disk (a real tmpfs)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.backends.broker import recorder as recorder_module
from jupyter_agents.backends.broker.recorder import Recorder
from jupyter_agents.core.errors import NotFound, OutOfRange
from jupyter_agents.pytest_plugin import (
    TOKEN,
    ServerProcess,
    detach_tmux_control_clients,
    kill_backends,
    open_backend,
    poll,
    tmux_control_clients,
    transcript,
    transcript_bytes,
)
from jupyter_agents.server.params import wanted
from jupyter_agents.terminal.segments import INDEX_SHARE, parse_listing, segmenting, time_at
from jupyter_agents.terminal.transcripts import Follower, Transcript, Want

both_backends = pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)


def numbered(first: int, count: int) -> bytes:
    """Lines ``line-000001`` ... as a terminal shows them (CRLF), 13 bytes each."""
    return b"".join(b"line-%06d\r\n" % i for i in range(first, first + count))


def segments(directory: Path) -> list[int]:
    return parse_listing(os.listdir(directory)).starts


def assert_layout(directory: Path, max_bytes: int) -> None:
    """Contiguous segments, all but the newest full, no more than the cap keeps."""
    size, keep = segmenting(max_bytes)
    starts = segments(directory)
    assert 1 <= len(starts) <= keep
    lengths = [(directory / f"{s}.log").stat().st_size for s in starts]
    assert all(n == size for n in lengths[:-1]), lengths
    assert starts == [starts[0] + i * size for i in range(len(starts))]
    assert sum(lengths) <= max(max_bytes, 2 * size)


# -- the reader, on hand-made segments -----------------------------------------------


@pytest.fixture
def made(tmp_path: Path) -> tuple[Transcript, bytes]:
    """Segments 100, 200, 300 of a 350-byte transcript whose first 100 were dropped;
    a gap at 250 and a stale one (before the first kept byte) at 50."""
    full = bytes((i * 7) % 251 for i in range(350))
    directory = tmp_path / "t" / "s1"
    directory.mkdir(parents=True)
    for start, end in ((100, 200), (200, 300), (300, 350)):
        (directory / f"{start}.log").write_bytes(full[start:end])
    (directory / "gap-250-1767225600").touch()
    (directory / "gap-50-1767225000").touch()
    (directory / "notes.txt").write_text("ignored")
    return Transcript("s1", directory), full


def test_reader_offsets_and_reads_across_segments(made):
    t, full = made
    assert (t.start(), t.size()) == (100, 350)
    assert t.read(150, 100) == (full[150:250], 350)
    assert t.read(340) == (full[340:], 350) and t.read(350) == (b"", 350)
    with pytest.raises(OutOfRange, match="bytes before 100 were dropped"):
        t.read(99)
    assert t.tail(75) == full[275:] and t.tail(10_000) == full[100:]
    assert t.gaps() == [(250, datetime(2026, 1, 1, tzinfo=timezone.utc))]
    newest = (t.path / "300.log").stat().st_mtime
    assert t.ended_at() == datetime.fromtimestamp(newest, timezone.utc)
    assert b"".join(t.follow(0, lambda: False)) == full[100:]  # dropped bytes skipped


def test_reader_windows_count_from_the_first_kept_byte(made):
    t, full = made

    def read_window(offset, length, header):  # as GET .../log reads it
        want = wanted(offset, length, header)
        return (*t.read_window(want), want.partial)

    assert read_window(None, None, None) == (full[100:], 100, 350, False)
    assert read_window("190", "20", None) == (full[190:210], 190, 350, False)
    assert read_window(None, None, "bytes=-120") == (full[230:], 230, 350, True)
    assert read_window(None, None, "bytes=-1000") == (full[100:], 100, 350, True)
    assert read_window(None, None, "bytes=150-249") == (full[150:250], 150, 350, True)
    for offset, header in (("99", None), (None, "bytes=0-10")):
        with pytest.raises(OutOfRange, match="bytes before 100 were dropped"):
            read_window(offset, None, header)


def test_reader_without_a_transcript_or_with_an_empty_one(tmp_path):
    missing = Transcript("s1", tmp_path / "s1")
    assert (missing.start(), missing.size(), missing.tail(10), missing.gaps()) == (0, 0, b"", [])
    assert missing.ended_at() is None
    with pytest.raises(NotFound):
        missing.read(0)
    (tmp_path / "s1").mkdir()
    assert missing.read(0) == (b"", 0) and missing.read_window(Want())[0] == b""
    (tmp_path / "s2").symlink_to(tmp_path / "s1")
    with pytest.raises(NotFound):  # never through a symlink planted in the state dir
        Transcript("s2", tmp_path / "s2").read(0)


def test_follow_goes_on_into_new_segments(made):
    t, full = made
    more = bytes(range(50))
    rounds = []

    def running() -> bool:
        rounds.append(1)
        if len(rounds) == 1:  # a writer rolls to a new segment at 350 and drops 100
            (t.path / "350.log").write_bytes(more)
            (t.path / "100.log").unlink()
        return len(rounds) < 3

    assert b"".join(t.follow(120, running, interval=0.01)) == full[120:] + more
    assert t.start() == 200 and t.size() == 400


def test_follower_keeps_the_newest_segment_open_until_told_of_a_change(made):
    t, full = made
    follower = Follower(t)
    try:
        assert follower.read(150, 100) == full[150:250]  # older bytes: through the directory
        assert follower.read(320, 100) == full[320:350]  # the newest segment, now open
        with open(t.path / "300.log", "ab") as f:  # its writer appends
            f.write(b"more")
        assert follower.read(350, 100) == b"more"
        (t.path / "354.log").write_bytes(b"next")  # and rolls: unseen until told
        assert follower.read(354, 100) == b""
        follower.close()
        assert follower.read(354, 100) == b"next"
        with pytest.raises(OutOfRange, match="bytes before 100 were dropped"):
            follower.read(99, 10)
    finally:
        follower.close()


def test_legacy_transcript_is_moved_and_its_writer_goes_on(tmp_path):
    legacy = tmp_path / "s1.log"
    legacy.write_bytes(b"old output\r\n")
    with legacy.open("ab") as writer:  # the `cat >>` of a session started before
        t = Transcript("s1", tmp_path / "s1")
        assert not legacy.exists() and oct((tmp_path / "s1").stat().st_mode & 0o777) == "0o700"
        writer.write(b"still written\r\n")
    assert t.tail(100) == b"old output\r\nstill written\r\n"
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / "0.log").write_bytes(b"new")
    (tmp_path / "s2.log").write_bytes(b"older")
    assert Transcript("s2", tmp_path / "s2").tail(100) == b"new"  # never overwritten
    assert (tmp_path / "s2.log").exists()


# -- the writers, without a server ---------------------------------------------------


def test_broker_recorder_rolls_drops_reads_and_continues(tmp_path):
    directory = tmp_path / "s1"
    cap = 256 << 10
    data = numbered(1, 80_000)
    recorder = Recorder("s1", directory, cap)
    pos, step = 0, 1
    while pos < len(data):
        assert recorder.write(data[pos : pos + step]) == pos
        pos += step
        step = step * 3 % 99991 + 1
    assert recorder.end == len(data)
    assert_layout(directory, cap)
    first = segments(directory)[0]
    assert recorder.lost_since(first - 1) and not recorder.lost_since(first)
    boundary = segments(directory)[1]
    assert recorder.read(boundary - 5, 100) == data[boundary - 5 : boundary]  # one segment
    assert recorder.read(boundary, 10) == data[boundary : boundary + 10]
    recorder.close()
    again = Recorder("s1", directory, cap)
    assert again.write(b"more") == len(data)
    again.close()
    assert Transcript("s1", directory).tail(17) == data[-13:] + b"more"


def test_broker_recorder_indexes_when_output_came(tmp_path):
    """Three bursts 300 ms apart: one index entry each, at the burst's first byte and
    its time; an index goes with its segment when the cap drops it."""
    directory = tmp_path / "s1"
    directory.mkdir()
    bursts = [numbered(1 + 1000 * i, 1000) for i in range(3)]  # 13 kB each
    cap = 256 << 10
    recorder = Recorder("s1", directory, cap)
    sent = []
    for burst in bursts:
        sent.append(time.time())
        for i in range(0, len(burst), 4096):
            recorder.write(burst[i : i + 4096])
        time.sleep(0.3)
    recorder.close()
    t = Transcript("s1", directory)
    timeline = t.timeline()
    assert [o for o, _ in timeline] == [0, 13_000, 26_000]
    for (_, ms), when in zip(timeline, sent, strict=True):
        assert when * 1000 - 5 <= ms <= when * 1000 + 250
    assert time_at(timeline, 12_999) == timeline[0][1]
    assert time_at(timeline, 13_000) == timeline[1][1]
    assert oct((directory / "0.idx").stat().st_mode & 0o777) == "0o600"
    # the cap drops old segments with their indexes
    again = Recorder("s1", directory, cap)
    again.write(numbered(3001, 80_000))
    again.close()
    starts = segments(directory)
    assert starts[0] > 0 and sorted(directory.glob("*.idx")) == sorted(
        directory / f"{s}.idx" for s in starts
    )
    assert all(o >= starts[0] for o, _ in t.timeline())


def test_a_full_index_ends_its_segment_early(tmp_path, monkeypatch):
    """Output trickling in, 1 byte every 200 ms (an agent's spinner, slower): each
    segment's index stays within 1/INDEX_SHARE of the segment, and every byte's time
    is still known."""
    clock = [1767225600.0]

    def tick() -> float:
        clock[0] += 0.2
        return clock[0]

    monkeypatch.setattr(recorder_module.time, "time", tick)
    directory = tmp_path / "s1"
    cap = 256 << 10
    size, _ = segmenting(cap)
    recorder = Recorder("s1", directory, cap)
    written = {}
    for _ in range(3 * size // 8):
        written[recorder.end] = int((clock[0] + 0.2) * 1000)  # what tick() answers next
        recorder.write(b"x")
    recorder.close()
    starts = segments(directory)
    assert len(starts) >= 3  # rolled early: the bytes fit in one segment
    for s in starts:
        assert (directory / f"{s}.idx").stat().st_size <= size // INDEX_SHARE + 32
    timeline = Transcript("s1", directory).timeline()
    assert all(time_at(timeline, o) == ms for o, ms in written.items() if o >= starts[0])


# -- a full disk ---------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs on ``path`` (root only; skips otherwise), unmounted at the end."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield path
    finally:
        for _ in range(50):  # processes that held files there may take a moment to go
            if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(path)], check=True)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = 1 << 16
        while chunk:
            try:
                os.write(fd, b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                chunk //= 2
    finally:
        os.close(fd)
    return filler


def gap_markers(directory: Path) -> list[tuple[int, int]]:
    return parse_listing(os.listdir(directory)).gaps


def test_broker_recorder_on_a_full_disk(tmp_path, caplog):
    caplog.set_level(logging.INFO, "jupyter_agents.broker")
    with small_tmpfs(tmp_path / "fs") as fs:
        recorder = Recorder("s1", fs / "s1", 32 << 20)
        recorder.write(b"before\r\n")
        filler = fill(fs)
        before = time.time()
        for i in range(200):  # an episode: many failed writes
            recorder.write(b"x" * 4096 + b"%d\r\n" % i)
        (gap,) = gap_markers(fs / "s1")
        assert recorder.end == gap[0] and before - 1 <= gap[1] <= time.time()
        assert recorder.lost_since(gap[0]) and not recorder.lost_since(gap[0] + 1)
        assert sum("transcript write failed" in r.message for r in caplog.records) == 1
        filler.unlink()
        recorder.write(b"after\r\n")
        assert Transcript("s1", fs / "s1").tail(7) == b"after\r\n"
        assert "written again" in caplog.text and len(gap_markers(fs / "s1")) == 1
        recorder.close()


# -- end to end: real servers, tmux and the broker ------------------------------------


def get_log(server: ServerProcess, sid: str, query: str = "", **headers: str) -> Any:
    """GET the session's log: (status, body, headers)."""
    url = f"{server.base}/api/agents/sessions/{sid}/log{query}"
    req = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def shell(server: ServerProcess) -> tuple[str, str]:
    """A new shell session: (terminal name, session id)."""
    status, model = server.request("POST", "/api/agents/sessions", {"kind": "shell"})
    assert status == 201, model
    return model["name"], model["id"]


@both_backends
def test_cap_drops_oldest_segments_and_reads_span_them(agents_server, agents_backend):
    cap = 256 << 10
    server = agents_server(
        args=[f"--AgentsApp.transcript_max_bytes={cap}", "--AgentsApp.restore_tail_bytes=100000"]
    )
    name, sid = shell(server)
    client = server.ws(name)
    client.wait_for(lambda c: len(c.messages) >= 2)
    client.stdin("seq -f 'line-%06g' 1 80000; echo DONE-$((40+2))\r")  # ~1 MB
    poll(lambda: b"DONE-42" in transcript(server.state_dir, sid).tail(100), 60, "the output")
    client.close()
    directory = server.state_dir / "transcripts" / sid
    assert_layout(directory, cap)
    starts = segments(directory)
    assert len(starts) == segmenting(cap)[1] == 4  # 16 segments written, 12 dropped
    kept = transcript_bytes(server.state_dir, sid)
    first, size = starts[0], starts[0] + len(kept)
    lines = [int(n) for n in re.findall(rb"line-(\d{6})\r\n", kept)]
    assert lines[-1] == 80000 and lines == list(range(lines[0], 80001))  # nothing lost

    status, body, headers = get_log(server, sid)  # no offset: from the first kept byte
    assert (status, body, int(headers["X-Transcript-Size"])) == (200, kept, size)
    status, body, headers = get_log(server, sid, Range=f"bytes=-{size - starts[-1] + 100}")
    assert status == 206 and body == kept[-(size - starts[-1] + 100) :]
    assert headers["Content-Range"] == f"bytes {starts[-1] - 100}-{size - 1}/{size}"
    status, body, _ = get_log(server, sid, f"?offset={starts[1] - 7}&length=20")
    assert (status, body) == (200, kept[starts[1] - 7 - first : starts[1] + 13 - first])
    status, body, _ = get_log(server, sid, f"?offset={first - 1}")
    assert status == 416 and f"bytes before {first} were dropped" in body.decode()
    _, model = server.request("GET", f"/api/agents/sessions/{sid}")
    assert (model["transcript_start"], model["transcript_incomplete_since"]) == (first, None)

    # the backend dies: restore shows the tail (100000 bytes: across a segment boundary)
    open_backend(server.state_dir, agents_backend).kill_server()

    def status() -> str:  # listing reconciles
        return {m["id"]: m for m in server.request("GET", "/api/agents/sessions")[1]}[sid]["status"]

    poll(lambda: status() == "interrupted", what="interrupted")
    status, restored = server.request("POST", f"/api/agents/sessions/{sid}/restore", {})
    assert status == 200 and restored["status"] == "running", restored
    client = server.ws(restored["name"])
    marker = f"--- restored shell session {sid}"
    client.wait_for(marker)
    at = kept.index(b"line-", starts[-1] - 200 - first)  # a line of the segment before
    before_boundary = kept[at : at + 11].decode()
    text = client.text
    assert text.index(before_boundary) < text.index("line-080000") < text.index(marker)
    client.stdin("echo AFTER-$((5+5))\r")
    poll(lambda: b"AFTER-10" in transcript(server.state_dir, sid).tail(200), 20, "new output")
    assert transcript(server.state_dir, sid).size() > size  # offsets go on
    client.close()


@both_backends
def test_full_disk_leaves_one_gap_and_writing_resumes(agents_server, agents_state_dir):
    agents_state_dir.mkdir(mode=0o700)
    with small_tmpfs(agents_state_dir / "transcripts") as transcripts:
        try:
            server = agents_server(args=["--AgentsApp.refresh_interval=0.3"])
            name, sid = shell(server)
            directory = transcripts / sid
            client = server.ws(name)
            client.wait_for(lambda c: len(c.messages) >= 2)
            client.stdin("echo BEFORE-$((1+1))\r")
            poll(lambda: b"BEFORE-2" in transcript(server.state_dir, sid).tail(200), 10, "it")
            filled_at = time.time()
            filler = fill(transcripts)
            client.stdin("seq -f 'full-%06g' 1 30000; echo FULL-$((2+2))\r")
            client.wait_for("FULL-4", timeout=30)  # the session runs on, and echoes
            client.stdin("echo ECHO-$((3+3))\r")
            client.wait_for("ECHO-6")
            client.close()  # a viewer that comes while the disk is full sees it live too
            client = server.ws(name)
            client.wait_for(lambda c: len(c.messages) >= 2)
            client.stdin("echo LATE-$((5*5))\r")
            client.wait_for("LATE-25")
            (gap,) = poll(lambda: gap_markers(directory), 10, "a gap marker")
            assert filled_at - 1 <= gap[1] <= time.time()
            assert b"FULL-4" not in transcript(server.state_dir, sid).tail(200)
            logged = "transcript incomplete: output from byte"
            poll(lambda: logged in server.log_path.read_text(), 10, "the gap logged")
            _, model = server.request("GET", f"/api/agents/sessions/{sid}")
            assert model["transcript_incomplete_since"] is not None

            filler.unlink()
            client.stdin("echo AFTER-$((4+4))\r")
            client.wait_for("AFTER-8")
            poll(lambda: b"AFTER-8" in transcript(server.state_dir, sid).tail(200), 10, "AFTER")
            time.sleep(1)  # a few more refreshes of the server
            assert gap_markers(directory) == [gap]
            assert server.log_path.read_text().count(logged) == 1
            client.close()
        finally:
            kill_backends(agents_state_dir)  # nothing may hold the tmpfs


@both_backends
def test_output_printed_while_the_server_waits_on_a_full_disk_reaches_viewers(
    agents_server, agents_state_dir, tmp_path
):
    """What a session prints after the disk filled and before the server follows it
    again (tmux: before its stream switched to control mode; a busy machine may starve
    the server for longer than a command runs) is in no transcript: viewers are redrawn
    with it. The server is stopped for that time here (SIGSTOP), so all of a command's
    output, its end included, comes then."""
    agents_state_dir.mkdir(mode=0o700)
    waiting, go, done = tmp_path / "waiting", tmp_path / "go", tmp_path / "done"
    with small_tmpfs(agents_state_dir / "transcripts") as transcripts:
        try:
            server = agents_server()
            assert server.proc is not None
            name, sid = shell(server)
            client = server.ws(name)
            client.wait_for(lambda c: len(c.messages) >= 2)
            client.stdin(
                f"touch {waiting}; until [ -e {go} ]; do sleep 0.05; done; "
                f"seq -f 'full-%06g' 1 3000; echo FULL-$((2+2)); touch {done}\r"
            )
            poll(waiting.exists, 10, "the shell to wait")
            server.proc.send_signal(signal.SIGSTOP)
            try:
                fill(transcripts)
                go.touch()
                poll(done.exists, 30, "the command's end")
            finally:
                server.proc.send_signal(signal.SIGCONT)
            client.wait_for("FULL-4", timeout=15)
            client.stdin("echo ECHO-$((3+3))\r")  # and it follows the session on
            client.wait_for("ECHO-6")
            assert len(gap_markers(transcripts / sid)) == 1
            assert b"FULL-4" not in transcript_bytes(server.state_dir, sid)
            client.close()
        finally:
            kill_backends(agents_state_dir)  # nothing may hold the tmpfs


@pytest.mark.parametrize("agents_backend", ["tmux"], indirect=True)
def test_a_replay_tmux_cannot_save_comes_through_control_mode(agents_server, agents_state_dir):
    """tmux saves a replay's history into files in its state dir. When it cannot (a
    full disk: the file it writes is empty), a viewer still gets the whole history,
    through control mode, which streams the session from then on, also after tmux
    detached that control client."""
    agents_state_dir.mkdir(mode=0o700)
    with small_tmpfs(agents_state_dir / "tmux") as tmux_dir:
        try:
            server = agents_server()
            name, _ = shell(server)
            client = server.ws(name)
            client.wait_for(lambda c: len(c.messages) >= 2)
            client.stdin("seq -f 'hist-%g' 1 3000; echo DONE-$((2+3))\r")
            client.wait_for("DONE-5")
            client.close()
            fill(tmux_dir)
            client = server.ws(name)
            client.wait_for(lambda c: len(c.messages) >= 2)
            replay = client.messages[1][1]
            assert {int(n) for n in re.findall(r"hist-(\d+)", replay)} == set(range(1, 3001))
            client.stdin("echo LIVE-$((6*7))\r")
            client.wait_for("LIVE-42")
            logged = "tmux could not save a replay"
            poll(lambda: logged in server.log_path.read_text(), 10, "the fallback logged")
            # its client of its own comes back by itself when tmux detaches it
            detach_tmux_control_clients(server.state_dir)
            poll(lambda: tmux_control_clients(server.state_dir), 10, "the live client back")
            client.stdin("echo AGAIN-$((6*8))\r")
            client.wait_for("AGAIN-48")
            client.close()
        finally:
            kill_backends(agents_state_dir)
