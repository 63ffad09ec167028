"""Test servers forked from one warm interpreter.

Most of the CPU a ``jupyter server`` start costs is Python importing jupyter_server,
tornado, traitlets and the extensions (about 0.6 of 0.96 CPU-s a start and stop, over
about 370 starts a suite run). A test worker instead keeps one child that imported them
once, :class:`ForkServer`, and each :class:`~jupyter_agents.pytest_plugin.ServerProcess`
is a fork of it that then runs ``jupyter_server``'s own ``main`` with the test's argv,
environment, working directory and log, as ``python -m jupyter_server`` would: the
server, its extensions and everything they do are the real ones; only the interpreter
start is shared. ``JUPYTER_AGENTS_TEST_FORK=0`` turns it off (every server a fresh
``python -m jupyter_server``). Servers with JupyterLab (``ServerProcess(lab=True)``, the
browser tests) always start fresh: forked, their Lab pages opened no terminal. One
difference stays visible: ``/proc/<pid>/environ`` of a forked server shows the fork
server's environment (the kernel keeps the one of exec time); ``os.environ`` and every
process the server starts have the test's.

The protocol, one JSON object a line: the worker writes ``{"argv", "env", "cwd",
"log"}``; the fork server answers ``{"pid"}`` (or ``{"error"}``) and later, for every
child that ended, ``{"exited", "returncode"}`` (``-N``: ended by signal N, as
:class:`subprocess.Popen` says it). When the worker closes its end, children still running
are killed and the fork server exits.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import pkgutil
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil

#: what a server start imports, imported once by the fork server: jupyter_server and its
#: services and ours (every module of the wings a server runs). A module that fails to
#: import is left to the server.
PRELOAD = (
    "jupyter_server.serverapp",
    "jupyter_server_terminals",
    "terminado",
    "argcomplete",
    "traitlets.config.argcomplete_config",
    "jinja2.ext",
    "jupyter_core.migrate",
    "tornado.platform.asyncio",
)
PRELOAD_WINGS = (
    "jupyter_agents.core",
    "jupyter_agents.terminal",
    "jupyter_agents.backends",
    "jupyter_agents.agents",
    "jupyter_agents.spend",
    "jupyter_agents.sessions",
    "jupyter_agents.sharing",
    "jupyter_agents.server",
)


def preload() -> None:
    """Import what a server start would (:data:`PRELOAD`, :data:`PRELOAD_WINGS` and
    jupyter_server's service handlers)."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    from jupyter_server.serverapp import JUPYTER_SERVICE_HANDLERS

    for modules in JUPYTER_SERVICE_HANDLERS.values():
        for name in modules or ():
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    for wing in PRELOAD_WINGS:
        package = importlib.import_module(wing)
        for info in pkgutil.walk_packages(package.__path__, wing + "."):
            if info.name.rsplit(".", 1)[-1] != "__main__":
                with contextlib.suppress(Exception):
                    importlib.import_module(info.name)


# -- the fork server (its own process) ---------------------------------------------------


def _write(message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _write({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def serve() -> dict[str, Any] | None:
    """The fork server's loop; returns in a forked child with what it is to run, and in
    the fork server itself (None) once the worker closed its end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children: set[int] = set()
    pending = b""
    while True:
        try:
            ready, _, _ = select.select([0, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            _reap(children)
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            spec = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                _write({"error": str(e)})
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                return spec  # type: ignore[no-any-return]
            children.add(pid)
            _write({"pid": pid})
        _reap(children)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return None


def become(spec: dict[str, Any]) -> int:
    """In a forked child: become ``python -m jupyter_server`` with ``spec``'s argv (after
    the ``-m jupyter_server``), environment (``PYTHONPATH`` included), working directory
    and log; its exit code (or SystemExit, as the server raises it)."""
    log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.chdir(spec["cwd"])
    before = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.clear()
    os.environ.update(spec["env"])
    after = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # sys.path as ``python -m`` in cwd with this PYTHONPATH would start it
    rest = [p for p in sys.path[1:] if p not in before]
    sys.path[:] = [os.getcwd(), *after, *rest]
    importlib.invalidate_caches()
    if "sitecustomize" not in sys.modules:  # one this PYTHONPATH brings: run it, as site does
        with contextlib.suppress(ImportError):
            importlib.import_module("sitecustomize")
    import jupyter_server
    from jupyter_server import serverapp

    sys.argv = [str(Path(jupyter_server.__file__ or "").parent / "__main__.py"), *spec["argv"]]
    serverapp.launch_new_instance()  # what jupyter_server/__main__.py runs
    return 0


# -- the worker's side -------------------------------------------------------------------


class ForkedProcess:
    """A forked server, as much of :class:`subprocess.Popen` as the tests use: ``pid``,
    ``returncode``, :meth:`poll`, :meth:`wait`, :meth:`send_signal`, :meth:`terminate`,
    :meth:`kill`."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One worker's fork server (a child process that imported :func:`preload`), started
    on first use; :meth:`spawn` forks a server from it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._exited: dict[int, int] = {}
        self._replies: list[dict[str, Any]] = []
        self._reader: threading.Thread | None = None
        self._ended = False

    @property
    def pid(self) -> int | None:
        """The fork server's pid while it runs (its children are the test servers)."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._ended = False
        self._replies.clear()  # the last one's "ended"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            cwd=Path.cwd(),
        )
        self._reader = threading.Thread(target=self._read, args=(self._proc,), daemon=True)
        self._reader.start()
        return self._proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "exited" in message:
                    self._exited[message["exited"]] = message["returncode"]
                else:
                    # a new child may have the pid of one that ended before (the kernel
                    # reuses pids, after as few as 32768 with the default pid_max): its
                    # exit code was that child's, reported before this fork
                    self._exited.pop(message.get("pid"), None)
                    self._replies.append(message)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._replies.append({"error": "the fork server ended"})
            self._changed.notify_all()

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> ForkedProcess:
        """Fork a server: ``argv`` as after ``python -m jupyter_server``. OSError if the
        fork server cannot."""
        with self._changed:
            proc = self._start()
            assert proc.stdin is not None
            spec = {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}
            try:
                proc.stdin.write((json.dumps(spec) + "\n").encode())
                proc.stdin.flush()
            except BrokenPipeError as e:
                raise OSError(errno.EPIPE, "the fork server ended") from e
            self._changed.wait_for(lambda: self._replies, timeout=60)
            reply = self._replies.pop(0) if self._replies else {"error": "no answer"}
        pid = reply.get("pid")
        if not isinstance(pid, int):
            raise OSError(errno.ECHILD, f"fork server: {reply.get('error')}")
        return ForkedProcess(self, pid, argv)

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        """Child ``pid``'s exit code once it ended (waiting up to ``timeout`` seconds,
        None: for ever), else None. A child of a fork server that itself ended cannot be
        waited for: it counts as killed once it is gone."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exited or self._ended, timeout=timeout)
            while pid not in self._exited and self._ended:
                if not psutil.pid_exists(pid):
                    self._exited[pid] = -signal.SIGKILL
                    break
                if timeout is not None:
                    break
                self._changed.wait(0.1)
            return self._exited.get(pid)

    def close(self) -> None:
        """End the fork server (it kills servers still running first)."""
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        if self._reader is not None:
            self._reader.join(5)
        self._proc = None


def _main() -> None:
    preload()
    spec = serve()
    if spec is None:
        return
    code = 1
    try:
        code = become(spec)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)


if __name__ == "__main__":
    _main()
