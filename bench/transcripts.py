"""10. Transcripts people can use: search speed and what the timing index costs.

- *search*: transcripts of ``search_sessions`` sessions, ``search_mb`` MB in all, of
  mixed terminal output (plain lines, ``ls --color`` lines, ``\\r`` progress bars, an
  agent TUI's cursor moves and 256-colour text), written by the broker's recorder in the
  real layout; then :func:`jupyter_agents.sessions.search.search` pages through them the way a
  client follows ``next`` (each page bounded by ``SCAN_BUDGET``) for a word found once
  at the end of each transcript, so every byte is read. Plain text (case-insensitive,
  the default), a regex that starts with text (its lines are found by that text, as
  plain text is), and one that starts with a class (every line's text is decoded and
  stripped of escapes for it). Target: >= 200 MB/s. Stock has no search.
- *timing index*: the two transcript writers fed ``throughput_mb`` MB in 4 KiB writes
  (a pty's pace), as they run (tmux: the perl script ``pipe-pane`` runs, from a pipe;
  broker: the recorder in-process), against the same writers with the index switched
  off. The issue's target is end to end (no measurable cost on group 1's throughput);
  these rows show the writers' own cost, far above what a pty delivers.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_agents.backends.broker.recorder import Recorder
from jupyter_agents.backends.tmux.writer import WRITER
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.query import Query
from jupyter_agents.sessions.search import search
from jupyter_agents.terminal.segments import segmenting
from jupyter_agents.terminal.transcripts import Transcript

from .harness import Flavor, Mode, median, workdir
from .report import Row

TARGET_MB_S = 200
WORD = "xyzzy-needle"


def sample_output(size: int) -> bytes:
    """About ``size`` bytes of mixed terminal output (module docstring)."""
    lines = []
    n = 0
    total = 0
    while total < size:
        kind = n % 10
        if kind < 5:
            line = b"plain output line %d: compiling module_%d.py with options -O2 -g\r\n" % (n, n)
        elif kind < 8:
            line = b"\x1b[01;34mdir_%d\x1b[0m  \x1b[01;32mrun.sh\x1b[0m  notes-%d.txt\r\n" % (n, n)
        elif kind == 8:
            line = b"downloading 10%%\r\x1b[Kdownloading 55%%\r\x1b[Kdone %d\r\n" % n
        else:
            line = (
                b"\x1b[2K\x1b[1G\x1b[38;5;246m\xe2\x8f\xba Reading \x1b[1mfile_%d.py\x1b[22m"
                b"\x1b[39m (%d lines)\x1b[K\r\n" % (n, n)
            )
        lines.append(line)
        total += len(line)
        n += 1
    return b"".join(lines)


def _search_mb_s(transcripts: dict[str, Transcript], query: Query, total: int) -> float:
    sessions = [Session(sid, sid, "exited", "broker") for sid in transcripts]
    t0 = time.perf_counter()
    hits = 0
    page_query = query
    while True:
        page = search(sessions, transcripts.__getitem__, lambda s: [], page_query)
        hits += len(page.hits)
        if page.next is None:
            break
        page_query = Query(query.pattern, regex=query.regex, limit=query.limit, cursor=page.next)
    seconds = time.perf_counter() - t0
    if hits != len(transcripts):
        raise RuntimeError(f"search found {hits} hits, expected {len(transcripts)}")
    return total / 1e6 / seconds


def search_rows(ours: list[str], mode: Mode) -> list[Row]:
    count = mode.search_sessions
    per = mode.search_mb * 1_000_000 // count
    block = sample_output(per)
    with workdir("search") as work:
        transcripts = {}
        for i in range(count):
            sid = f"s{i:03d}"
            recorder = Recorder(sid, work / sid, 64 << 20)
            for start in range(0, len(block), 1 << 20):
                recorder.write(block[start : start + (1 << 20)])
            recorder.write(b"the end: %s %d\r\n" % (WORD.encode(), i))
            recorder.close()
            transcripts[sid] = Transcript(sid, work / sid)
        total = sum(t.size() for t in transcripts.values())
        queries = {
            "plain text": Query(WORD, limit=500),
            "regex": Query(r"xyzzy-ne+dle \d+$", regex=True, limit=500),
            # no text it must start with: every line's text is scanned
            "regex starting with a class": Query(r"[x]yzzy-ne+dle \d+$", regex=True, limit=500),
        }
        rows = []
        for label, query in queries.items():
            mb_s = median([_search_mb_s(transcripts, query, total) for _ in range(mode.runs)])
            rows.append(
                Row(
                    "10",
                    f"search, {label}: {total / 1e6:.0f} MB in {count} transcripts",
                    "MB/s",
                    {"stock": None, **{f: mb_s for f in ours}},
                    target=f">= {TARGET_MB_S} MB/s",
                    verdict={f: mb_s >= TARGET_MB_S for f in ours},
                    ratio=False,
                    note="stock has no search; one figure: the same code for both backends",
                )
            )
    return rows


def _feed(write: Callable[[bytes], object], data: bytes) -> None:
    for start in range(0, len(data), 4096):
        write(data[start : start + 4096])


def _tmux_writer_mb_s(directory: Path, data: bytes, index: bool) -> float:
    script = WRITER.read_text() if index else WRITER.read_text().replace("stamp($now);", "")
    size, keep = segmenting(64 << 20)
    directory.mkdir()
    proc = subprocess.Popen(
        ["perl", "-e", script, str(directory), str(size), str(keep)], stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    t0 = time.perf_counter()
    _feed(lambda chunk: os.write(fd, chunk), data)
    proc.stdin.close()
    proc.wait()
    return len(data) / 1e6 / (time.perf_counter() - t0)


class _Unindexed(Recorder):
    """The broker's recorder with its timing index switched off (for comparison)."""

    def _stamp(self, now: float) -> None:
        self._next_stamp = math.inf


def _recorder_mb_s(directory: Path, data: bytes, index: bool) -> float:
    recorder = (Recorder if index else _Unindexed)("bench", directory, 64 << 20)
    t0 = time.perf_counter()
    _feed(recorder.write, data)
    seconds = time.perf_counter() - t0
    recorder.close()
    return len(data) / 1e6 / seconds


def index_rows(mode: Mode) -> list[Row]:
    data = sample_output(mode.throughput_mb * 1_000_000)
    writers = {"tmux": _tmux_writer_mb_s, "broker": _recorder_mb_s}
    figures: dict[str, dict[bool, list[float]]] = {w: {True: [], False: []} for w in writers}
    with workdir("index") as work:
        for run in range(mode.runs):
            for name, fn in writers.items():
                for index in (False, True):  # alternated, so noise hits both alike
                    figures[name][index].append(fn(work / f"{name}-{run}-{index}", data, index))
    rows = []
    for name in writers:
        with_index, without = median(figures[name][True]), median(figures[name][False])
        cost = with_index / without
        rows.append(
            Row(
                "10",
                f"transcript writer with its timing index, {mode.throughput_mb} MB in 4 KiB "
                f"writes ({name}: {'perl via pipe-pane' if name == 'tmux' else 'recorder'})",
                "MB/s",
                {"stock": None, name: with_index},
                ratio=False,
                note=f"without the index {without:.0f} MB/s: {cost:.2f}x. The target is end "
                "to end (group 1: not measurable); a pty delivers ~30-50 MB/s, so a "
                "writer this fast is never the limit, and this row shows its own cost",
            )
        )
    return rows


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    ours = [f.name for f in flavors if f.ours]
    return [*search_rows(ours, mode), *index_rows(mode)]
