"""Where state lives: the per-user state directory and its private layout.

Layout of ``state_dir`` (mode 0700, owned by the current user)::

    sessions.db        the SessionStore (SQLite, WAL)
    tmux/              the tmux socket and config (backend ``tmux``)
    transcripts/       one directory ``<session id>/`` per session: its raw output bytes in
                       segments (see :mod:`jupyter_agents.segments`)
    conversations/     copies of agents' conversation files, one directory per session
                       (see :mod:`jupyter_agents.archive`)
    state.lock         serialises spawns against reconcile (see reconcile.py)
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

from .errors import UnsafeStateDir

STATE_DIR_ENV = "JUPYTER_AGENTS_STATE_DIR"


def default_state_dir() -> str:
    """``$JUPYTER_AGENTS_STATE_DIR`` if set, else ``<jupyter_data_dir>/agents``."""
    return os.environ.get(STATE_DIR_ENV) or os.path.join(jupyter_data_dir(), "agents")


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and parents) as a directory only the current user can enter.

    The directory is created with mode 0700 directly (no window in which it is wider).
    An existing directory owned by another user, or a symlink, is refused with
    :class:`UnsafeStateDir`; an existing one of ours that is group/world accessible is
    tightened to 0700.
    """
    p = Path(path).expanduser().absolute()
    p.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        p.mkdir(mode=0o700)
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeStateDir(f"{p} is not a plain directory; refusing to keep sessions there")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeStateDir(
            f"{p} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); "
            "choose another AgentsApp.state_dir"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(p, 0o700)
    return p


def create_private_file(path: Path) -> None:
    """Create ``path`` with mode 0600 if it does not exist (never widening an existing one)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.close(fd)


@contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """Hold the exclusive lock of a state dir (blocking).

    Taken around every spawn (from "process started" to "record written"), every
    reconcile and every status change that must not interleave with them, by every
    process using the state dir (servers, CLI, kernels). Released by the OS if the holder
    dies.
    """
    fd = os.open(state_dir / "state.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock on both platforms
