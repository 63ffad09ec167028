"""Wake-ups when a transcript grows: the tmux data path reads output from the transcript
that ``pipe-pane`` writes, the moment it is written.

On Linux one inotify descriptor per IO loop serves every subscribed path (a transcript
file, or the directory of its segments); the loop wakes within microseconds of the
write, with no timer. Elsewhere (macOS) a subscription falls back to checking every
:data:`FALLBACK_INTERVAL` seconds.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

#: how often a watch checks for growth where inotify is missing
FALLBACK_INTERVAL = 0.01

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc if hasattr(libc, "inotify_init1") else None


class _Inotify:
    """One inotify descriptor on one loop; callbacks by watched path."""

    def __init__(self, libc: ctypes.CDLL, loop: asyncio.AbstractEventLoop) -> None:
        self._libc = libc
        self._loop = loop
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        #: watch descriptor -> the callbacks of everyone watching that path
        self._callbacks: dict[int, list[Callable[[set[str]], None]]] = {}
        loop.add_reader(self.fd, self._read)

    def add(self, path: Path, callback: Callable[[set[str]], None]) -> Callable[[], None]:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"cannot watch {path}")
        self._callbacks.setdefault(wd, []).append(callback)

        def cancel() -> None:
            callbacks = self._callbacks.get(wd, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks and self._callbacks.pop(wd, None) is not None:
                self._libc.inotify_rm_watch(self.fd, wd)

        return cancel

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        woken: dict[int, set[str]] = {}
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            created = woken.setdefault(wd, set())
            if mask & (_IN_CREATE | _IN_MOVED_TO) and length:
                name = data[pos + _EVENT.size : pos + _EVENT.size + length].rstrip(b"\0")
                created.add(os.fsdecode(name))
            pos += _EVENT.size + length
        for wd, created in woken.items():
            for callback in list(self._callbacks.get(wd, ())):
                callback(created)


_INSTANCES: dict[asyncio.AbstractEventLoop, _Inotify] = {}


def subscribe(path: Path, callback: Callable[[set[str]], None]) -> Callable[[], None]:
    """Call ``callback`` (on the running loop) whenever ``path`` (a file, or files in a
    directory) may have been written, with the names of files created in the directory
    since the last call (when known; the fallback cannot tell and says ``{"*"}``);
    returns the function that stops watching.

    Wake-ups are hints, coalesced and possibly spurious: the callback reads what is new.
    """
    loop = asyncio.get_running_loop()
    inotify = _INSTANCES.get(loop)
    if inotify is None:
        libc = _libc()
        if libc is not None:
            # (a copy: kernels' readers of turns subscribe from threads of their own)
            for stale in [other for other in list(_INSTANCES) if other.is_closed()]:
                if (gone := _INSTANCES.pop(stale, None)) is not None:
                    os.close(gone.fd)
            inotify = _INSTANCES[loop] = _Inotify(libc, loop)
    if inotify is not None:
        return inotify.add(path, callback)

    handle: asyncio.TimerHandle | None = None

    def tick() -> None:
        nonlocal handle
        callback({"*"})
        handle = loop.call_later(FALLBACK_INTERVAL, tick)

    handle = loop.call_later(FALLBACK_INTERVAL, tick)
    return lambda: handle.cancel() if handle is not None else None


def release(loop: asyncio.AbstractEventLoop) -> None:
    """Close the inotify descriptor of ``loop``, before closing a loop of one's own that
    subscribed (a server's loop keeps its descriptor for its life)."""
    inotify = _INSTANCES.pop(loop, None)
    if inotify is not None:
        loop.remove_reader(inotify.fd)
        os.close(inotify.fd)
