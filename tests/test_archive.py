"""The conversation archive (jupyter_agents/archive.py) on real files: incremental copies
(each byte read once), sources rewritten, truncated, replaced or deleted, the caps, a full
disk (a real, small tmpfs), permissions, and putting a copy back where the CLI reads it."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_agents.agents.archive import HASH_SPAN, ConversationArchive
from jupyter_agents.agents.claude import ClaudeKind, project_slug
from jupyter_agents.core.records import Session

KINDS = {"claude": ClaudeKind(["claude"])}
MB = 1 << 20


class Agent:
    """A claude session record and the file its CLI would write (under a private
    ``$CLAUDE_CONFIG_DIR``)."""

    def __init__(self, tmp: Path, sid: str, status: str = "running") -> None:
        self.cwd = tmp / f"cwd-{sid}"
        self.cwd.mkdir(parents=True, exist_ok=True)
        config = tmp / "claude-config"
        cid = f"00000000-0000-4000-8000-{int(hashlib.sha1(sid.encode()).hexdigest()[:12], 16):012x}"
        self.session = Session(
            sid,
            sid,
            status,  # type: ignore[arg-type]
            "tmux",
            kind="claude",
            cwd=str(self.cwd),
            conversation_id=cid,
            env={"CLAUDE_CONFIG_DIR": str(config)},
        )
        self.path = config / "projects" / project_slug(str(self.cwd.resolve())) / f"{cid}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, data: bytes) -> None:
        with self.path.open("ab") as f:
            f.write(data)


def line(n: int, size: int) -> bytes:
    body = f'{{"type": "assistant", "n": {n}, "text": "'.encode()
    return body + b"x" * max(0, size - len(body) - 3) + b'"}\n'


def copy_of(archive: ConversationArchive, agent: Agent) -> Path:
    index = archive.index(agent.session.id)
    (copy,) = index.kept()
    return archive.folder(agent.session.id) / copy.name


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(MB):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


def test_a_growing_conversation_is_copied_once_byte_for_byte(state, tmp_path):
    archive = ConversationArchive(state, max_bytes=512 * MB, session_max_bytes=256 * MB)
    agent = Agent(tmp_path, "grow")
    rng = random.Random(7)
    total, syncs, n = 100 * MB, 0, 0
    written = 0
    while written < total:
        for _ in range(rng.randint(20, 120)):  # small appends, many per sync
            size = min(rng.randint(200, 4000), total - written)
            agent.append(line(n, size) if size > 60 else b"y" * size)
            written += size
            n += 1
            if written >= total:
                break
        copied = archive.sync([agent.session], KINDS)
        syncs += 1
        assert archive.stats.copied == written  # everything so far, nothing twice
        assert copied >= 0
    assert syncs > 300
    assert archive.sync([agent.session], KINDS) == 0  # unchanged source: nothing read
    assert archive.stats.copied == total
    # reading again is bounded: the first and the last copied bytes, once per sync
    assert archive.stats.checked <= syncs * 2 * HASH_SPAN
    assert digest(copy_of(archive, agent)) == digest(agent.path)


def test_rewritten_truncated_replaced_and_deleted_sources(state, tmp_path):
    archive = ConversationArchive(state)
    agent = Agent(tmp_path, "change")
    agent.append(b"".join(line(i, 500) for i in range(40)))
    archive.sync([agent.session], KINDS)
    copy = copy_of(archive, agent)
    assert copy.read_bytes() == agent.path.read_bytes()

    # rewritten in place (same inode), then grown: the old head no longer matches
    data = bytearray(agent.path.read_bytes())
    data[10:20] = b"REWRITTEN!"
    with agent.path.open("r+b") as f:
        f.write(data)
        f.write(line(99, 300))
    archive.sync([agent.session], KINDS)
    assert copy.read_bytes() == agent.path.read_bytes()
    assert b"REWRITTEN!" in copy.read_bytes()

    # rewritten near the end: the last copied bytes changed
    data = bytearray(agent.path.read_bytes())
    data[-100:-90] = b"NEAR-END!!"
    agent.path.write_bytes(bytes(data) + line(100, 300))
    archive.sync([agent.session], KINDS)
    assert copy.read_bytes() == agent.path.read_bytes()

    # truncated: the copy follows
    with agent.path.open("r+b") as f:
        f.truncate(1000)
    archive.sync([agent.session], KINDS)
    assert copy.read_bytes() == agent.path.read_bytes()
    assert copy.stat().st_size == 1000

    # replaced by another file (another inode), even a longer one starting alike
    other = agent.path.with_suffix(".new")
    other.write_bytes(agent.path.read_bytes()[:1000] + b"another file\n" * 50)
    os.replace(other, agent.path)
    archive.sync([agent.session], KINDS)
    assert copy.read_bytes() == agent.path.read_bytes()

    # deleted: the copy stays
    kept = agent.path.read_bytes()
    agent.path.unlink()
    archive.sync([agent.session], KINDS)
    assert copy.read_bytes() == kept


def test_a_copy_half_written_before_a_crash_is_cut_back(state, tmp_path):
    archive = ConversationArchive(state)
    agent = Agent(tmp_path, "crash")
    agent.append(line(0, 2000))
    archive.sync([agent.session], KINDS)
    copy = copy_of(archive, agent)
    with copy.open("ab") as f:  # bytes the index never recorded
        f.write(b"garbage after a crash")
    agent.append(line(1, 2000))
    archive.sync([agent.session], KINDS)
    assert copy.read_bytes() == agent.path.read_bytes()


def test_caps_drop_ended_sessions_oldest_first_never_a_running_one(state, tmp_path, caplog):
    caplog.set_level(logging.INFO, "jupyter_agents")
    archive = ConversationArchive(state, max_bytes=300_000, session_max_bytes=200_000)
    old, newer, running = (Agent(tmp_path, n) for n in ("old", "newer", "running"))
    old.append(line(0, 100_000))
    archive.sync([old.session], KINDS)
    newer.append(line(0, 100_000))
    archive.sync([old.session, newer.session], KINDS)
    old.session.status = newer.session.status = "exited"
    archive.sync([old.session, newer.session], KINDS)  # their last sync: final now

    everyone = [old.session, newer.session, running.session]
    running.append(line(0, 90_000))
    archive.sync(everyone, KINDS)  # 290 KB: fits
    assert [archive.size(s.id) for s in everyone] == [100_000, 100_000, 90_000]

    running.append(line(1, 60_000))  # 350 KB: the oldest ended session's copy goes
    archive.sync(everyone, KINDS)
    assert archive.size("old") == 0 and archive.index("old").copies[0].dropped
    assert archive.knows("old", old.session.conversation_id or "")
    assert archive.size("newer") == 100_000
    assert archive.size("running") == 150_000
    assert "dropped conversation" in caplog.text

    # the session's own cap: its newest bytes wait, logged once
    running.append(line(2, 80_000))
    archive.sync(everyone, KINDS)
    running.append(line(3, 1_000))
    archive.sync(everyone, KINDS)
    assert archive.size("running") == 200_000
    assert archive.index("running").copies[0].capped
    assert caplog.text.count("conversation_archive_session_max_bytes") == 1
    assert archive.size("newer") == 100_000  # 300 KB in all: nothing more had to go

    # when running sessions alone fill the archive, nothing of theirs is dropped
    second = Agent(tmp_path, "second")
    second.append(line(0, 150_000))
    archive.sync([*everyone, second.session], KINDS)
    assert archive.size("newer") == 0  # the last ended one went
    assert archive.size("running") == 200_000
    assert archive.size("second") == 100_000  # what fits; the rest waits
    assert "belongs to running sessions" in caplog.text
    assert copy_of(archive, running).read_bytes() == running.path.read_bytes()[:200_000]


def test_private_modes(state, tmp_path):
    archive = ConversationArchive(state)
    agent = Agent(tmp_path, "private")
    agent.append(line(0, 1000))
    os.chmod(agent.path, 0o644)  # whatever the source's mode
    archive.sync([agent.session], KINDS)
    folder = archive.folder("private")
    for path in (archive.root, folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((archive.root / ".lock").stat().st_mode) == 0o600


def test_put_back_where_the_cli_reads_it(state, tmp_path, caplog):
    caplog.set_level(logging.INFO, "jupyter_agents")
    archive = ConversationArchive(state)
    agent = Agent(tmp_path, "back")
    agent.append(b"".join(line(i, 700) for i in range(20)))
    archive.sync([agent.session], KINDS)
    original = agent.path.read_bytes()
    agent.session.status = "interrupted"

    # present and whole: untouched
    before = agent.path.stat()
    assert archive.put_back(agent.session)
    assert agent.path.stat().st_ino == before.st_ino

    # gone, and its folder too (e.g. ~/.claude/projects deleted): back, private
    agent.path.unlink()
    agent.path.parent.rmdir()
    assert archive.put_back(agent.session)
    assert agent.path.read_bytes() == original
    assert stat.S_IMODE(agent.path.stat().st_mode) == 0o600
    assert f"put conversation {agent.session.conversation_id} back" in caplog.text

    # shorter than the copy: replaced by it
    with agent.path.open("r+b") as f:
        f.truncate(100)
    assert archive.put_back(agent.session)
    assert agent.path.read_bytes() == original

    # what was put back is not taken for a replaced file: nothing copied again
    copied = archive.stats.copied
    archive.sync([agent.session], KINDS)
    assert archive.stats.copied == copied

    # a conversation the archive never saw: nothing known, nothing written
    stranger = Agent(tmp_path, "stranger")
    assert not archive.put_back(stranger.session)
    assert not stranger.path.exists()


def test_ids_a_session_had_before_are_archived_too(state, tmp_path):
    archive = ConversationArchive(state)
    agent = Agent(tmp_path, "clear")
    first = agent.session.conversation_id or ""
    agent.append(line(0, 500))
    # /clear before any sync saw the first file: the new id is current, the old one noted
    second = "11111111-1111-4111-8111-111111111111"
    agent.session.conversation_id = second
    new_path = agent.path.with_name(f"{second}.jsonl")
    new_path.write_bytes(line(1, 500))
    archive.note("clear", first)
    archive.sync([agent.session], KINDS)
    index = archive.index("clear")
    assert [c.conversation for c in index.kept()] == [first, second]
    assert index.conversations == [first, second]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (tmpfs) mounted on ``state/conversations``."""
    state = tmp_path / "state"
    mount = state / "conversations"
    mount.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_pauses_the_archive_and_it_resumes(small_disk, tmp_path, caplog):
    caplog.set_level(logging.INFO, "jupyter_agents")
    archive = ConversationArchive(small_disk)
    agent = Agent(tmp_path, "full")
    filler = small_disk / "conversations" / "filler"
    filler.write_bytes(b"f" * 600_000)
    agent.append(b"".join(line(i, 1000) for i in range(700)))  # 700 KB: does not fit
    for _ in range(3):
        archive.sync([agent.session], KINDS)
    warnings = [r for r in caplog.records if "archive paused" in r.getMessage()]
    assert len(warnings) == 1, caplog.text  # logged once
    copy = copy_of(archive, agent) if archive.index("full").copies else None
    if copy is not None and copy.exists():  # whatever was kept is a clean prefix
        assert agent.path.read_bytes().startswith(copy.read_bytes())

    filler.unlink()  # room again
    agent.append(line(700, 1000))
    archive.sync([agent.session], KINDS)
    assert copy_of(archive, agent).read_bytes() == agent.path.read_bytes()
    assert "archive resumed" in caplog.text
    assert len([r for r in caplog.records if "archive paused" in r.getMessage()]) == 1


def test_an_unusable_archive_folder_never_stops_sessions_or_restores(state, tmp_path, caplog):
    (state / "conversations").write_text("not a folder")  # something else is there
    archive = ConversationArchive(state)
    agent = Agent(tmp_path, "blocked")
    agent.append(line(0, 500))
    for _ in range(3):
        assert archive.sync([agent.session], KINDS) == 0
    assert caplog.text.count("conversation archive") == 1  # said once
    agent.session.status = "interrupted"
    assert archive.put_back(agent.session) is False  # a restore goes on without it
    archive.note("blocked", "22222222-2222-4222-8222-222222222222")
