from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.pytest_plugin import FORK_SERVER

pytest_plugins = ["jupyter_agents.pytest_plugin", "pytest_jupyter.jupyter_server"]

# Shells started without a shell_command (the CLI's, kernels') are $SHELL, as a login
# shell when not started from a terminal (config.default_shell): here always sh, whoever
# runs the suite. A login bash sources the machine's ~/.bashrc, whose `pyenv rehash`
# waits on a lock that a shell the tests kill mid-rehash leaves behind, so every later
# login bash of the machine shows nothing for up to a minute (and a run started from a
# bash, $SHELL=/bin/bash, failed that way). tests/test_cli_attach.py drops $SHELL on
# purpose, with a HOME of its own, to test the fallback to the login shell.
os.environ["SHELL"] = "/bin/sh"

# A run started in the background of a script (`pytest &`, nohup, CI) ignores SIGINT,
# and so does every process it starts: JupyterHub stops a single-user server or a
# service with SIGINT and waits 10 s before its SIGTERM, so each hub test's stop took
# 30 s there and 0.3 s from a terminal. Every process the tests start gets SIGINT's
# default, as from a terminal (a handler, unlike SIG_IGN, is not inherited).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

FAKE_AGENT = Path(__file__).parent / "fakes" / "fake_agent.py"


@pytest.fixture
def jp_server_config(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """pytest-jupyter's in-process server with our extension on a private state dir
    (the tmux server on it is killed afterwards)."""
    # imported here: at module level it would precede the plugin's assertion rewriting
    from jupyter_agents.pytest_plugin import TEST_SHELL, kill_backends

    yield {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_agents": True},
            "terminado_settings": {"shell_command": TEST_SHELL},
        },
        "AgentsApp": {"state_dir": str(tmp_path / "st")},
    }
    kill_backends(tmp_path / "st")


@dataclasses.dataclass
class FakeAgents:
    """Fake ``claude`` and ``codex`` on PATH, with a private HOME and a record of runs."""

    bin: Path
    home: Path
    log: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment for a server whose sessions should find the fakes."""
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(self.home),
            "FAKE_AGENT_LOG": str(self.log),
        }

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every run's record (see fake_agent.py), oldest first."""
        if not self.log.exists():
            return []
        found = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in found if event is None or r["event"] == event]


@pytest.fixture
def fake_agents(tmp_path: Path) -> FakeAgents:
    fakes = FakeAgents(tmp_path / "bin", tmp_path / "home", tmp_path / "agents.jsonl")
    fakes.bin.mkdir()
    fakes.home.mkdir()
    for name in ("claude", "codex"):
        script = fakes.bin / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_AGENT}" {name} "$@"\n')
        script.chmod(0o755)
    return fakes


PRODUCER = Path(__file__).parent / "fakes" / "producer.py"


def producer_config(workdir: Path, count: int, interval: float) -> None:
    """Configure the kind ``producer`` (tests/fakes/producer.py) for servers in ``workdir``
    (their JUPYTER_CONFIG_DIR is ``workdir/config``)."""
    config = workdir / "config"
    config.mkdir(exist_ok=True)
    command = [sys.executable, str(PRODUCER), str(count), str(interval)]
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"AgentsApp": {"agents": {"producer": {"command": command}}}})
    )


def produced_lines(transcript: bytes) -> list[int]:
    """The numbers of the producer's complete lines in a transcript, in order."""
    import re

    return [int(m) for m in re.findall(rb"line-(\d{5})-x{38}\r\n", transcript)]


#: the browser modules of the second browser group: test_ui_terminal.py (about 200 s of a
#: 510 s browser run) and the short ones that make the two groups even
BROWSER_TERMINAL = frozenset(
    {
        "test_ui_terminal",
        "test_ui_osc52",
        "test_ui_notebook",
        "test_ui_watch",
        "test_ui_sharing",
        "test_ui_worktrees",
    }
)


