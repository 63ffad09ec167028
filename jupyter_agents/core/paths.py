"""Where state lives: the per-user state directory and its private layout.

Layout of ``state_dir`` (mode 0700, owned by the current user)::

    sessions.db        the SessionStore (SQLite; WAL on a local filesystem)
    tmux/              the tmux socket and config (backend ``tmux``)
    transcripts/       one directory ``<session id>/`` per session: its raw output bytes in
                       segments (see :mod:`jupyter_agents.terminal.segments`)
    conversations/     copies of agents' conversation files, one directory per session
                       (see :mod:`jupyter_agents.agents.archive`)
    notebooks/         conversations written as notebooks (``%agent conversation --notebook``;
                       see :mod:`jupyter_agents.sessions.export`)
    state.lock         serialises spawns against reconcile (see reconcile.py)

On a network filesystem (:data:`NETWORK_FILESYSTEMS`: NFS, SMB/CIFS...) the sockets
(``tmux/socket``, ``broker/socket``) live instead in a local private folder of their own
(:func:`socket_dir`), and the store uses a rollback journal (see store.py): SMB cannot
hold a UNIX socket, a socket on NFS reaches only processes of one host, and SQLite's WAL
needs memory shared on one host.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

from jupyter_agents.core.errors import UnsafeStateDir

STATE_DIR_ENV = "JUPYTER_AGENTS_STATE_DIR"
#: the mount table read to tell a state dir's filesystem (a test names a file of its own)
MOUNTINFO_ENV = "JUPYTER_AGENTS_MOUNTINFO"

#: filesystem types (``/proc/self/mountinfo``) that are shared over a network: sockets go
#: to a local folder, the store uses a rollback journal
NETWORK_FILESYSTEMS = frozenset(
    {
        *("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs"),
        *("fuse.glusterfs", "fuse.sshfs", "fuse.cephfs", "lustre", "gpfs", "beegfs"),
        *("fuse.juicefs", "fuse.s3fs", "fuse.gcsfuse", "fuse.goofys", "fuse.rclone"),
    }
)
#: network filesystems over object storage: no locks SQLite could use, so no store
OBJECT_STORE_FILESYSTEMS = frozenset({"fuse.s3fs", "fuse.gcsfuse", "fuse.goofys", "fuse.rclone"})


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


def filesystem_type(path: str | os.PathLike[str]) -> str | None:
    """The type of the filesystem ``path`` is on (``ext4``, ``nfs4``, ``cifs``...), from
    the mount table (``/proc/self/mountinfo``, or the file ``$JUPYTER_AGENTS_MOUNTINFO``
    names): the mount whose mount point is the longest prefix of ``path`` with its
    symlinks resolved, the last mounted of equals. None where there is no mount table
    (not Linux)."""
    table = os.environ.get(MOUNTINFO_ENV) or "/proc/self/mountinfo"
    try:
        lines = Path(table).read_text().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for line in lines:
        fields, _, after = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not after.split():
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[4])  # \040: " "
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= best[0]):
            best = (len(mount), after.split()[0])
    return None if best is None else best[1]


def on_network_filesystem(path: str | os.PathLike[str]) -> str | None:
    """The filesystem type of ``path`` if it is one of :data:`NETWORK_FILESYSTEMS`,
    else None (local, or unknown)."""
    fs = filesystem_type(path)
    return fs if fs in NETWORK_FILESYSTEMS else None


def runtime_dir(state_dir: Path) -> Path | None:
    """The local folder of ``state_dir``'s sockets when ``state_dir`` is on a network
    filesystem: ``/tmp/jupyter-agents-<uid>/run-<hash of state_dir>`` (the same for every
    process of the user whatever its environment, as tmux's ``/tmp/tmux-<uid>``), made
    here 0700 and checked as the state dir is (:func:`ensure_private_dir`: ours, no
    symlink, no parent another user could write). None on a local filesystem (the
    sockets stay in the state dir)."""
    if on_network_filesystem(state_dir) is None:
        return None
    path = runtime_path(state_dir)
    return ensure_private_dir(ensure_private_dir(path.parent) / path.name)


def runtime_path(state_dir: Path) -> Path:
    """Where :func:`runtime_dir` puts ``state_dir``'s sockets, whatever its filesystem;
    neither made nor checked here."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(f"/tmp/jupyter-agents-{uid}") / f"run-{digest}"


def socket_dir(state_dir: Path, name: str) -> Path:
    """The folder of the socket ``name`` (``tmux``, ``broker``) of ``state_dir``: on a
    local filesystem ``state_dir / name`` (the caller makes it, private); on a network
    one ``name`` in :func:`runtime_dir`, made here: a socket is never on a share that
    cannot hold it (SMB) or that other hosts see (NFS)."""
    runtime = runtime_dir(state_dir)
    return state_dir / name if runtime is None else ensure_private_dir(runtime / name)


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
