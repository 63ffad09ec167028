"""Results: one :class:`Row` per figure, a plain-text table for the terminal, a
markdown table for BENCHMARKS.md, and a description of the machine."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: BENCHMARKS.md is rewritten between these markers only; the rest is hand-written
BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"


@dataclasses.dataclass
class Row:
    """One figure of one benchmark, for every flavor that has it.

    ``values`` maps a column name (``bare``, ``stock``, ``tmux``, ...) to a number in
    ``unit``. ``verdict`` maps each of our flavors to True (target met), False (missed)
    or is empty when the row has no target. ``ratio`` says whether "ours / stock" means
    something for this row.
    """

    bench: str
    measure: str
    unit: str
    values: dict[str, float | None]
    target: str = ""
    verdict: dict[str, bool] = dataclasses.field(default_factory=dict)
    ratio: bool = True
    note: str = ""


def fmt(value: float | None, unit: str) -> str:
    """A number for humans, in ``unit``."""
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.3g} ms" if value < 100 else f"{value:.0f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MB/s":
        return f"{value:.1f} MB/s"
    if unit == "KiB":
        return f"{value:,.0f} KiB"
    if unit == "%":
        return f"{value:.2f} %"
    if unit == "count":
        return f"{value:,.0f}"
    return f"{value:.3g} {unit}"


def ratio_text(row: Row, flavor: str) -> str:
    ours, stock = row.values.get(flavor), row.values.get("stock")
    if not row.ratio or ours is None or not stock:
        return "-"
    return f"{ours / stock:.2f}x"


def verdict_text(row: Row, ours: Sequence[str]) -> str:
    if not row.verdict:
        return ""
    parts = []
    for flavor in ours:
        if flavor in row.verdict:
            word = "met" if row.verdict[flavor] else "MISSED"
            parts.append(word if len(ours) == 1 else f"{flavor}: {word}")
    return ", ".join(parts)


def _columns(rows: Sequence[Row], ours: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    value_cols = ["bare", "stock", *ours]
    value_cols = [c for c in value_cols if any(c in r.values for r in rows)]
    header = ["#", "measure", *value_cols]
    header += [f"{f}/stock" for f in ours]
    header += ["target", "status"]
    body = []
    for r in rows:
        line = [r.bench, r.measure]
        line += [fmt(r.values.get(c), r.unit) if c in r.values else "" for c in value_cols]
        line += [ratio_text(r, f) for f in ours]
        line += [r.target, verdict_text(r, ours)]
        body.append(line)
    return header, body


def text_table(rows: Sequence[Row], ours: Sequence[str]) -> str:
    """The table ``bench/run`` prints."""
    header, body = _columns(rows, ours)
    widths = [max([len(h), *(len(b[i]) for b in body)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    notes = [f"  [{r.bench}] {r.measure}: {r.note}" for r in rows if r.note]
    return "\n".join([*lines, *(["notes:", *notes] if notes else [])])


def markdown_table(rows: Sequence[Row], ours: Sequence[str]) -> str:
    header, body = _columns(rows, ours)
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in b) + " |" for b in body]
    notes = [f"- **{r.bench} {r.measure}**: {r.note}" for r in rows if r.note]
    return "\n".join([*out, "", *notes])


def _version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


def revision() -> str:
    """The jupyter_agents tree measured: ``$BENCH_REVISION`` if set (a run from an
    exported snapshot), else the git commit of this checkout (``+dirty`` with local
    changes)."""
    if os.environ.get("BENCH_REVISION"):
        return os.environ["BENCH_REVISION"]
    repo = str(Path(__file__).resolve().parent.parent)
    head = _version(["git", "-C", repo, "rev-parse", "--short", "HEAD"])
    if not head:
        return "unknown"
    dirty = _version(["git", "-C", repo, "status", "--porcelain", "--", "jupyter_agents"])
    return head + ("+dirty" if dirty else "")


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    from importlib.metadata import PackageNotFoundError, version

    def dist(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        if m:
            cpu = m.group(1).strip()
    return {
        "jupyter_agents": revision(),
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "kernel": platform.release(),
        "tmux": _version(["tmux", "-V"]),
        "python": platform.python_version(),
        "jupyter_server": dist("jupyter_server"),
        "jupyter_server_terminals": dist("jupyter_server_terminals"),
        "terminado": dist("terminado"),
        "tornado": dist("tornado"),
        "websocket-client": dist("websocket-client"),
    }


def write_markdown(path: Path, section: str) -> None:
    """Replace the generated section of ``path`` (between the markers) with ``section``;
    a file without the markers gets the section appended."""
    block = f"{BEGIN}\n{section.rstrip()}\n{END}"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