def xdist_group(item: pytest.Item) -> str | None:
    """Which tests ``pytest -n N`` (``--dist=loadgroup``) keeps on one worker, in order:

    - ``hub``: the hub tests share system users (``ja-alice``, ``ja-bob``) and reset
      them, so they run one at a time;
    - ``heavy``: the ``slow`` tests flood the machine (the 200 MB flood) or run a CLI on
      a fast clock, so no two of them run at once;
    - ``browser`` and ``browser-terminal``: the ``test_ui*`` modules, in two groups of
      about equal time (:data:`BROWSER_TERMINAL`), so at most two Chromiums run at once
      (four kept two cores saturated, and a restored tab's screen came late); each
      module's set-up is made once and its tests run in file order, building on each
      other's state;
    - ``test_docs``: its tests share one docs build.

    Every other test goes wherever a worker is free: each has its own ports, state dir,
    tmux socket, HOME where it needs one and browser profile.
    """
    if item.get_closest_marker("hub") is not None:
        return "hub"
    if item.get_closest_marker("slow") is not None:
        return "heavy"
    module = item.path.stem
    if module.startswith("test_ui"):
        return "browser-terminal" if module in BROWSER_TERMINAL else "browser"
    return module if module == "test_docs" else None


#: the modules whose tests build on each other's state (one server, page or hub for the
#: module, each test going on from where the one before left it): they run in file
#: order also when the hunt shuffles the suite (``.ci/hunt``, pytest-random-order)
IN_ORDER = frozenset(
    {
        "test_hub_sharing",
        "test_real_turns",
        "test_real_claude_acp",
        "test_real_codex_acp",
        "test_real_codex_turns",
        "test_real_copilot_turns",
        "test_real_gemini_turns",
        "test_real_opencode_turns",
        "test_real_qwen_turns",
    }
)


def in_order(item: pytest.Item) -> bool:
    """Whether ``item``'s module runs in file order (:data:`IN_ORDER`, and every browser
    module: each shares one server and one page among its tests)."""
    module = item.path.stem
    return module in IN_ORDER or module.startswith("test_ui")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups, and the shuffle
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if in_order(item):
            item.add_marker(pytest.mark.random_order(disabled=True))


#: where ``.ci/hunt`` has each failure written, one JSON line each (unset: nowhere)
HUNT_REPORT = os.environ.get("JUPYTER_AGENTS_HUNT_REPORT")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """For the hunt (:data:`HUNT_REPORT`): every failed phase of a test, in the process
    that reports the run (the xdist controller), with the worker that ran it, when it
    ran (the hunt keeps the server logs written meanwhile) and why it failed."""
    if HUNT_REPORT is None or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
    crash = getattr(report.longrepr, "reprcrash", None)
    record = {
        "test": report.nodeid,
        "when": report.when,
        "worker": worker,
        "start": report.start,
        "stop": report.stop,
        "cause": crash.message if crash is not None else str(report.longrepr)[-500:],
        "where": f"{crash.path}:{crash.lineno}" if crash is not None else None,
        "report": str(report.longrepr)[-8000:],
    }
    with open(HUNT_REPORT, "a") as f:
        f.write(json.dumps(record) + "\n")


#: what a leftover's command line names (a server forked by the worker's fork server
#: names that, the fork server itself ends after this check)
_LEFTOVER = (
    "tmux",
    "jupyter_agents.backends.broker",
    "jupyter_server",
    "jupyter_agents.pytest_forkserver",
    "chromium",
)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No backend, server, shell of ours or browser may outlive the suite: any process of
    this run (a descendant of this pytest, or one naming this run's temp dir, like a tmux
    server or broker that detached) that still runs is reported, ended, and fails it.
    Processes of another pytest run or a benchmark on the same machine are not ours."""
    import psutil

    me = psutil.Process()
    started = me.create_time()
    ours = {me.pid, *(p.pid for p in me.parents()), FORK_SERVER.pid}
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = str(factory.getbasetemp()) if factory is not None else None
    children = {p.pid for p in me.children(recursive=True)}
    left = []
    for proc in psutil.process_iter(["pid", "uids", "create_time", "cmdline", "status"]):
        info = proc.info
        if (
            info["pid"] in ours
            or info["status"] == psutil.STATUS_ZOMBIE
            or info["create_time"] < started
            or info["uids"] is None
            or info["uids"].real != os.getuid()
        ):
            continue
        cmdline = " ".join(info["cmdline"] or [])
        of_this_run = info["pid"] in children or (basetemp is not None and basetemp in cmdline)
        if of_this_run and any(word in cmdline for word in _LEFTOVER):
            left.append(proc)
    if left:
        print("\nprocesses left behind by the tests:", file=sys.stderr)
        for proc in left:
            print(f"  {proc.pid} {' '.join(proc.info['cmdline'])[:160]}", file=sys.stderr)
            proc.kill()
        session.exitstatus = 1


#: the most of a server's log a failed test's report quotes (its end)
SERVER_LOG_QUOTED = 12000
#: where the module server's log stood as a test's call began
_LOG_START = pytest.StashKey[tuple[Path, int]]()


def _module_server_log(item: pytest.Item) -> Path | None:
    """The log of the module's shared server a browser test uses (``lab``), if any."""
    lab = getattr(item, "funcargs", {}).get("lab")
    server = getattr(lab, "server", None)
    path = getattr(server, "log_path", None)
    return path if isinstance(path, Path) else None


