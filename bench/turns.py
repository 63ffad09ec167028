"""14. A long conversation in the turns view: the server's memory and the page's
responsiveness.

A claude session (the fake CLI of tests/fakes/fake_agent.py, which keeps its file where
Claude Code does) gets a prompt, so its conversation file exists; then ``turns_mb`` MB of
records of Claude Code's shape are appended to it (:func:`write_conversation`: per turn a
prompt, a thought, an answer in Markdown, three Bash/Read/Grep/Edit calls with their
results, which the CLI keeps twice, in the block and in ``toolUseResult``, and a closing
answer), the last an answer holding :data:`LAST`. Once the archive holds the file and
the usage ledger has read it (:func:`_caught_up`: a server does that once, not while a
view reads), on a server with JupyterLab, of the first of our flavors (the turns are read
by the same code on every backend), ``runs`` times, each part on a new server process
(:func:`_fresh`: the session lives on in its backend, and no allocator is warm from an
earlier read):

- *server*: every page of ``GET /api/agents/sessions/<id>/turns`` from the start, as the
  view reads them (``limit=500``, following ``next`` while ``more``, one at a time): the
  time, events/s, the server's CPU, and the RSS of the Jupyter server process (with any
  child of it that is not tmux) before and at its peak, sampled every 10 ms in a thread.
  Target: it grows by less than :data:`TARGET_MB` MB.
- *page*: JupyterLab in headless Chromium, and ``jupyter-agents:turns {id}`` run in the
  page. Measured there: the time until the last event's text shows and until the main
  thread is quiet (no long task for :data:`QUIET_MS` ms); the rows of the view (target: at
  most its ``MAX_ROWS``, 2,000) and the page's elements; the JS heap after a collection
  before and after, and its peak while loading (``performance.memory``, exact with
  ``--enable-precise-memory-info``); responsiveness: the longest gap between two
  animation frames, and the long tasks (over 50 ms) the browser reports. Chromium's own
  counters split the main thread's time (layout, style, the rest). The server's RSS is
  sampled meanwhile, against the same target.

Memory and frame gaps are the worst of the runs, times their median.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

import jupyter_agents
from jupyter_agents.pytest_plugin import TOKEN

from .archive import archived_whole, fake_claude_env
from .harness import BenchServer, Flavor, Mode, cpu_seconds, median, workdir
from .report import Row

#: the server's RSS may grow by less than this while the view reads (MB)
TARGET_MB = 50
#: the most rows the view keeps (labextension/src/turns.ts ``MAX_ROWS``)
MAX_ROWS = 2000
#: the page the view asks for (labextension/src/api.ts ``turnPage``)
PAGE = 500
#: the text of the last event: all was read once it shows
LAST = "bench-turns-last-event"
#: the main thread is quiet after this long with no long task (ms)
QUIET_MS = 1000
#: the refresh interval (s) while the archive and the usage ledger read the appended
#: records (the ledger reads at most 4 MB of a file per refresh; every 5 s, the default,
#: 100 MB take two minutes); the measurements run with the default
CATCH_UP = "--AgentsApp.refresh_interval=0.2"
#: what a tool's output is, in characters, one call after another
OUTPUT_SIZES = (200, 800, 1500, 400, 3000, 6000, 1000, 12000, 600, 40000)
CHROMIUM = "/usr/bin/chromium"
#: as tests/test_ui.py runs it, and with exact ``performance.memory`` figures
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-3d-apis",
    "--enable-precise-memory-info",
]
MB = 1_000_000


# -- the conversation --------------------------------------------------------------------


def _lines(rng: random.Random) -> str:
    """About 256 KB of tool output: paths, line numbers, words, a test log's lines."""
    words = [
        *("session", "server", "turns", "page", "event", "record", "file", "offset"),
        *("read", "write", "error", "value", "config", "path", "line", "module"),
        *("function", "return", "test", "passed", "failed", "import", "class", "data"),
        *("output", "input", "status", "pending", "completed", "tool", "call", "result"),
    ]
    out: list[str] = []
    total = 0
    while total < 256_000:
        n = len(out)
        said = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        if n % 3 == 0:
            line = f"src/pkg/module_{n % 97}.py:{n % 1000}: {said}\n"
        elif n % 3 == 1:
            line = f"{n % 400:6d}\t    {said}\n"
        else:
            line = f"tests/test_{n % 53}.py::test_{said.split()[0]}_{n} PASSED [{n % 100}%]\n"
        out.append(line)
        total += len(line)
    return "".join(out)


