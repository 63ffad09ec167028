"""The broker's one pty-factory seam: :func:`open_pty` -> :class:`Pty`.

POSIX: ptyprocess forks the child on a new pty (new session, the pty as controlling
terminal, every other fd closed) and the broker's event loop reads the master fd.
Windows: pywinpty (ConPTY) with a reader thread.

The Windows path is type-checked only (``mypy --platform win32`` on this module, clean)
and has never run. More is missing on Windows than this seam: the broker listens on a
unix socket, which asyncio does not serve there (a named-pipe listener is not written),
and it reaps children on SIGCHLD, which Windows does not have (it would poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

#: bytes read from a pty per event-loop turn: bounds how long one busy session holds the
#: loop before the others get their turn
READ_SIZE = 64 * 1024
#: input waiting for a pty that does not read it; more is dropped
MAX_PENDING_INPUT = 1 << 20


class Pty(Protocol):
    """A process on a pseudo-terminal, driven from one asyncio event loop."""

    pid: int

    def start_reading(
        self,
        loop: asyncio.AbstractEventLoop,
        on_data: Callable[[bytes], None],
        on_eof: Callable[[], None],
    ) -> None:
        """Deliver output to ``on_data`` (in the loop) until the pty closes, then call
        ``on_eof`` once. Each call of ``on_data`` gets at most :data:`READ_SIZE` bytes."""

    def drain(self) -> bytes:
        """Whatever output is readable right now without waiting (at exit)."""

    def write(self, data: bytes) -> None:
        """Queue input; never blocks (beyond :data:`MAX_PENDING_INPUT` it is dropped)."""

    def resize(self, rows: int, cols: int) -> None: ...

    def poll(self) -> tuple[bool, int | None]:
        """(exited, exit code); a death by signal ``n`` reads as ``128 + n``. Reaps."""

    def hangup(self) -> None:
        """Close the pty (the process gets SIGHUP) and stop reading. Idempotent."""


def open_pty(argv: Sequence[str], cwd: str, env: Mapping[str, str], rows: int, cols: int) -> Pty:
    """Start ``argv`` in ``cwd`` with exactly ``env`` on a new rows x cols pty.

    Raises ``OSError`` (e.g. FileNotFoundError) if it cannot be started.
    """
    if sys.platform == "win32":
        return _WinPty(argv, cwd, env, rows, cols)
    else:  # an else, so type checkers skip it per platform
        return _PosixPty(argv, cwd, env, rows, cols)


if sys.platform == "win32":

    class _WinPty:  # Windows only, never run (module docstring)
        def __init__(
            self, argv: Sequence[str], cwd: str, env: Mapping[str, str], rows: int, cols: int
        ) -> None:
            import winpty

            self._proc = winpty.PtyProcess.spawn(
                list(argv), cwd=cwd, env=dict(env), dimensions=(rows, cols)
            )
            self.pid: int = int(self._proc.pid)
            self._closed = False

        def start_reading(
            self,
            loop: asyncio.AbstractEventLoop,
            on_data: Callable[[bytes], None],
            on_eof: Callable[[], None],
        ) -> None:
            def reader() -> None:
                while not self._closed:
                    try:
                        text = self._proc.read(READ_SIZE)
                    except EOFError:
                        break
                    if text:
                        loop.call_soon_threadsafe(on_data, str(text).encode("utf-8", "replace"))
                loop.call_soon_threadsafe(on_eof)

            threading.Thread(target=reader, name=f"pty-{self.pid}", daemon=True).start()

        def drain(self) -> bytes:
            return b""  # the reader thread delivers everything

        def write(self, data: bytes) -> None:
            if not self._closed:
                self._proc.write(data.decode("utf-8", "replace"))

        def resize(self, rows: int, cols: int) -> None:
            if not self._closed:
                self._proc.setwinsize(rows, cols)

        def poll(self) -> tuple[bool, int | None]:
            if self._proc.isalive():
                return (False, None)
            status = self._proc.exitstatus
            return (True, None if status is None else int(status))

        def hangup(self) -> None:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(OSError, EOFError):
                    self._proc.terminate(force=True)

else:
    #: the signals a session's program starts with at their default, whatever the
    #: broker inherited or set: Python ignores SIGPIPE and SIGXFSZ (``yes | head`` must
    #: end), and a server started in the background (``nohup jupyter lab &``) ignores
    #: SIGHUP, SIGINT and SIGQUIT; a shell cannot undo an ignored signal (Ctrl-\ would
    #: not end a command). tmux gives its panes the same defaults.
    DEFAULT_SIGNALS = (
        "SIGHUP", "SIGINT", "SIGQUIT", "SIGPIPE", "SIGXFSZ", "SIGTERM", "SIGALRM",
        "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGWINCH",
    )  # fmt: skip

    def _default_signals() -> None:
        """In the child: every signal of :data:`DEFAULT_SIGNALS` at its default, none
        blocked."""
        for name in DEFAULT_SIGNALS:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())

    class _PosixPty:
        def __init__(
            self, argv: Sequence[str], cwd: str, env: Mapping[str, str], rows: int, cols: int
        ) -> None:
            import ptyprocess

            self._proc = ptyprocess.PtyProcess.spawn(
                list(argv),
                cwd=cwd,
                env=dict(env),
                dimensions=(rows, cols),
                preexec_fn=_default_signals,
            )
            self.pid: int = self._proc.pid
            self._fd: int = self._proc.fd
            os.set_blocking(self._fd, False)
            self._loop: asyncio.AbstractEventLoop | None = None
            self._pending = bytearray()
            self._closed = False
            self._exit: tuple[bool, int | None] = (False, None)

        def start_reading(
            self,
            loop: asyncio.AbstractEventLoop,
            on_data: Callable[[bytes], None],
            on_eof: Callable[[], None],
        ) -> None:
            self._loop = loop

            def readable() -> None:
                try:
                    data = os.read(self._fd, READ_SIZE)
                except BlockingIOError:
                    return
                except OSError:  # EIO: every slave fd is closed
                    data = b""
                if data:
                    on_data(data)
                else:
                    loop.remove_reader(self._fd)
                    on_eof()

            loop.add_reader(self._fd, readable)

        def drain(self) -> bytes:
            chunks = []
            while not self._closed:
                try:
                    data = os.read(self._fd, READ_SIZE)
                except OSError:
                    break
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks)

        def write(self, data: bytes) -> None:
            if self._closed or self._loop is None:
                return
            if len(self._pending) + len(data) > MAX_PENDING_INPUT:
                return
            was_idle = not self._pending
            self._pending += data
            if was_idle:
                self._flush()

        def _flush(self) -> None:
            assert self._loop is not None
            try:
                sent = os.write(self._fd, self._pending) if not self._closed else len(self._pending)
            except BlockingIOError:
                sent = 0
            except OSError:
                sent = len(self._pending)  # the pty is gone: input goes nowhere
            del self._pending[:sent]
            if self._pending:
                self._loop.add_writer(self._fd, self._flush)
            else:
                self._loop.remove_writer(self._fd)

        def resize(self, rows: int, cols: int) -> None:
            if not self._closed:
                with contextlib.suppress(OSError):
                    self._proc.setwinsize(rows, cols)

        def poll(self) -> tuple[bool, int | None]:
            if self._exit[0]:
                return self._exit
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self._exit = (True, None)
                return self._exit
            if pid == 0:
                return self._exit
            if os.WIFSIGNALED(status):
                self._exit = (True, 128 + os.WTERMSIG(status))
            else:
                self._exit = (True, os.waitstatus_to_exitcode(status))
            self._proc.terminated = True
            return self._exit

        def hangup(self) -> None:
            if self._closed:
                return
            self._closed = True
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
                self._loop.remove_writer(self._fd)
            self._pending.clear()
            # we reap the child ourselves (poll); ptyprocess must not wait or signal it later
            self._proc.closed = True
            with contextlib.suppress(OSError):
                self._proc.fileobj.close()
            if not self._exit[0]:
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, signal.SIGHUP)
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGCONT)