#: how much of the end of each running session's transcript a failed report quotes
TRANSCRIPT_QUOTED = 400


def _sessions_now(server: Any) -> str:
    """What the module's server lists, and the end of each running session's transcript:
    whether a program printed what a tab did not show (the tab's stream lost it) or
    never printed it (the program did not get that far)."""
    try:
        status, sessions = server.request("GET", "/api/agents/sessions")
        if status != 200:
            return f"GET /api/agents/sessions: {status} {sessions!r:.300}"
        lines = []
        for s in sessions:
            line = f"{s.get('name')!r} {s.get('id')} {s.get('kind')} {s.get('status')}"
            line += f" attention={s.get('attention')}"
            if s.get("status") == "running":
                got, data = server.request("GET", f"/api/agents/sessions/{s.get('id')}/log")
                if isinstance(data, bytes):
                    line += f"; transcript ends {data[-TRANSCRIPT_QUOTED:]!r}"
                else:
                    line += f"; transcript: {got} {data!r:.200}"
            lines.append(line)
        return "\n".join(lines) or "(none)"
    except Exception as error:  # the server may be down: say so, lose nothing
        return f"not readable: {error!r}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Note where the module server's log was when the test began: a failure quotes
    what the server wrote while the test ran, not the module's earlier tests."""
    path = _module_server_log(item)
    if path is not None:
        with contextlib.suppress(OSError):
            item.stash[_LOG_START] = (path, path.stat().st_size)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A browser test that fails reports what the page had: its address, the element
    with the keyboard focus, the widget JupyterLab shows, the console's last lines
    and every main-area tab (CI keeps only the printed report, not the screenshots);
    what the module's server logged while it ran (its last
    :data:`SERVER_LOG_QUOTED` characters); and its sessions, each running one with the
    end of its transcript (:func:`_sessions_now`)."""
    report = yield
    if report.when == "call" and report.failed and _LOG_START in item.stash:
        path, start = item.stash[_LOG_START]
        try:
            with path.open("rb") as log:
                log.seek(start)
                written = log.read().decode(errors="replace")
        except OSError as error:
            written = f"not readable: {error}"
        if len(written) > SERVER_LOG_QUOTED:
            written = "[...]\n" + written[-SERVER_LOG_QUOTED:]
        report.sections.append(("server log", written or "(nothing written)"))
    lab = getattr(item, "funcargs", {}).get("lab")
    if report.when == "call" and report.failed and getattr(lab, "server", None) is not None:
        report.sections.append(("sessions", _sessions_now(lab.server)))
    page = getattr(item, "funcargs", {}).get("page")
    if report.when == "call" and report.failed and page is not None:
        lines = [f"url: {page.url}"]
        try:
            lines.append(
                "page: "
                + str(
                    page.evaluate(
                        "() => { const a = document.activeElement;"
                        " const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                        " return {focus: a ? a.outerHTML.slice(0, 300) : null,"
                        " current: w ? w.id + ' ' + w.title.label : null,"
                        " hasFocus: document.hasFocus(),"
                        " main: w ? Array.from(window.jupyterapp.shell.widgets('main'))"
                        ".map(m => m.id + ' ' + m.title.label) : null}; }"
                    )
                )
            )
        except Exception as error:  # the page may be gone or hung: say so, lose nothing
            lines.append(f"page not readable: {error}")
        lines += getattr(page, "_agents_console", [])[-40:]
        report.sections.append(("browser", "\n".join(lines)))
    return report