def _answer(turn: int, rng: random.Random, pool: str) -> str:
    """An answer in Markdown: a heading, a list, a code block, a paragraph."""
    at = rng.randrange(len(pool) - 2000)
    items = "\n".join(f"- `{line[:60].strip()}`" for line in pool[at : at + 900].splitlines()[1:6])
    return (
        f"## Step {turn}\n\nI read the module and ran the tests. What changed:\n\n{items}\n\n"
        f"```python\ndef step_{turn}(value):\n    return value + {turn}\n```\n\n"
        f"{pool[at + 900 : at + 900 + rng.randint(200, 900)]}"
    )


def _records(cid: str, cwd: str, size: int) -> Iterator[str]:
    """Lines of records of Claude Code's shape (module docstring), about ``size`` bytes
    (JSON escapes ASCII only), the last an answer holding :data:`LAST`."""
    rng = random.Random(14)  # noqa: S311 (the same conversation every run, no secret)
    pool = _lines(rng)
    clock = 1_796_000_000.0  # 2026-11-29
    written = 0
    calls = 0

    def record(kind: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        nonlocal clock
        clock += 1.5
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(clock))
        return {
            "parentUuid": None,
            "isSidechain": False,
            "userType": "external",
            "cwd": cwd,
            "sessionId": cid,
            "version": "2.1.197",
            "gitBranch": "main",
            "type": kind,
            "message": message,
            "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "timestamp": f"{stamp}.{int(clock * 1000) % 1000:03d}Z",
            **extra,
        }

    def assistant(blocks: list[dict[str, Any]], mid: str) -> dict[str, Any]:
        usage = {"input_tokens": 5, "cache_read_input_tokens": 20000, "output_tokens": 300}
        message = {"id": mid, "role": "assistant", "model": "claude-sonnet-4-5", "type": "message"}
        return record("assistant", {**message, "content": blocks, "usage": usage})

    def tool(turn: int) -> Iterator[dict[str, Any]]:
        nonlocal calls
        calls += 1
        use = f"toolu_{calls:020d}"
        size = OUTPUT_SIZES[calls % len(OUTPUT_SIZES)]
        at = rng.randrange(len(pool) - size)
        output = pool[at : at + size]
        path = f"{cwd}/src/pkg/module_{calls % 97}.py"
        name = ("Bash", "Read", "Grep", "Edit")[calls % 4]
        if name == "Bash":
            args: dict[str, Any] = {"command": f"pytest -q tests/test_{turn % 53}.py"}
            kept: dict[str, Any] = {"stdout": output, "stderr": "", "interrupted": False}
        elif name == "Read":
            args = {"file_path": path}
            kept = {"type": "text", "file": {"filePath": path, "content": output}}
        elif name == "Grep":
            args = {"pattern": f"def step_{turn}", "path": cwd, "output_mode": "content"}
            kept = {"mode": "content", "content": output, "numLines": output.count("\n")}
        else:  # the CLI keeps the whole file an edit changed, and answers in a line
            args = {"file_path": path, "old_string": output[:80], "new_string": f"# {turn}"}
            kept = {"filePath": path, "oldString": output[:80], "originalFile": output}
            output = f"The file {path} has been updated."
        block = {"type": "tool_use", "id": use, "name": name, "input": args}
        yield assistant([block], f"msg_{calls:024d}")
        result = {"type": "tool_result", "tool_use_id": use, "content": output}
        yield record("user", {"role": "user", "content": [result]}, toolUseResult=kept)

    def turn(n: int) -> Iterator[dict[str, Any]]:
        prompt = f"Please go on with step {n}: run the tests of module_{n % 97} and fix them."
        yield record("user", {"role": "user", "content": prompt})
        mid = f"msg_t{n:023d}"
        thinking = pool[n % 1000 : n % 1000 + 300]
        yield assistant([{"type": "thinking", "thinking": thinking, "signature": "x"}], mid)
        yield assistant([{"type": "text", "text": _answer(n, rng, pool)[:600]}], mid)
        for _ in range(3):
            yield from tool(n)
        yield assistant([{"type": "text", "text": _answer(n, rng, pool)}], f"msg_e{n:023d}")

    n = 0
    while written < size:
        for rec in turn(n):
            line = json.dumps(rec) + "\n"
            written += len(line)
            yield line
        n += 1
    yield json.dumps(assistant([{"type": "text", "text": f"All done. {LAST}"}], "msg_l")) + "\n"


