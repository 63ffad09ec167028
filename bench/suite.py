"""The benchmark suite: ``python -m bench [--quick] [--only ...] [--out PATH]``.

Runs stock jupyter_server_terminals and our backends side by side on the same workloads
through real servers and websocket clients, prints one table, and (full mode) rewrites
the results section of BENCHMARKS.md. Exit status: 0, or 1 if a benchmark failed with
an error. A missed target is a result, never an error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import (
    archive,
    cli,
    cpu,
    events,
    idle,
    latency,
    load,
    reconcile,
    redraw,
    replay,
    restart,
    throughput,
    transcripts,
    turns,
    usage,
)
from .harness import FLAVORS, FULL, QUICK, REPO, Flavor, Mode, server, shared_servers, workdir
from .report import Row, machine, markdown_table, text_table, write_markdown


def io_group(flavors: list[Flavor], mode: Mode) -> list[Row]:
    """1, 2 and 6: one server per flavor, all running at once, runs interleaved so
    background noise hits every flavor alike. Each server has a second terminal that
    floods while echo latency is measured again (2, under flood)."""
    ours = [f.name for f in flavors if f.ours]
    with workdir("data") as data, contextlib.ExitStack() as stack:
        payload = data / "payload.b64"
        from .harness import make_base64_file

        make_base64_file(payload, mode.throughput_mb * 1_000_000)
        lines = throughput.make_seq_file(data / "seq.txt", mode.seq_lines)
        lines_mb = lines.stat().st_size / 1_000_000
        history = replay.make_history_file(data / "history.txt", mode.replay_lines)
        with ThreadPoolExecutor(len(flavors)) as pool:  # start-ups in parallel
            started = list(
                pool.map(lambda f: stack.enter_context(server(f, f"io{f.name}")), flavors)
            )
        servers = {srv.flavor.name: srv for srv in started}
        names = {}
        flood_names = {}
        for name, srv in servers.items():
            names[name] = srv.create_terminal()
            flood_names[name] = srv.create_terminal()
            srv.verify_flavor()

        mb_per_s: dict[str, list[float]] = {"bare": []}
        lines_mb_per_s: dict[str, list[float]] = {"bare": []}
        lines_reference: dict[str, list[float]] = {}
        reference: dict[str, list[float]] = {}
        delivered: dict[str, list[float]] = {}
        expected = throughput.expected_chars(payload)
        echo: dict[str, list[list[float]]] = {}
        flood: dict[str, list[latency.Flood]] = {}
        for run in range(mode.runs):
            mb_per_s["bare"].append(mode.throughput_mb / throughput.bare_pty_seconds(payload))
            lines_mb_per_s["bare"].append(lines_mb / throughput.bare_pty_seconds(lines))
            if any(f.backend == "tmux" for f in flavors):
                for i, (label, fn) in enumerate(throughput.TMUX_REFERENCES.items()):
                    seconds = fn(data / f"ref{run}-{i}", payload)
                    reference.setdefault(label, []).append(mode.throughput_mb / seconds)
                seconds = throughput.tmux_pane_seconds(data / f"lref{run}", lines)
                lines_reference.setdefault(throughput.PANE_REFERENCE, []).append(lines_mb / seconds)
            order = list(servers.items())
            if run % 2:
                order.reverse()
            for name, srv in order:
                seconds, received = throughput.ws_seconds(srv, names[name], payload)
                mb_per_s.setdefault(name, []).append(mode.throughput_mb / seconds)
                # the prompt and the marker line add a few characters: floor at 100 %
                share = 100 * received / expected
                delivered.setdefault(name, []).append(share if share < 100 else 100.0)
            for name, srv in order:
                seconds, _ = throughput.ws_seconds(srv, names[name], lines)
                lines_mb_per_s.setdefault(name, []).append(lines_mb / seconds)
            for name, srv in order:
                echo.setdefault(name, []).append(
                    latency.echo_latencies(srv, names[name], mode.keys)
                )
            for name, srv in order:
                under = latency.under_flood(
                    srv, names[name], flood_names[name], mode.keys, mode.flood_mb
                )
                flood.setdefault(name, []).append(under)
                if not under.drained:  # its shell may still be busy: a fresh one
                    flood_names[name] = srv.create_terminal()
        replays: dict[str, list[replay.Replay]] = {}
        for name, srv in servers.items():
            term = replay.prepare(srv, history, mode.replay_lines)
            replays[name] = [replay.measure(srv, term) for _ in range(mode.runs)]
    return [
        *throughput.rows(mb_per_s, f"{mode.throughput_mb:g} MB base64", ours, reference, delivered),
        *throughput.rows(
            lines_mb_per_s,
            f"short lines (`seq 1 {mode.seq_lines:,}`, {lines_mb:.1f} MB)",
            ours,
            lines_reference,
        ),
        *latency.rows(echo, mode.keys, ours),
        *latency.flood_rows(flood, mode.flood_mb, ours),
        *replay.rows(replays, mode.replay_lines, ours),
    ]


GROUPS: dict[str, Callable[[list[Flavor], Mode], list[Row]]] = {
    "io": io_group,
    "restart": restart.run,
    "reconcile": reconcile.run,
    "idle": idle.run,
    # 7-9 share one server with sessions per flavor (harness.shared_servers)
    "cli": cli.run,
    "load": load.run,
    "events": events.run,
    "transcripts": transcripts.run,
    "redraw": redraw.run,
    "archive": archive.run,
    "usage": usage.run,
    "turns": turns.run,
    "cpu": cpu.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced sizes, one run (CI)")
    parser.add_argument("--only", nargs="+", choices=sorted(GROUPS), help="run only these groups")
    parser.add_argument(
        "--flavors",
        nargs="+",
        default=list(FLAVORS),
        choices=sorted(FLAVORS),
        help="stacks to compare (stock is needed for ratios)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="markdown file to write results into (default: BENCHMARKS.md in full "
        "mode, nothing in quick mode)",
    )
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    flavors = [FLAVORS[f] for f in args.flavors]
    ours = [f.name for f in flavors if f.ours]
    out: Path | None = args.out or (None if args.quick else REPO / "BENCHMARKS.md")

    started = time.monotonic()
    rows: list[Row] = []
    errors: list[str] = []
    with shared_servers():
        for group, fn in GROUPS.items():
            if args.only and group not in args.only:
                continue
            t0 = time.monotonic()
            print(f"[bench] {group} ({mode.name}) ...", file=sys.stderr, flush=True)
            try:
                rows += fn(flavors, mode)
            except Exception:
                errors.append(group)
                traceback.print_exc()
            took = time.monotonic() - t0
            print(f"[bench] {group} took {took:.1f}s", file=sys.stderr, flush=True)
    total = time.monotonic() - started
    rows.sort(key=lambda r: int(r.bench))  # stable: groups keep their order within a number

    print(text_table(rows, ours))
    print(f"\n{mode.name} mode, {total:.0f}s" + (f"; ERRORS in {errors}" if errors else ""))
    if out is not None and rows:
        now = datetime.datetime.now().astimezone()
        info = machine()
        section = "\n".join(
            [
                f"Generated by `bench/run{' --quick' if mode is QUICK else ''}` on "
                f"{now:%Y-%m-%d %H:%M %Z} in {total / 60:.1f} min ({mode.name} mode: "
                f"medians of {mode.runs} run(s)).",
                "",
                "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
                "",
                markdown_table(rows, ours),
            ]
        )
        write_markdown(out, section)
        print(f"wrote {out}")
    return 1 if errors else 0
