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


def safe_short_dir() -> str:
    """A short state dir that only the current user controls, to suggest when a path is
    too long for a socket or not safe: under ``$XDG_RUNTIME_DIR`` (a 0700 directory of
    the user's own) when there is one, else ``/tmp/jupyter-agents-<uid>`` (``/tmp`` is
    sticky: nobody can rename it away; tmux's own default is alike)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and hasattr(os, "getuid"):
        with suppress(OSError):
            st = os.stat(runtime)
            if st.st_uid == os.getuid() and not stat.S_IMODE(st.st_mode) & 0o077:
                return os.path.join(runtime, "jupyter-agents")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return f"/tmp/jupyter-agents-{uid}"


def _writable_by_others(st: os.stat_result) -> str | None:
    """Why another user could rename entries of a directory with this ``st``: it is
    world-writable, or group-writable by a group that is not the user's own private
    one, without the sticky bit; None if no one else can."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_ISVTX:
        return None  # only an entry's owner can rename it (like /tmp)
    if mode & 0o002:
        return "anyone can write to it"
    if mode & 0o020 and not _own_private_group(st.st_gid):
        return f"group {st.st_gid} can write to it"
    return None


def _own_private_group(gid: int) -> bool:
    """Whether group ``gid`` is the user's primary group with no other member listed."""
    import grp
    import pwd

    if gid != os.getgid():
        return False
    try:
        members = set(grp.getgrgid(gid).gr_mem)
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return False
    return members <= {me}


def check_parents(path: Path) -> None:
    """Refuse (:class:`UnsafeStateDir`) a directory that another user could take over
    through one of its parents, as OpenSSH's ``StrictModes`` does for ``~/.ssh``: each
    parent, symlinks resolved (``path`` itself is not followed), must belong to the
    user or root and let no one else rename its entries (world- or group-writable
    without the sticky bit). Else another user could move the state dir away while a
    server uses it and plant one of theirs, with a tmux server or broker listening on
    its socket. Not on Windows (ACLs, not modes)."""
    if not hasattr(os, "getuid"):
        return
    uid = os.getuid()
    real = Path(os.path.realpath(path.parent))
    for parent in (real, *real.parents):
        st = os.stat(parent)
        if st.st_uid not in (0, uid):
            why: str | None = f"it belongs to uid {st.st_uid}, not to you (uid {uid}) or root"
        else:
            why = _writable_by_others(st)
        if why is not None:
            raise UnsafeStateDir(
                f"refusing the state dir {path}: its parent {parent} is not safe ({why}), so "
                "another user could replace the state dir and read your sessions; choose "
                f"AgentsApp.state_dir in a folder only you control, such as {safe_short_dir()}"
            )


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and parents) as a directory only the current user can enter;
    returns it with its parents' symlinks resolved (what every later access uses).

    The directory is created with mode 0700 directly (no window in which it is wider).
    An existing directory owned by another user, or a symlink, is refused with
    :class:`UnsafeStateDir`, and so is one whose parents another user could write to
    (:func:`check_parents`); an existing one of ours that is group/world accessible is
    tightened to 0700.
    """
    p = Path(path).expanduser().absolute()
    p.parent.mkdir(parents=True, exist_ok=True)
    p = Path(os.path.realpath(p.parent)) / p.name
    check_parents(p)
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


def socket_not_ours(path: Path) -> str | None:
    """Why the unix socket at ``path`` must not be connected to: it is not a socket, or
    another user made it (whoever listens there would get what we send); None if it is
    ours or absent (then whoever starts it makes it ours)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    return None


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
