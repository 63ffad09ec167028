"""The tmux transcript writer (``backends/tmux/writer.pl``) on its own, as ``pipe-pane``
runs it, against the layout of :mod:`jupyter_agents.terminal.segments`: the edge cases the
broker's recorder is tested for in test_transcripts.py (a roll to a new segment, the
oldest dropped past the cap, the timing index, an index that fills first, a full disk),
and the gap markers a roll drops."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from test_transcripts import assert_layout, fill, gap_markers, numbered, segments, small_tmpfs

from jupyter_agents.backends.tmux.writer import writer_argv
from jupyter_agents.pytest_plugin import poll
from jupyter_agents.terminal.segments import INDEX_SHARE, segmenting, time_at
from jupyter_agents.terminal.transcripts import Transcript

#: a stand-in for ``Time::HiRes`` whose clock moves 0.2 s each time it is asked, from
#: 2026-01-01 (the writer asks once per read); the recorder's test moves its clock alike
FAKE_CLOCK = """\
package Time::HiRes;
my $now = 1767225600.0;
sub import { no strict 'refs'; *{caller() . '::time'} = \\&now; }
sub now { $now += 0.2; return $now; }
1;
"""


def start_writer(
    directory: Path, max_bytes: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """The writer as ``pipe-pane`` runs it (the backend's own argv), reading a pipe."""
    return subprocess.Popen(writer_argv(directory, max_bytes), stdin=subprocess.PIPE, env=env)


def send(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()


def finish(proc: subprocess.Popen[bytes]) -> None:
    """End the pipe; the writer ends with it."""
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(10) == 0


def run_writer(directory: Path, data: bytes, max_bytes: int) -> None:
    """Feed ``data`` to the writer in uneven chunks, then end the pipe."""
    proc = start_writer(directory, max_bytes)
    pos, step = 0, 1
    while pos < len(data):
        send(proc, data[pos : pos + step])
        pos += step
        step = step * 3 % 9973 + 1
    finish(proc)


def test_writer_rolls_drops_and_continues(tmp_path):
    directory = tmp_path / "s1"
    directory.mkdir()
    cap = 256 << 10
    first = numbered(1, 80_000)  # ~1 MB
    run_writer(directory, first, cap)
    assert_layout(directory, cap)
    t = Transcript("s1", directory)
    assert t.size() == len(first) and t.start() > 0
    assert t.tail(len(first)) == first[t.start() :]
    assert len(segments(directory)) == segmenting(cap)[1]
    assert oct((directory / f"{segments(directory)[-1]}.log").stat().st_mode & 0o777) == "0o600"
    # a restore: the next run appends at the same logical offsets
    second = numbered(80_001, 100)
    run_writer(directory, second, cap)
    assert t.size() == len(first) + len(second)
    assert t.tail(len(second) + 13) == first[-13:] + second


def test_writer_indexes_when_output_came(tmp_path):
    """Three bursts 300 ms apart: one index entry each, at the burst's first byte and
    its time; an index goes with its segment when the cap drops it."""
    directory = tmp_path / "s1"
    directory.mkdir()
    bursts = [numbered(1 + 1000 * i, 1000) for i in range(3)]  # 13 kB each
    cap = 256 << 10
    proc = start_writer(directory, cap)
    sent = []
    for burst in bursts:
        sent.append(time.time())
        for i in range(0, len(burst), 4096):
            send(proc, burst[i : i + 4096])
        time.sleep(0.3)
    finish(proc)
    t = Transcript("s1", directory)
    timeline = t.timeline()
    assert [o for o, _ in timeline] == [0, 13_000, 26_000]
    for (_, ms), when in zip(timeline, sent, strict=True):
        assert when * 1000 - 5 <= ms <= when * 1000 + 250
    assert time_at(timeline, 12_999) == timeline[0][1]
    assert time_at(timeline, 13_000) == timeline[1][1]
    assert oct((directory / "0.idx").stat().st_mode & 0o777) == "0o600"
    # the cap drops old segments with their indexes
    run_writer(directory, numbered(3001, 80_000), cap)
    starts = segments(directory)
    assert starts[0] > 0 and sorted(directory.glob("*.idx")) == sorted(
        directory / f"{s}.idx" for s in starts
    )
    assert all(o >= starts[0] for o, _ in t.timeline())


def test_a_full_index_ends_its_segment_early(tmp_path):
    """Output trickling in, 8 bytes a read 200 ms apart (an agent's spinner, slower; the
    clock is a stand-in ``Time::HiRes``): each segment's index stays within
    1/INDEX_SHARE of the segment, and every byte's time is still known."""
    lib = tmp_path / "lib"
    (lib / "Time").mkdir(parents=True)
    (lib / "Time" / "HiRes.pm").write_text(FAKE_CLOCK)
    directory = tmp_path / "s1"
    directory.mkdir()
    cap = 256 << 10
    size, _ = segmenting(cap)
    proc = start_writer(directory, cap, {**os.environ, "PERL5LIB": str(lib)})
    t = Transcript("s1", directory)
    written: dict[int, int] = {}
    clock = 1767225600.0
    offset = 0
    for _ in range(6000):  # 48 kB: less than one segment
        clock += 0.2  # as the stand-in counts (the same doubles)
        written[offset] = int(clock * 1000)
        send(proc, b"spinner|")
        offset += 8
        deadline = time.monotonic() + 5
        while t.size() != offset:  # one read each
            assert time.monotonic() < deadline, "the writer did not read it"
    finish(proc)
    starts = segments(directory)
    assert len(starts) >= 3  # rolled early: the bytes fit in one segment
    for s in starts:
        assert (directory / f"{s}.idx").stat().st_size <= size // INDEX_SHARE + 32
    timeline = t.timeline()
    assert all(time_at(timeline, o) == ms for o, ms in written.items() if o >= starts[0])


def test_a_roll_drops_the_gap_markers_before_the_first_kept_byte(tmp_path):
    directory = tmp_path / "s1"
    directory.mkdir()
    (directory / "gap-5-1767225600").touch()  # lost output, a while ago
    cap = 256 << 10
    size, keep = segmenting(cap)
    run_writer(directory, b"x" * (size * (keep - 1) + 10), cap)
    assert gap_markers(directory) == [(5, 1767225600)]  # byte 5 is still kept
    run_writer(directory, b"y" * size, cap)  # one more roll drops segment 0
    assert segments(directory)[0] == size and gap_markers(directory) == []


def test_writer_on_a_full_disk(tmp_path):
    """A full disk: the output of the failed writes is lost, one gap marker says where
    and when, and writing resumes by itself once there is room."""
    with small_tmpfs(tmp_path / "fs") as fs:
        directory = fs / "s1"
        directory.mkdir()
        proc = start_writer(directory, 32 << 20)
        t = Transcript("s1", directory)
        try:
            send(proc, b"before\r\n")
            poll(lambda: t.size() == 8, 5, "the first write")
            filler = fill(fs)
            before = time.time()
            chunks = [b"x" * 4096 + b"%d\r\n" % i for i in range(200)]
            for i, chunk in enumerate(chunks):  # an episode: many failed writes
                send(proc, chunk)  # (the pipe blocks while the writer is behind)
                if i == 100:  # longer than a second: a marker more would have a new name
                    time.sleep(1.1)
            (gap,) = poll(lambda: gap_markers(directory), 5, "a gap marker")
            assert before - 1 <= gap[1] <= time.time()
            filler.unlink()
            send(proc, b"after\r\n")
            poll(lambda: t.tail(7) == b"after\r\n", 5, "writing again")
            assert gap_markers(directory) == [gap]  # one marker for the episode
            kept = t.tail(t.size())
            assert re.fullmatch(rb"before\r\nx+", kept[: gap[0]])  # nothing lost before it
            # from the gap on: what the pipe still held once there was room, then "after"
            resumed = kept[gap[0] : -len(b"after\r\n")]
            assert b"".join(chunks).endswith(resumed)
            assert len(re.findall(rb"x(\d+)\r\n", kept)) < 100  # most of it was lost
        finally:
            finish(proc)


@pytest.mark.parametrize("max_bytes", [0, 1 << 20])
def test_writer_argv_runs_the_shipped_script(tmp_path, max_bytes):
    """The command line the backend gives ``pipe-pane``: perl with the package's
    ``writer.pl`` and the segmenting of the cap."""
    argv = writer_argv(tmp_path, max_bytes)
    assert argv[0] == "perl" and Path(argv[1]).is_file() and Path(argv[1]).suffix == ".pl"
    assert argv[2:] == [str(tmp_path), *map(str, segmenting(max_bytes))]