def write_conversation(path: Path, cid: str, cwd: str, size: int) -> int:
    """Append about ``size`` bytes of records (:func:`_records`) to ``path``; the
    records written."""
    count = 0
    with open(path, "a") as f:
        for line in _records(cid, cwd, size):
            f.write(line)
            count += 1
    return count


# -- the server's memory -----------------------------------------------------------------


def _ours(server: psutil.Process) -> list[psutil.Process]:
    """The Jupyter server and those of its children that are not tmux."""
    procs = [server]
    for child in server.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.name() != "tmux":
                procs.append(child)
    return procs


def rss(procs: list[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


class PeakRss:
    """The largest RSS of ``procs`` (summed) seen while the block runs, sampled every
    ``every`` seconds in a thread."""

    def __init__(self, procs: list[psutil.Process], every: float = 0.01) -> None:
        self.procs = procs
        self.every = every
        self.peak = rss(procs)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.every):
            self.peak = max(self.peak, rss(self.procs))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss(self.procs))


def _settle(procs: list[psutil.Process], timeout: float = 60.0) -> None:
    """Wait until ``procs`` use under 5 % of a core over half a second (a server that
    started, or served a page that loaded, is done with it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c0 = cpu_seconds(procs)
        time.sleep(0.5)
        if cpu_seconds(procs) - c0 < 0.025:
            return


def read_all(srv: BenchServer, sid: str) -> dict[str, Any]:
    """Every page from the start (``limit=500``, following ``next`` while ``more``)."""
    procs = _ours(srv.server_process())
    before = rss(procs)
    c0 = cpu_seconds(procs)
    events = pages = 0
    last: dict[str, Any] = {}
    after = ""
    with PeakRss(procs) as peak:
        t0 = time.perf_counter()
        while True:
            query = f"?limit={PAGE}" + (f"&after={quote(after)}" if after else "")
            page = srv.request("GET", f"/api/agents/sessions/{sid}/turns{query}")
            events += len(page["events"])
            pages += 1
            last = page["events"][-1] if page["events"] else last
            after = page["next"]
            if not page["more"]:
                break
        seconds = time.perf_counter() - t0
    if LAST not in str(last.get("text")):
        raise RuntimeError(f"the pages did not end with the last event: {last}")
    return {
        "seconds": seconds,
        "events": events,
        "pages": pages,
        "cpu": cpu_seconds(procs) - c0,
        "before": before,
        "peak": peak.peak,
        "after": rss(procs),
        "processes": len(procs),
        "threads": procs[0].num_threads(),
    }


# -- the page ----------------------------------------------------------------------------

#: run in the page: open the view, watch frames, long tasks and the heap until quiet
OPEN_VIEW = """async ({id, marker, quietMs, limitMs}) => {
  const heap = () => performance.memory ? performance.memory.usedJSHeapSize : 0;
  const s = {maxGap: 0, frames: 0, peakHeap: heap(), longTasks: []};
  let running = true;
  let last = performance.now();
  const frame = () => {
    const now = performance.now();
    s.maxGap = Math.max(s.maxGap, now - last);
    last = now;
    s.frames += 1;
    s.peakHeap = Math.max(s.peakHeap, heap());
    if (running) { requestAnimationFrame(frame); }
  };
  const observer = new PerformanceObserver(list => {
    for (const e of list.getEntries()) { s.longTasks.push([e.startTime, e.duration]); }
  });
  observer.observe({type: 'longtask'});
  requestAnimationFrame(frame);
  const t0 = performance.now();
  let shown = null;
  const view = () => document.querySelector(
    `.jp-AgentsTurns[data-session-id="${id}"] .jp-AgentsTurns-list`);
  const look = () => {
    const row = view()?.lastElementChild;
    if (row && row.textContent.includes(marker)) {
      shown = performance.now() - t0;
    } else if (running) {
      requestAnimationFrame(look);
    }
  };
  requestAnimationFrame(look);
  await window.jupyterapp.commands.execute('jupyter-agents:turns', {id});
  const read = performance.now() - t0;
  const busyUntil = () => Math.max(t0 + read, ...s.longTasks.map(([a, d]) => a + d));
  await new Promise(done => {
    const check = () => {
      const now = performance.now();
      if (now - busyUntil() >= quietMs || now - t0 > limitMs) { done(); }
      else { setTimeout(check, 100); }
    };
    check();
  });
  running = false;
  observer.disconnect();
  const tasks = s.longTasks.map(([, d]) => d);
  const half = t0 + read / 2;
  const longestIn = later => Math.max(0, ...s.longTasks
    .filter(([a]) => (a >= half) === later).map(([, d]) => d));
  const list = view();
  return {
    shown, read, settled: busyUntil() - t0,
    maxGap: s.maxGap, frames: s.frames, peakHeap: s.peakHeap,
    longTasks: tasks.length, longest: Math.max(0, ...tasks),
    longestFirstHalf: longestIn(false), longestSecondHalf: longestIn(true),
    longTotal: tasks.reduce((a, b) => a + b, 0),
    rows: list ? list.childElementCount : -1,
    elements: document.getElementsByTagName('*').length,
    dropped: document.querySelector('.jp-AgentsTurns-dropped')?.textContent ?? '',
  };
}"""

#: Chromium's counters of the main thread's time (s), read before and after
TIMES = ("TaskDuration", "LayoutDuration", "RecalcStyleDuration")


def _metrics(cdp: Any, collect: bool = True) -> dict[str, float]:
    if collect:
        cdp.send("HeapProfiler.collectGarbage")
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def lab_env(work: Path) -> tuple[dict[str, str], list[str]]:
    """JupyterLab's settings (no news toast), workspaces and our built labextension for a
    server in ``work``: its environment and arguments."""
    settings = work / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = {
        "JUPYTERLAB_SETTINGS_DIR": str(work / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),
    }
    args = ["--LabApp.expose_app_in_browser=True"]  # window.jupyterapp
    built = Path(jupyter_agents.__file__).parent / "labextension"
    if (built / "package.json").exists():  # this tree's build, not another install's
        (work / "labextensions").mkdir()
        (work / "labextensions" / "jupyter-agents").symlink_to(built)
        args.append(f"--LabApp.extra_labextensions_path={work / 'labextensions'}")
    return env, args


def page_load(srv: BenchServer, sid: str, timeout: float) -> dict[str, Any]:
    """Open JupyterLab, then the turns view of ``sid`` (module docstring)."""
    from playwright.sync_api import sync_playwright

    procs = _ours(srv.server_process())
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 850})
            page.set_default_timeout(timeout * 1000)
            page.goto(f"{srv.proc.base}/lab?reset&token={TOKEN}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell")
            page.evaluate("() => window.jupyterapp.restored.then(() => true)")
            page.wait_for_selector("#jupyter-agents-panel", state="attached")
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            _settle(procs)
            before = _metrics(cdp)
            server_before = rss(procs)
            with PeakRss(procs) as peak:
                seen = page.evaluate(
                    OPEN_VIEW,
                    {"id": sid, "marker": LAST, "quietMs": QUIET_MS, "limitMs": timeout * 1000},
                )
            after = _metrics(cdp)
        finally:
            browser.close()
    if seen["shown"] is None:
        raise RuntimeError(f"the last event did not show: {seen}")
    return {
        **seen,
        "heap_before": before["JSHeapUsedSize"],
        "heap_after": after["JSHeapUsedSize"],
        "nodes": after["Nodes"],
        "times": {k: after[k] - before[k] for k in TIMES},
        "server_before": server_before,
        "server_peak": peak.peak,
        "server_threads": procs[0].num_threads(),
    }


# -- the group ---------------------------------------------------------------------------


def _ledger_read(state_dir: Path, sid: str) -> int:
    """How far the usage ledger has read session ``sid``'s conversation (bytes)."""
    db = sqlite3.connect(f"file:{state_dir / 'sessions.db'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT MAX(offset) FROM usage_files WHERE session_id = ?", (sid,)
        ).fetchone()
    finally:
        db.close()
    return int(row[0] or 0)


