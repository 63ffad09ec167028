"""The conversation archive: copies of agent sessions' conversation files in the state
dir, so a conversation outlives what happens to the CLI's own file (Claude Code deletes
conversation files not written for ``cleanupPeriodDays``; users delete
``~/.claude/projects``, move machines, run out of disk).

Layout (directories 0700, files 0600)::

    conversations/.lock                     held while the archive changes
    conversations/<session id>/index.json   the session's :class:`Index`
    conversations/<session id>/<file>       one copy per conversation file

**Incremental.** :meth:`ConversationArchive.sync` copies only what a source gained since
the last sync: when its size, inode, device and mtime are unchanged nothing is read; when
it grew, the hashes of its first and of its last copied :data:`HASH_SPAN` bytes are checked
(so at most ``2 * HASH_SPAN`` bytes are read again) and the new bytes appended. A source
that was rewritten in place (a hash differs), truncated (it is shorter) or replaced (another
inode) is copied again from its first byte, so the archive holds what the CLI has now; a
source that is deleted keeps its copy. :attr:`ConversationArchive.stats` counts the bytes
read.

**Bounded.** At most ``session_max_bytes`` per session (beyond it the newest bytes of
that session are not archived; logged once per conversation) and ``max_bytes`` in all:
when a copy needs room, copies of sessions that are not running are dropped, the least
recently written first; a running session's copies are never dropped (when they alone
fill the archive, their newest bytes wait, logged once). A dropped copy keeps its record
(:attr:`Copy.dropped`): the conversation is known to have had a file.

**A full disk** (``ENOSPC``, ``EDQUOT``) pauses the archive: what was half written is cut
off, one warning is logged, and every later sync tries again from the last whole copy
(one line when it succeeds). Nothing the archive does touches the sessions themselves.

**Resume.** :meth:`ConversationArchive.put_back` writes a copy back to the exact path the
CLI reads when that file is missing or shorter than the copy.

Blocking and thread-safe; several processes may use one archive (the lock). The server
calls it from its refresh thread, never from the IO loop.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from jupyter_agents.agents.base import AgentKind
from jupyter_agents.core.errors import UnsafeStateDir
from jupyter_agents.core.paths import ensure_private_dir
from jupyter_agents.core.records import Session, utcnow_iso

#: bytes at the start and at the end of what was copied whose hashes are checked
HASH_SPAN = 4096
#: bytes read (and written) at a time
CHUNK = 1 << 20
#: default of ``AgentsApp.conversation_archive_max_bytes``
DEFAULT_MAX_BYTES = 512 << 20
#: default of ``AgentsApp.conversation_archive_session_max_bytes``
DEFAULT_SESSION_MAX_BYTES = 256 << 20
_FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclasses.dataclass
class Copy:
    """The archived copy of one conversation file: ``source`` (where the CLI keeps it and
    reads it on resume), ``name`` (the copy in the session's folder), ``size`` (bytes
    copied), the source's identity when last copied (``inode``, ``device``, ``mtime_ns``)
    and the hashes of the copy's first and last :data:`HASH_SPAN` bytes."""

    conversation: str
    source: str
    name: str
    size: int = 0
    inode: int | None = None
    device: int | None = None
    mtime_ns: int | None = None
    head: str = ""
    tail: str = ""
    #: when the file was first seen, and when bytes were last copied (ISO 8601 UTC)
    first_seen: str = dataclasses.field(default_factory=utcnow_iso)
    written: str | None = None
    #: when a cap dropped the copy (its record stays)
    dropped: str | None = None
    #: the session's cap stopped this copy short of its source
    capped: bool = False


@dataclasses.dataclass
class Index:
    """What the archive keeps of one session: its copies, and every conversation id it
    was seen with (oldest first), including those whose file never appeared."""

    copies: list[Copy] = dataclasses.field(default_factory=list)
    conversations: list[str] = dataclasses.field(default_factory=list)
    #: synced since the session last ran: nothing more to copy until it runs again
    final: bool = False

    def copy_of(self, conversation_id: str) -> Copy | None:
        """The newest copy of that conversation (dropped or not)."""
        found = [c for c in self.copies if c.conversation == conversation_id]
        return found[-1] if found else None

    def kept(self) -> list[Copy]:
        return [c for c in self.copies if c.dropped is None]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Index:
        if not isinstance(data, dict):
            return cls()
        fields = {f.name for f in dataclasses.fields(Copy)}
        copies = [
            Copy(**{k: v for k, v in c.items() if k in fields})
            for c in data.get("copies", [])
            if isinstance(c, dict) and {"conversation", "source", "name"} <= set(c)
        ]
        ids = [c for c in data.get("conversations", []) if isinstance(c, str)]
        return cls(copies, ids, bool(data.get("final", False)))


