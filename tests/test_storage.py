"""A state dir on a network filesystem: sockets on a local private folder, the store in
a rollback journal, and a server that works.

The filesystem is what the mount table says; the tests give a mount table of their own
(``$JUPYTER_AGENTS_MOUNTINFO``) in which the state dir's parent is an NFS mount. What is
checked is what the code did: which socket file exists and answers, the journal mode
SQLite reports on a fresh connection, the start-up log, and a terminal that echoes.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_agents.core.errors import StoreError, UnsafeStateDir
from jupyter_agents.core.paths import (
    MOUNTINFO_ENV,
    filesystem_type,
    runtime_dir,
    runtime_path,
    socket_dir,
)
from jupyter_agents.core.store import SessionStore, journal_mode
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends

ROOT = Path(__file__).resolve().parent.parent


def mount_table(path: Path, mounts: dict[Path, str]) -> Path:
    """A mountinfo file at ``path``: ``/`` on ext4, then each of ``mounts`` (folder:
    filesystem type), as the kernel writes them (a space as ``\\040``)."""
    lines = ["22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"]
    for i, (mount, fs) in enumerate(mounts.items()):
        escaped = str(mount).replace(" ", "\\040")
        lines.append(f"{30 + i} 22 0:{50 + i} / {escaped} rw,relatime - {fs} srv:/export rw")
    path.write_text("\n".join(lines) + "\n")
    return path


#: the state dirs this module's tests put on a (pretended) network filesystem, under
#: their ``tmp_path``
NETWORK_STATES = ("state", "other", "third", "home/state")


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Path]:
    """``/tmp/jupyter-agents-<uid>``, where sockets of a state dir on a network
    filesystem go; the folders of this test's state dirs are removed after it, and
    only those: another worker's test may be using its own there at the same time."""
    root = Path(f"/tmp/jupyter-agents-{os.getuid()}")
    yield root
    for state in NETWORK_STATES:
        folder = runtime_path(tmp_path / state)
        if folder.is_symlink():
            folder.unlink()
        else:
            shutil.rmtree(folder, ignore_errors=True)


def test_filesystem_of_a_path_is_its_longest_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = tmp_path / "home dir"
    table = mount_table(tmp_path / "mountinfo", {tmp_path: "ext4", share: "nfs4"})
    monkeypatch.setenv(MOUNTINFO_ENV, str(table))
    assert filesystem_type(share / "a" / "b") == "nfs4"
    assert filesystem_type(tmp_path / "home") == "ext4"  # a prefix of the name, not a parent
    assert filesystem_type("/") == "ext4"
    monkeypatch.setenv(MOUNTINFO_ENV, str(tmp_path / "absent"))
    assert filesystem_type(share) is None


def test_journal_mode_follows_the_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, nfs, smb, gcs = (tmp_path / n for n in ("local", "nfs", "smb", "gcs"))
    for folder in (local, nfs, smb, gcs):
        folder.mkdir()
    mounts = {nfs: "nfs4", smb: "cifs", gcs: "fuse.gcsfuse"}
    monkeypatch.setenv(MOUNTINFO_ENV, str(mount_table(tmp_path / "mountinfo", mounts)))
    assert journal_mode(local / "s.db") == "wal"
    assert journal_mode(nfs / "s.db") == journal_mode(smb / "s.db") == "delete"
    assert journal_mode(nfs / "s.db", "wal") == "wal"  # the override
    with pytest.raises(StoreError, match=r"gcs is on fuse\.gcsfuse \(object storage\)"):
        SessionStore(gcs / "s.db")
    store = SessionStore(nfs / "s.db")
    store.close()
    assert store.journal == "delete" and not (nfs / "s.db-wal").exists()
    with sqlite3.connect(nfs / "s.db") as db:  # the mode the file itself keeps
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    store = SessionStore(local / "s.db")
    store.close()
    assert store.journal == "wal"


def test_runtime_dir_is_checked_as_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: Path
) -> None:
    state = tmp_path / "state"
    table = mount_table(tmp_path / "mountinfo", {tmp_path: "nfs"})
    monkeypatch.setenv(MOUNTINFO_ENV, str(table))
    tmux = socket_dir(state, "tmux")
    assert tmux.parent.parent == runtime and tmux.name == "tmux"
    for folder in (tmux, tmux.parent, tmux.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert runtime_dir(tmp_path / "other") != tmux.parent  # one folder per state dir
    victim = runtime_dir(tmp_path / "third")
    assert victim is not None
    victim.rmdir()
    victim.symlink_to(tmp_path)  # planted: refused, never followed
    with pytest.raises(UnsafeStateDir, match="not a plain directory"):
        runtime_dir(tmp_path / "third")
    victim.unlink()


@pytest.mark.parametrize("backend", ["tmux", "broker"])
def test_a_server_on_a_network_state_dir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runtime: Path,
    backend: str,
    path_without_tmux: str,
) -> None:
    home = tmp_path / "home"
    state = home / "state"
    table = mount_table(tmp_path / "mountinfo", {home: "nfs4"})
    monkeypatch.setenv(MOUNTINFO_ENV, str(table))
    env = {MOUNTINFO_ENV: str(table), "PYTHONPATH": str(ROOT)}
    args = []
    if backend == "broker":
        env["PATH"] = path_without_tmux
        args = ["--AgentsApp.backend=broker"]
    server = ServerProcess(state, tmp_path, env=env, args=args)
    try:
        server.start()
        status, model = server.request("POST", "/api/terminals", {})
        assert status == 200, model
        client = server.ws(model["name"])
        client.wait_for(lambda c: len(c.messages) >= 1)
        client.stdin("echo NET-$((6*7))\r")
        client.wait_for(lambda c: "NET-42" in c.text)
        client.close()
        sockets = runtime_dir(state)
        assert sockets is not None and sockets.parent == runtime
        assert stat.S_ISSOCK(os.stat(sockets / backend / "socket").st_mode)
    finally:
        server.stop()
        kill_backends(state)
    # the socket was made (and used) locally, never in the state dir on the share
    assert not (state / backend / "socket").exists()
    log = server.log_path.read_text()
    assert (
        f"jupyter_agents: state dir {state} on nfs4: store journal delete, "
        f"sockets in {sockets} (a network filesystem)"
    ) in log, log[-3000:]
    assert f"jupyter_agents: backend {backend}" in log
    with sqlite3.connect(state / "sessions.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    assert not (state / "sessions.db-wal").exists()