def _caught_up(srv: BenchServer, sid: str, conversation: Path, timeout: float = 120) -> None:
    """Wait until the archive holds the whole conversation and the usage ledger has read
    it (what a server does once after records are appended, not while a view reads)."""
    size = conversation.stat().st_size
    deadline = time.monotonic() + timeout
    while archived_whole(srv.state_dir, sid) is None or _ledger_read(srv.state_dir, sid) < size:
        if time.monotonic() > deadline:
            raise TimeoutError("the archive or the usage ledger did not read the conversation")
        time.sleep(0.1)


def _fresh(srv: BenchServer, sid: str) -> None:
    """A new server process on the same state dir (the session lives on in its
    backend), once it is quiet: what an earlier read (or the archive's copy) left in the
    old process's allocator is not there to reuse."""
    srv.stop()
    srv.restart_process()
    srv.start()
    srv.request("GET", f"/api/agents/sessions/{sid}")
    _settle(_ours(srv.server_process()))


def measure(flavor: Flavor, mode: Mode, browser: bool) -> dict[str, Any]:
    with workdir(f"turns{flavor.name}") as work:
        env, args = lab_env(work)
        srv = BenchServer(flavor, work, (*args, CATCH_UP), lab=True)
        srv.proc.extra_env.update({**fake_claude_env(work), **env})
        srv.start()
        try:
            status, agent = srv.proc.request(
                "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(work)}
            )
            if status != 201:
                raise RuntimeError(f"could not start the agent: {agent}")
            srv.proc.type_line(agent["name"], "bench-prompt", "claude heard: bench-prompt")
            files = list((work / "home" / ".claude" / "projects").glob("*/*.jsonl"))
            if len(files) != 1:
                raise RuntimeError(f"expected one conversation file, found {files}")
            conversation = files[0]
            t0 = time.perf_counter()
            records = write_conversation(
                conversation, conversation.stem, str(work), mode.turns_mb * MB
            )
            made = time.perf_counter() - t0
            _caught_up(srv, agent["id"], conversation)
            srv.proc.extra_args.remove(CATCH_UP)  # the next processes: the default
            out: dict[str, Any] = {
                "mb": conversation.stat().st_size / MB,
                "records": records,
                "made": made,
                "server": [],
                "page": [],
            }
            for _ in range(mode.runs):
                _fresh(srv, agent["id"])
                out["server"].append(read_all(srv, agent["id"]))
                if browser:
                    _fresh(srv, agent["id"])
                    out["page"].append(page_load(srv, agent["id"], timeout=300))
        finally:
            srv.stop()
    return out


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    ours = [f for f in flavors if f.ours]
    if not ours:
        return []
    flavor = ours[0]
    browser = os.access(CHROMIUM, os.X_OK) and shutil.which("tmux") is not None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        browser = False
    if not browser:
        print("[bench] turns: no Chromium or playwright: the page is left out", file=sys.stderr)
    fig = measure(flavor, mode, browser)
    print(json.dumps({"turns": fig}, indent=1), file=sys.stderr)
    return rows(fig, flavor.name)


