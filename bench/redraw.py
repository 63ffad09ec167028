"""11. Redraw-heavy output, the shape of an agent TUI: timed like group 1 (``cat`` of a
file in a terminal until a websocket client has received an end marker printed after
it), on two payloads that are mostly escape sequences and overwrites rather than text:

- *progress*: one line rewritten with ``\\r`` and ``ESC[K`` (a progress bar), 30,000
  times (8,000 in quick mode);
- *TUI frames*: full-screen repaints as an agent CLI draws them: cursor hidden, each
  frame a cursor-home, 22 coloured rows placed with ``ESC[row;1H`` and ended with
  ``ESC[K``, a spinner status row rewritten with ``\\r``, and a prompt box (1,500
  frames, 400 in quick mode).

"delivered" checks exactness: the characters received against those the pty produces.
A tmux-only reference (the same ``cat`` in a pane of our tmux setup with its
``pipe-pane`` writer, no client) shows what tmux's own terminal emulation, which must
parse every byte, allows.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import throughput
from .harness import Flavor, Mode, median, server, workdir
from .report import Row

SPINNER = "✻✶✳✢·"


def make_progress_file(path: Path, rewrites: int) -> Path:
    """A progress bar rewritten ``rewrites`` times on one line, then a newline."""
    with open(path, "w", encoding="utf-8") as out:
        for i in range(1, rewrites + 1):
            bar = "#" * (i * 40 // rewrites)
            out.write(f"\r\x1b[Kdownloading [{bar:<40}] {i}/{rewrites} {i * 100 // rewrites}%")
        out.write("\r\n")
    return path


def make_frames_file(path: Path, frames: int) -> Path:
    """``frames`` full-screen repaints shaped like an agent TUI's (module docstring)."""
    words = ["reading", "files", "editing", "tests", "running", "the", "suite", "thinking"]
    with open(path, "w", encoding="utf-8") as out:
        out.write("\x1b[?25l\x1b[2J")
        for f in range(frames):
            parts = ["\x1b[H"]
            for row in range(1, 23):
                colour = 16 + (row * 7 + f) % 216
                text = " ".join(words[(row + f + k) % len(words)] for k in range(9))[:70]
                parts.append(f"\x1b[{row};1H\x1b[38;5;{colour}m{text}\x1b[0m\x1b[K")
            spin = SPINNER[f % len(SPINNER)]
            parts.append(f"\x1b[23;1H\r\x1b[2K\x1b[1;33m{spin}\x1b[0m Working… ({f // 10}s · ↑ {f}")
            parts.append(" tokens)\x1b[24;1H\x1b[38;5;246m╭─ > \x1b[0m\x1b[K")
            out.write("".join(parts))
        out.write("\x1b[?25h\r\n")
    return path


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    """Both payloads, each flavor's server up at once, runs interleaved."""
    ours = [f.name for f in flavors if f.ours]
    rewrites, frames = (30_000, 1_500) if mode.name == "full" else (8_000, 400)
    with workdir("redraw") as data, contextlib.ExitStack() as stack:
        payloads = {
            f"progress line rewritten {rewrites:,} times": make_progress_file(
                data / "progress.txt", rewrites
            ),
            f"{frames:,} TUI frames": make_frames_file(data / "frames.txt", frames),
        }
        with ThreadPoolExecutor(len(flavors)) as pool:
            started = list(
                pool.map(lambda f: stack.enter_context(server(f, f"redraw{f.name}")), flavors)
            )
        servers = {srv.flavor.name: srv for srv in started}
        names = {name: srv.create_terminal() for name, srv in servers.items()}
        for srv in started:
            srv.verify_flavor()
        rows: list[Row] = []
        for label, path in payloads.items():
            mb = path.stat().st_size / 1_000_000
            expected = throughput.expected_chars(path)
            speeds: dict[str, list[float]] = {"bare": []}
            delivered: dict[str, list[float]] = {}
            pane: list[float] = []
            for run_index in range(mode.runs):
                speeds["bare"].append(mb / throughput.bare_pty_seconds(path))
                if "tmux" in servers:
                    ref = data / f"ref-{path.stem}-{run_index}"
                    pane.append(mb / throughput.tmux_pane_seconds(ref, path))
                order = list(servers.items())
                if run_index % 2:
                    order.reverse()
                for name, srv in order:
                    seconds, received = throughput.ws_seconds(srv, names[name], path)
                    speeds.setdefault(name, []).append(mb / seconds)
                    share = 100 * received / expected
                    delivered.setdefault(name, []).append(min(share, 100.0))
            rows += _rows(speeds, delivered, f"{label} ({mb:.1f} MB)", ours, pane)
        return rows


def _rows(
    speeds: dict[str, list[float]],
    delivered: dict[str, list[float]],
    label: str,
    ours: list[str],
    pane: list[float],
) -> list[Row]:
    values: dict[str, float | None] = {k: median(v) for k, v in speeds.items()}
    stock, bare = values.get("stock"), values.get("bare")
    low = {f: min(v) for f, v in delivered.items()}
    reference = []
    if pane:
        ref = median(pane)
        reference.append(
            Row("11", "  reference: tmux pane + pipe-pane, no client", "MB/s",
                {"bare": bare, "stock": stock, "tmux": ref},
                note=f"{ref / bare:.2f}x bare" if bare else "")
        )  # fmt: skip
    return [
        Row(
            "11",
            f"redraw: {label} to a websocket client",
            "MB/s",
            values,
            target=">= 1.0x stock",
            verdict={f: bool(stock and (values[f] or 0) >= stock) for f in ours if f in values},
            note=f"median of {len(speeds['bare'])}",
        ),
        Row(
            "11",
            "  output delivered to the client (worst run)",
            "%",
            dict(low),
            target=">= 100 %",
            verdict={f: low[f] >= 100 for f in ours if f in low},
            ratio=False,
        ),
        *reference,
    ]