@dataclasses.dataclass
class Stats:
    """Bytes the archive read from sources: ``copied`` (appended to copies), ``checked``
    (hashed again to see that a source still starts and continues as copied)."""

    copied: int = 0
    checked: int = 0


@dataclasses.dataclass(frozen=True)
class ConversationFile:
    """A file to read a conversation from: the CLI's own or its archived copy."""

    conversation: str
    path: Path
    archived: bool


class ArchiveFull(Exception):
    """A write failed for want of space (the archive is paused)."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_at(fd: int, offset: int, length: int) -> bytes:
    parts: list[bytes] = []
    while length > 0:
        part = os.pread(fd, min(length, CHUNK), offset)
        if not part:
            break
        parts.append(part)
        offset += len(part)
        length -= len(part)
    return b"".join(parts)


class ConversationArchive:
    """The archive of a state dir (module docstring): at most ``max_bytes`` in all and
    ``session_max_bytes`` per session."""

    def __init__(
        self,
        state_dir: Path,
        max_bytes: int = DEFAULT_MAX_BYTES,
        session_max_bytes: int = DEFAULT_SESSION_MAX_BYTES,
        log: logging.Logger | None = None,
    ) -> None:
        self.root = state_dir / "conversations"
        self.max_bytes = max_bytes
        self.session_max_bytes = session_max_bytes
        self.log = log or logging.getLogger("jupyter_agents")
        self.stats = Stats()
        self._lock = threading.RLock()
        self._paused = False
        #: (session, conversation) whose cap was logged, (session, errno) of errors
        #: logged; sessions known final
        self._capped_logged: set[tuple[str, str]] = set()
        self._full_logged = False
        self._final: set[str] = set()
        #: bytes of kept copies per session, kept up to date by this process's writes
        #: (read again from disk before anything is dropped)
        self._usage_cache: dict[str, int] | None = None

    # -- locking and the index ---------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            ensure_private_dir(self.root)
            fd = os.open(self.root / ".lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def folder(self, session_id: str) -> Path:
        """The folder of a session's copies (it may not exist)."""
        return self.root / session_id

    def index(self, session_id: str) -> Index:
        """What is archived of a session (empty if nothing)."""
        try:
            return Index.from_json(json.loads((self.folder(session_id) / "index.json").read_text()))
        except (OSError, ValueError):
            return Index()

    def _write_index(self, session_id: str, index: Index) -> None:
        folder = ensure_private_dir(self.folder(session_id))
        tmp = folder / "index.json.tmp"
        data = json.dumps(index.to_json(), indent=1).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        except OSError as e:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            if e.errno in _FULL:
                raise ArchiveFull(str(e)) from e
            raise
        os.close(fd)
        os.replace(tmp, folder / "index.json")

    # -- syncing -----------------------------------------------------------------------

    def sync(
        self,
        sessions: Iterable[Session],
        kinds: Mapping[str, AgentKind],
        noted: Mapping[str, Iterable[str]] | None = None,
    ) -> int:
        """Bring the copies of ``sessions`` up to date; the bytes copied.

        Running (and orphaned) sessions are synced every call; one that ended once more
        (its last bytes), then no more until it runs again. ``noted`` adds conversation
        ids sessions had (e.g. before a ``/clear``) to look for. Sessions of kinds that
        keep no conversation files are skipped.
        """
        noted = noted or {}
        sessions = list(sessions)
        # an orphaned session's process lives too: synced and kept like a running one's
        running = {s.id for s in sessions if s.status in ("running", "orphaned")}
        todo = [
            s
            for s in sessions
            if s.kind in kinds
            and kinds[s.kind].keeps_conversations
            and (s.id in running or s.id not in self._final or s.id in noted)
        ]
        if not todo:
            return 0
        copied = 0
        try:
            with self._locked():
                if self._usage_cache is None:
                    self._usage_cache = self._usage()
                usage = self._usage_cache
                for session in todo:
                    try:
                        copied += self._sync_session(
                            session, kinds[session.kind], noted.get(session.id, ()), running, usage
                        )
                    except ArchiveFull as e:
                        self._pause(e)
                        break
                    except OSError as e:  # that session's folder or file: the others go on
                        self._warn_once(session.id, e)
        except OSError as e:  # the archive's own folder or lock
            if e.errno in _FULL:
                self._pause(ArchiveFull(str(e)))
            else:
                self._warn_once("", e)
        except UnsafeStateDir as e:  # e.g. something else where its folder should be
            self._warn_once("", OSError(errno.EEXIST, str(e)))
        return copied

    def _warn_once(self, session_id: str, error: OSError) -> None:
        key = (session_id, str(error.errno))
        if key not in self._capped_logged:
            self._capped_logged.add(key)
            self.log.warning(
                "jupyter_agents: conversation archive%s: %s",
                f" (session {session_id})" if session_id else "",
                error,
            )

    def _sync_session(
        self,
        session: Session,
        kind: AgentKind,
        noted: Iterable[str],
        running: set[str],
        usage: dict[str, int],
    ) -> int:
        index = self.index(session.id)
        noted = list(noted)
        if index.final and session.id not in running and not noted:
            self._final.add(session.id)  # synced after it ended, by this or another process
            return 0
        before = json.dumps(index.to_json())
        for cid in [*noted, session.conversation_id]:
            if cid and cid not in index.conversations:
                index.conversations.append(cid)
        for cid in index.conversations:
            if index.copy_of(cid) is None:
                path = kind.conversation_file(session, cid)
                if path is not None:
                    index.copies.append(Copy(cid, str(path), self._name_for(index, path)))
        copied = 0
        try:
            for copy in index.kept():
                copied += self._sync_copy(session.id, copy, index, running, usage)
        finally:
            index.final = session.id not in running
            if json.dumps(index.to_json()) != before:
                self._write_index(session.id, index)
        if index.final:
            self._final.add(session.id)
        else:
            self._final.discard(session.id)
        if copied and self._paused:
            self._paused = False
            self.log.info("jupyter_agents: conversation archive resumed (there is room again)")
        return copied

    @staticmethod
    def _name_for(index: Index, path: Path) -> str:
        taken = {c.name for c in index.copies}
        name, n = path.name, 1
        while name in taken or name in ("index.json", "index.json.tmp") or name.startswith("."):
            name, n = f"{n}-{path.name}", n + 1
        return name

    def _sync_copy(
        self, session_id: str, copy: Copy, index: Index, running: set[str], usage: dict[str, int]
    ) -> int:
        """Copy what ``copy``'s source gained; the bytes copied."""
        try:
            src = os.open(copy.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return 0  # gone (the copy stays) or unreadable
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):
                return 0
            same = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) == (
                copy.inode,
                copy.device,
                copy.size,
                copy.mtime_ns,
            )
            target = self.folder(session_id) / copy.name
            if same and self._copy_size(target) == copy.size:
                return 0
            fresh = (
                (st.st_ino, st.st_dev) != (copy.inode, copy.device)
                or st.st_size < copy.size
                or self._copy_size(target) < copy.size
                or not self._continues(src, copy)
            )
            if fresh:
                return self._recopy(session_id, src, st, copy, index, running, usage)
            return self._append(session_id, src, st, copy, index, running, usage)
        finally:
            os.close(src)

    @staticmethod
    def _copy_size(target: Path) -> int:
        try:
            return target.stat().st_size
        except OSError:
            return -1

    def _continues(self, src: int, copy: Copy) -> bool:
        """Whether the source still holds what was copied (its first and last bytes)."""
        if copy.size == 0:
            return True
        head = _read_at(src, 0, min(HASH_SPAN, copy.size))
        start = max(0, copy.size - HASH_SPAN)
        tail = _read_at(src, start, copy.size - start)
        self.stats.checked += len(head) + len(tail)
        return _sha(head) == copy.head and _sha(tail) == copy.tail

    def _room(
        self, session_id: str, index: Index, want: int, running: set[str], usage: dict[str, int]
    ) -> tuple[int, str]:
        """How many of ``want`` more bytes session ``session_id`` may archive now (copies
        of sessions that are not running are dropped to make room), and which cap held
        it back (``session``, ``total`` or ``""``)."""
        session_room = max(0, self.session_max_bytes - sum(c.size for c in index.kept()))
        limit = "session" if session_room < want else ""
        want = min(want, session_room)
        if sum(usage.values()) + want > self.max_bytes:
            usage.clear()  # what is on disk now (another process may have removed some)
            usage.update(self._usage())
        excess = sum(usage.values()) + want - self.max_bytes
        if excess > 0:
            self._make_room(excess, running | {session_id}, usage)
        allowed = max(0, min(want, self.max_bytes - sum(usage.values())))
        return allowed, limit or ("total" if allowed < want else "")

    def _make_room(self, need: int, keep: set[str], usage: dict[str, int]) -> None:
        """Drop copies of sessions not in ``keep``, least recently written first, until
        ``need`` bytes are freed or none is left to drop."""
        candidates: list[tuple[str, str, Copy]] = []
        for session_id in usage:
            if session_id in keep:
                continue
            for copy in self.index(session_id).kept():
                candidates.append((copy.written or copy.first_seen, session_id, copy))
        candidates.sort(key=lambda c: c[0])
        for _, session_id, victim in candidates:
            if need <= 0:
                return
            index = self.index(session_id)
            for copy in index.kept():
                if copy.name == victim.name:
                    (self.folder(session_id) / copy.name).unlink(missing_ok=True)
                    copy.dropped = utcnow_iso()
                    need -= copy.size
                    usage[session_id] = max(0, usage.get(session_id, 0) - copy.size)
                    self._write_index(session_id, index)
                    self.log.info(
                        "jupyter_agents: conversation archive: dropped conversation %s of "
                        "ended session %s (%d bytes) for room",
                        copy.conversation,
                        session_id,
                        copy.size,
                    )

    def _usage(self) -> dict[str, int]:
        """Bytes of kept copies per session (from the files on disk)."""
        usage: dict[str, int] = {}
        try:
            folders = list(os.scandir(self.root))
        except OSError:
            return usage
        for folder in folders:
            if not folder.is_dir(follow_symlinks=False):
                continue
            total = 0
            with suppress(OSError):
                for entry in os.scandir(folder.path):
                    if entry.is_file(follow_symlinks=False) and not entry.name.startswith("index."):
                        total += entry.stat(follow_symlinks=False).st_size
            usage[folder.name] = total
        return usage

    def _append(
        self,
        session_id: str,
        src: int,
        st: os.stat_result,
        copy: Copy,
        index: Index,
        running: set[str],
        usage: dict[str, int],
    ) -> int:
        want = st.st_size - copy.size
        allowed, limit = self._room(session_id, index, want, running, usage) if want else (0, "")
        self._note_cap(session_id, copy, limit)
        target = self.folder(session_id) / copy.name
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, copy.size)  # a half-written end from a failed sync
            os.lseek(fd, copy.size, os.SEEK_SET)
            written = self._transfer(src, fd, copy.size, allowed)
            copy.size += written
            usage[session_id] = usage.get(session_id, 0) + written
            self._finish(fd, copy, st, written)
        except ArchiveFull:
            with suppress(OSError):
                os.ftruncate(fd, copy.size)
            raise
        finally:
            os.close(fd)
        return written

    def _recopy(
        self,
        session_id: str,
        src: int,
        st: os.stat_result,
        copy: Copy,
        index: Index,
        running: set[str],
        usage: dict[str, int],
    ) -> int:
        """Copy the source again from its first byte (it was rewritten, truncated or
        replaced); the old copy stays until the new one is whole."""
        folder = ensure_private_dir(self.folder(session_id))
        old, seen = copy.size, copy.inode is not None
        copy.size = 0
        usage[session_id] = max(0, usage.get(session_id, 0) - old)
        allowed, limit = self._room(session_id, index, st.st_size, running, usage)
        tmp = folder / f".{copy.name}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            written = self._transfer(src, fd, 0, allowed)
            self._finish(fd, copy, st, written, head_from=0)
        except ArchiveFull:
            copy.size = old
            usage[session_id] = usage.get(session_id, 0) + old
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, folder / copy.name)
        copy.size = written
        usage[session_id] = usage.get(session_id, 0) + written
        self._note_cap(session_id, copy, limit)
        if seen:
            self.log.info(
                "jupyter_agents: conversation archive: %s of session %s was rewritten, "
                "truncated or replaced; copied again (%d bytes)",
                copy.source,
                session_id,
                written,
            )
        return written

    def _transfer(self, src: int, dst: int, offset: int, length: int) -> int:
        """Append ``length`` bytes of ``src`` from ``offset`` to ``dst``; bytes written
        (fewer if the source ended sooner). :class:`ArchiveFull` when space ran out."""
        done = 0
        while done < length:
            data = os.pread(src, min(CHUNK, length - done), offset + done)
            if not data:
                break
            self.stats.copied += len(data)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(dst, view) :]
            except OSError as e:
                if e.errno in _FULL:
                    raise ArchiveFull(str(e)) from e
                raise
            done += len(data)
        return done

    def _finish(
        self, fd: int, copy: Copy, st: os.stat_result, written: int, head_from: int | None = None
    ) -> None:
        """After bytes went into the copy ``fd``: make them durable and record the
        source's identity and the copy's hashes."""
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno in _FULL:
                raise ArchiveFull(str(e)) from e
            raise
        size = os.fstat(fd).st_size
        copy.inode, copy.device, copy.mtime_ns = st.st_ino, st.st_dev, st.st_mtime_ns
        if head_from is not None or size - written < HASH_SPAN:
            copy.head = _sha(_read_at(fd, 0, min(HASH_SPAN, size)))
        start = max(0, size - HASH_SPAN)
        copy.tail = _sha(_read_at(fd, start, size - start))
        if written:
            copy.written = utcnow_iso()
        if size < st.st_size:
            # capped: what follows was not copied, so the source counts as changed
            copy.mtime_ns = None

    def _note_cap(self, session_id: str, copy: Copy, limit: str) -> None:
        """``limit`` (a cap) held back some of ``copy``'s new bytes: say so, once."""
        copy.capped = bool(limit)
        key = (session_id, copy.conversation)
        if not limit or key in self._capped_logged:
            return
        self._capped_logged.add(key)
        self.log.warning(
            "jupyter_agents: conversation archive: the newest bytes of conversation %s of "
            "session %s are not archived: %s",
            copy.conversation,
            session_id,
            f"the session has reached conversation_archive_session_max_bytes "
            f"({self.session_max_bytes})"
            if limit == "session"
            else f"the archive is full (conversation_archive_max_bytes {self.max_bytes}) "
            "and what fills it belongs to running sessions",
        )

    def _pause(self, error: ArchiveFull) -> None:
        if not self._paused:
            self._paused = True
            if not self._full_logged:
                self._full_logged = True
                self.log.warning(
                    "jupyter_agents: conversation archive paused: %s (%s); sessions keep "
                    "running and the archive resumes when there is room",
                    self.root,
                    error,
                )

    def note(self, session_id: str, conversation_id: str) -> None:
        """Session ``session_id`` had conversation ``conversation_id`` (e.g. before a
        ``/clear``): its file is looked for and kept too. Cheap: the copying is done by
        the next :meth:`sync`."""
        try:
            with self._locked():
                index = self.index(session_id)
                if conversation_id not in index.conversations:
                    index.conversations.append(conversation_id)
                    index.final = False
                    with suppress(ArchiveFull):
                        self._write_index(session_id, index)
                    self._final.discard(session_id)
        except (OSError, UnsafeStateDir) as e:
            self._warn_once(session_id, OSError(getattr(e, "errno", None), str(e)))

    # -- reading, restoring, removing ---------------------------------------------------

    def files(self, session: Session, live: Iterable[Path] = ()) -> list[ConversationFile]:
        """The one rule for which file holds each of ``session``'s conversations
        (search, the export and the usage ledger all read through it), oldest
        conversation first: for each conversation the archive saw, its copy where that
        holds more than the CLI's file (the CLI truncated, rewrote or deleted it), else
        the CLI's file while it exists (the copy's bytes from its start, and any the
        copy has not caught up with: a reader's offset carries over between the two);
        a dropped copy leaves only the CLI's file. Then ``live`` files (the CLI's file of
        the current conversation) the archive has not seen yet."""
        found: list[ConversationFile] = []
        seen: set[str] = set()
        sources: set[str] = set()
        for copy in self.index(session.id).copies:
            if copy.conversation in seen:
                continue
            seen.add(copy.conversation)
            sources.add(copy.source)
            source, archived = Path(copy.source), self.folder(session.id) / copy.name
            held = _size(source)
            if copy.dropped is None and _size(archived) > held:
                found.append(ConversationFile(copy.conversation, archived, True))
            elif held >= 0:
                found.append(ConversationFile(copy.conversation, source, False))
        cid = session.conversation_id
        for path in live:
            if str(path) not in sources and cid not in seen:
                found.append(ConversationFile(cid or "", path, False))
        return found

    def knows(self, session_id: str, conversation_id: str) -> bool:
        """Whether conversation ``conversation_id`` of that session ever had a file the
        archive saw (its copy may have been dropped since)."""
        return self.index(session_id).copy_of(conversation_id) is not None

    def put_back(self, session: Session) -> bool:
        """Before a resume: when the CLI's file of ``session``'s conversation is missing
        or shorter than the archived copy, write the copy back to exactly where the CLI
        reads it (0600; its folders made if gone). Returns whether the conversation is
        known to have had a file (:meth:`knows`), whether or not a copy was put back."""
        cid = session.conversation_id
        if not cid:
            return False
        try:
            return self._put_back(session, cid)
        except (OSError, UnsafeStateDir) as e:  # its folder or lock: resume as without
            self.log.warning(
                "jupyter_agents: session %s: the conversation archive is unusable: %s",
                session.id,
                e,
            )
            return self.knows(session.id, cid)

    def _put_back(self, session: Session, cid: str) -> bool:
        with self._locked():
            index = self.index(session.id)
            copy = index.copy_of(cid)
            if copy is None:
                return False
            if copy.dropped is not None:
                return True
            archived = self.folder(session.id) / copy.name
            target = Path(copy.source)
            try:
                present = target.stat().st_size
            except OSError:
                present = -1
            if present >= copy.size:
                return True
            tmp = target.parent / f".{target.name}.jupyter-agents-restore"
            try:
                src = archived.open("rb")
            except OSError as e:
                self.log.warning(
                    "jupyter_agents: session %s: the archived copy of conversation %s is "
                    "unreadable: %s",
                    session.id,
                    cid,
                    e,
                )
                return True
            try:
                with src:
                    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                    with os.fdopen(os.open(tmp, flags, 0o600), "wb") as dst:
                        shutil.copyfileobj(src, dst, CHUNK)
                        dst.flush()
                        os.fsync(dst.fileno())
                os.replace(tmp, target)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                self.log.warning(
                    "jupyter_agents: session %s: could not put conversation %s back at %s: %s",
                    session.id,
                    cid,
                    target,
                    e,
                )
                return True
            st = target.stat()
            copy.inode, copy.device, copy.mtime_ns = st.st_ino, st.st_dev, st.st_mtime_ns
            with suppress(ArchiveFull):
                self._write_index(session.id, index)
        self.log.info(
            "jupyter_agents: session %s: put conversation %s back at %s (%d bytes; the "
            "CLI's file was %s)",
            session.id,
            cid,
            target,
            copy.size,
            "gone" if present < 0 else f"{present} bytes",
        )
        return True

    def size(self, session_id: str) -> int:
        """Bytes archived of one session."""
        return sum(c.size for c in self.index(session_id).kept())

    def remove(self, session_id: str) -> None:
        """Forget a session's copies (its folder goes)."""
        with self._locked():
            shutil.rmtree(self.folder(session_id), ignore_errors=True)
            self._final.discard(session_id)
            if self._usage_cache is not None:
                self._usage_cache.pop(session_id, None)


def _size(path: Path) -> int:
    """A file's size; -1 when it is not there."""
    try:
        return path.stat().st_size
    except OSError:
        return -1