def _runs(values: list[float], unit: str) -> str:
    return ", ".join(f"{v:.1f}" for v in values) + f" {unit}"


def rows(fig: dict[str, Any], name: str) -> list[Row]:
    """The group's rows, its figures under ``name`` (the flavor measured): memory and
    frame gaps the worst of the runs, times their median."""
    reads: list[dict[str, Any]] = fig["server"]
    n = len(reads)
    grew = [(r["peak"] - r["before"]) / MB for r in reads]
    worst_read = reads[grew.index(max(grew))]
    seconds = median([r["seconds"] for r in reads])
    events = reads[0]["events"]
    runs = f"the worst of {n} runs, each" if n > 1 else "one run"
    out = [
        Row(
            "14",
            f"turns: server RSS growth, every page of a {fig['mb']:.0f} MB conversation "
            f"({events:,} events) read",
            "MB",
            {"stock": None, name: max(grew)},
            target=f"< {TARGET_MB} MB",
            verdict={name: max(grew) < TARGET_MB},
            ratio=False,
            note=f"stock has no turns; one figure ({name}), the same code on every backend; "
            f"{runs} on a new server process: {_runs(grew, 'MB')}; Jupyter server RSS "
            f"{worst_read['before'] / MB:.0f} MB before, {worst_read['peak'] / MB:.0f} MB at "
            f"the peak; {worst_read['pages']} pages of "
            f"<= {PAGE} events, one at a time",
        ),
        Row(
            "14",
            "  time to read all pages",
            "s",
            {"stock": None, name: seconds},
            ratio=False,
            note=f"{events / seconds:,.0f} events/s, {fig['mb'] / seconds:.0f} MB/s; server "
            f"CPU {median([r['cpu'] for r in reads]):.2f} s (median of {n})",
        ),
    ]
    pages: list[dict[str, Any]] = fig["page"]
    if not pages:
        return out

    def mid(key: str) -> float:
        return median([p[key] for p in pages])

    def main(key: str) -> float:
        return median([p["times"][key] for p in pages])

    layout, style, busy = main("LayoutDuration"), main("RecalcStyleDuration"), main("TaskDuration")
    server = [(p["server_peak"] - p["server_before"]) / MB for p in pages]
    worst_server = pages[server.index(max(server))]
    gaps = [p["maxGap"] for p in pages]
    jank = pages[gaps.index(max(gaps))]
    runs = f"the worst of {n} runs" if n > 1 else "one run"
    fresh = ", each on a new server process" if n > 1 else ", on a new server process"
    worst = "in the worst " if n > 1 else ""
    out += [
        Row(
            "14",
            "turns view in JupyterLab: time until the last event shows",
            "s",
            {"stock": None, name: mid("shown") / 1000},
            ratio=False,
            note=f"median of {n}; all pages read in {mid('read') / 1000:.2f} s "
            f"({events / mid('read') * 1000:,.0f} events/s), the main thread quiet after "
            f"{mid('settled') / 1000:.2f} s; Chromium's main thread busy {busy:.2f} s: layout "
            f"{layout:.2f} s, style {style:.2f} s, the rest (script, pre-paint, paint) "
            f"{busy - layout - style:.2f} s",
        ),
        Row(
            "14",
            "  server RSS growth while the view loads",
            "MB",
            {"stock": None, name: max(server)},
            target=f"< {TARGET_MB} MB",
            verdict={name: max(server) < TARGET_MB},
            ratio=False,
            note=f"{runs}{fresh}: {_runs(server, 'MB')}; {worst}RSS "
            f"{worst_server['server_before'] / MB:.0f} MB with the page loaded, "
            f"{worst_server['server_peak'] / MB:.0f} MB at the peak, "
            f"{worst_server['server_threads']} threads",
        ),
        Row(
            "14",
            "  rows in the view's DOM",
            "count",
            {"stock": None, name: max(p["rows"] for p in pages)},
            target=f"<= {MAX_ROWS:,}",
            verdict={name: all(0 <= p["rows"] <= MAX_ROWS for p in pages)},
            ratio=False,
            note=f"{max(p['elements'] for p in pages):,} elements in the page; "
            f"{pages[-1]['dropped'] or 'none dropped'}",
        ),
        Row(
            "14",
            "  page JS heap after loading (after a collection)",
            "MB",
            {"stock": None, name: max(p["heap_after"] for p in pages) / MB},
            ratio=False,
            note=f"{runs}; {mid('heap_before') / MB:.1f} MB before the view opened, "
            f"{max(p['peakHeap'] for p in pages) / MB:.1f} MB at the peak while it loaded",
        ),
        Row(
            "14",
            "  longest gap between two frames while loading",
            "ms",
            {"stock": None, name: max(gaps)},
            ratio=False,
            note=f"{runs}: {_runs(gaps, 'ms')}; {worst}{jank['frames']} frames, "
            f"{jank['longTasks']} long tasks (> 50 ms), {jank['longTotal'] / 1000:.1f} s in "
            f"all, the longest {jank['longest']:.0f} ms: {jank['longestFirstHalf']:.0f} ms in "
            f"the first half of the load, {jank['longestSecondHalf']:.0f} ms in the second",
        ),
    ]
    return out
