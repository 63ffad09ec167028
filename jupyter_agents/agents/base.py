"""The AgentKind contract: what runs in a session, how it resumes, where its id comes from.

A kind is policy: it reads the agent CLI's own files (where its conversations are) and
starts no process itself: the TerminalManager spawns the argv a kind returns, in the
session's cwd, through the backend (no shell ever parses it), and asks the kind again on
restore. What it writes is its own (a session's hook settings under the state dir); of
the CLI's files it only removes what a dead process left (Copilot's stale locks).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_agents.agents.turns import other
from jupyter_agents.agents.usage import UsageReader
from jupyter_agents.core import clock
from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.core.records import Session

MAX_ARGS = 64
MAX_ARG_LENGTH = 4096
#: shell syntax in an argument: args are argv elements, never a command line, so text
#: like this would not do what its author meant (and is refused with a clear error)
_SHELL_SYNTAX = re.compile(r"[;|`]|\$[({]|&&|&\s*$|^\s*[<>]|[<>]\s*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class Launch:
    """What to run: ``argv``, and the conversation id it will hold if known up front.

    ``ambiguous`` means the launch resumes "the most recent conversation" in the cwd
    rather than a known id (which one is up to the CLI); no kind of ours does that any
    more (the most recent one may be someone else's), the field stays for old records.
    ``fresh``: a restore that starts a new conversation because the session's own one
    was never known, or (``empty``) held no message: there is nothing to resume.
    """

    argv: list[str]
    conversation_id: str | None = None
    ambiguous: bool = False
    fresh: bool = False
    empty: bool = False


@dataclasses.dataclass(frozen=True)
class FolderConversation:
    """A conversation the agent CLI keeps for a folder (to offer when a session's own
    conversation is unknown): its id and when it was last written."""

    conversation_id: str
    modified: datetime


def validate_args(args: object) -> list[str]:
    """Extra CLI arguments from a client, or :class:`InvalidRequest` saying why not.

    ``args`` must be a list of at most ``MAX_ARGS`` strings without control characters
    or shell syntax (they are passed as argv, never through a shell).

    >>> validate_args(["--model", "opus"])
    ['--model', 'opus']
    """
    if args is None:
        return []
    if not isinstance(args, list):
        raise InvalidRequest(
            "args must be a list of strings (argv elements), not a command line: "
            f"got {type(args).__name__}"
        )
    if len(args) > MAX_ARGS:
        raise InvalidRequest(f"too many args ({len(args)} > {MAX_ARGS})")
    for arg in args:
        if not isinstance(arg, str):
            raise InvalidRequest(f"args must be strings, got {arg!r:.80}")
        if len(arg) > MAX_ARG_LENGTH or _CONTROL.search(arg):
            raise InvalidRequest(f"arg {arg!r:.80} is too long or contains control characters")
        if _SHELL_SYNTAX.search(arg):
            raise InvalidRequest(
                f"arg {arg!r:.80} looks like shell syntax; args are passed to the program "
                "as-is, without a shell, so pipes, ';', '&&', '$(...)' and redirections "
                "would not work"
            )
    return list(args)


def is_uuid(value: object) -> bool:
    """Whether ``value`` is a canonical UUID string (what both agent CLIs use as ids).

    >>> is_uuid("0b7b2d3c-54a4-4e43-9a4e-6f1a1f0f2c11"), is_uuid("../x")
    (True, False)
    """
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False


def home_of(env: Mapping[str, str]) -> Path:
    """The home directory a session sees (its ``HOME``), else this process's."""
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def newest_conversations(found: Iterable[tuple[str, Path]], limit: int) -> list[FolderConversation]:
    """The conversations of ``found`` (pairs of a conversation id and a file of it), each
    dated by the last write of its newest file, newest first, at most ``limit``; a file
    that cannot be read is left out."""
    newest: dict[str, FolderConversation] = {}
    for cid, path in found:
        try:
            modified = clock.from_epoch(path.stat().st_mtime)
        except (OSError, OverflowError, ValueError):
            continue
        if cid not in newest or newest[cid].modified < modified:
            newest[cid] = FolderConversation(cid, modified)
    return sorted(newest.values(), key=lambda c: c.modified, reverse=True)[: max(0, limit)]


def pid_file_conversation(folder: Path, pid: int) -> str | None:
    """The conversation id CLI process ``pid`` holds now, from the file such a CLI keeps
    per process (``<folder>/<pid>.json`` with ``pid`` and ``sessionId``: Claude Code's and
    Qwen Code's ``sessions/``); None when there is none or it names another pid."""
    try:
        data = json.loads((folder / f"{pid}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("pid") not in (pid, str(pid)):
        return None
    cid = data.get("sessionId")
    return cid if is_uuid(cid) else None


#: how much of a conversation file :meth:`AgentKind.holds_messages` reads at most, and
#: per line (a message comes within its first records)
_MESSAGE_SCAN = 16 << 20
_MESSAGE_LINE = 1 << 20


class AgentKind(ABC):
    """One kind of session (``shell``, ``claude``, ``codex`` or a configured one)."""

    #: the value of a session's ``kind`` field
    name: str = ""

    def __init__(self, command: Sequence[str]) -> None:
        if not command or not all(isinstance(c, str) and c for c in command):
            raise ValueError(f"agent kind {self.name!r}: command must be a non-empty argv list")
        self.command = list(command)

    def check_args(self, args: object) -> list[str]:
        """Validate client args for this kind (:func:`validate_args`, plus kind rules)."""
        return validate_args(args)

    @abstractmethod
    def launch(self, args: list[str]) -> Launch:
        """The launch of a new session with ``args`` (already checked)."""

    def folder_conversations(self, session: Session, limit: int = 5) -> list[FolderConversation]:
        """The newest ``limit`` conversations this kind's CLI keeps for ``session``'s
        folder (from its files), newest first; [] for kinds without any."""
        return []

    @abstractmethod
    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        """The launch that continues ``session``'s conversation (its process is gone).
        Never "the most recent conversation": when its id is unknown, a new conversation
        starts in its folder (``fresh``).

        ``env`` is the environment the new process gets (to find the CLI's files).
        ``had_file``: the conversation is known to have had a file (the conversation
        archive saw it, :mod:`jupyter_agents.agents.archive`), so it is resumed by its id even
        when that file is gone: the CLI then says why it cannot, instead of a new
        conversation starting under the old id.
        """

    #: what people call it (a product name); "": its :attr:`name`
    label: str = ""
    #: its icon in clients: a letter on a disc of a CSS colour (None: a generic one)
    badge: tuple[str, str] | None = None

    #: the key a person presses to interrupt a turn, which the unattended limit sends
    #: (None: sessions of this kind are never interrupted so)
    interrupt_key: str | None = None
    #: environment variables the CLI sets for its own children: a session started from
    #: inside one would inherit them and break (``AgentsApp.scrub_env``'s default)
    own_env: tuple[str, ...] = ()

    #: whether the CLI records the tokens it spends in its conversation files (then
    #: :meth:`usage_reader` reads them)
    reports_usage: bool = False
    #: list prices of the CLI's models: model id (or a pattern with ``*``) -> US dollars
    #: per million tokens of each kind (:func:`~jupyter_agents.agents.usage.price_row`);
    #: ``AgentsApp.prices``' default
    prices: Mapping[str, Mapping[str, float]] = {}

    def usage_reader(self, saved: str | None) -> UsageReader:
        """A reader of one conversation file's usage, carrying on from ``saved`` (what
        an earlier reader of the file dumped; None: from its start). Only asked when
        :attr:`reports_usage`."""
        raise NotImplementedError(f"kind {self.name!r} reports no usage")

    def markdown(self, record: Mapping[str, Any]) -> Iterator[str]:
        """The Markdown of one record of a conversation file (a JSON object), for the
        conversation export; nothing for records that are not turns."""
        return iter(())

    def turns(self, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The turn events of one record of a conversation file (a JSON object), in the
        shape of :mod:`jupyter_agents.agents.turns`; a record the kind does not map is one
        ``other`` event with its type, never nothing."""
        yield other(record.get("timestamp"), record.get("type", "?"))

    def links(self, record: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """A record's own id and its parent's, where the CLI chains its records (the
        turns follow that chain where it and the file's order differ,
        :mod:`jupyter_agents.sessions.turns`); ``(None, None)`` by default: the file's
        order is the conversation's."""
        return None, None

    #: how sessions of this kind report attention (``attention_source``): ``hooks``,
    #: ``notify``, or None (they do not)
    reports: str | None = None

    def with_reporting(self, argv: list[str], state_dir: Path, session_id: str) -> list[str]:
        """``argv`` (from :meth:`launch` or :meth:`resume`) with this kind's attention
        reporting for session ``session_id`` added (:mod:`jupyter_agents.agents.attention`)."""
        return argv

    def session_files(self, state_dir: Path, session_id: str) -> list[Path]:
        """What a session of this kind keeps in ``state_dir`` of its own beyond what every
        session has (its record, transcript, archived conversations, hook spool and
        restore prelude): its hook settings, its plugin's records. ``jupyter agents
        prune`` removes exactly these with the rest; none by default."""
        return []

    def reporting_env(self, state_dir: Path, session_id: str) -> dict[str, str]:
        """Environment variables that give session ``session_id``'s process this kind's
        attention reporting (for CLIs that take their hooks from a settings file named
        in the environment rather than on the command line); set on every launch and
        restore, on top of the session's own environment, and never stored."""
        return {}

    #: how long the permission hook of a CLI that shows no dialog while it waits
    #: elsewhere (Codex, Copilot, Qwen) waits for an answer, in seconds
    #: (``AgentsApp.permission_wait`` sets it); None for kinds whose dialog shows
    #: meanwhile, or that ask nothing elsewhere
    ask_wait: float | None = None

    def is_conversation_id(self, value: object) -> bool:
        """Whether ``value`` has the shape of this kind's conversation ids (a hook
        event's conversation is followed only then): a UUID unless the kind says
        otherwise."""
        return is_uuid(value)

    #: the server's state dir, set by the session service before any session is read
    #: (for kinds whose conversation records live there); None until then
    state_dir: Path | None = None

    #: whether the conversation id can change while the session runs (then
    #: :meth:`discover` is asked periodically)
    follows_conversation: bool = False

    def discover(
        self,
        session: Session,
        pids: Sequence[int],
        env: Mapping[str, str],
        taken: Set[str],
    ) -> str | None:
        """The conversation id the live session holds now, from evidence tied to its
        processes ``pids`` (the pane process first, then its descendants); None when
        there is no such evidence. ``taken`` holds the ids other sessions hold, which
        can never be this session's. Only called when :attr:`follows_conversation`."""
        raise NotImplementedError(f"kind {self.name!r} does not follow conversation ids")

    #: whether the CLI keeps each conversation in a file of its own (then
    #: :meth:`conversation_file` finds it; the archive copies it, search reads it)
    keeps_conversations: bool = False

    def conversation_file(self, session: Session, conversation_id: str) -> Path | None:
        """The CLI's own file of conversation ``conversation_id`` (one ``session`` had),
        where the CLI reads it on resume, if that file exists now; None for kinds that
        keep none."""
        return None

    #: the ``type`` of the records of its conversation files that are messages (a file
    #: with none holds nothing to resume); empty: not known, every file is taken to
    #: hold some
    message_types: frozenset[str] = frozenset()

    def holds_messages(self, path: Path) -> bool:
        """Whether conversation file ``path`` (JSON lines) holds a message: a record
        whose ``type`` is one of :attr:`message_types`, read until the first (at most
        16 MB, 1 MB a line); a file that cannot be read, or whose first 16 MB hold no
        message, is taken to hold some, so that the CLI says what it finds."""
        if not self.message_types:
            return True
        read = 0
        try:
            with path.open("rb") as f:
                while read < _MESSAGE_SCAN:
                    line = f.readline(_MESSAGE_LINE)
                    if not line:
                        return False
                    read += len(line)
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # not JSON, or a part of a record longer than a line read
                    if isinstance(record, dict) and record.get("type") in self.message_types:
                        return True
        except OSError:
            pass
        return True  # unreadable, or no message in its first part: the CLI decides

    def conversation_files(self, session: Session) -> list[Path]:
        """The CLI's file of ``session``'s current conversation, if it exists (the
        :meth:`conversation_file` of its ``conversation_id``)."""
        cid = session.conversation_id
        path = None if cid is None else self.conversation_file(session, cid)
        return [] if path is None else [path]

    #: how a person installs this kind's CLI (shown when it is not found)
    install: str | None = None

    #: the arguments that make its CLI speak the Agent Client Protocol on stdio (issue
    #: 58; None: it does not, and its sessions are terminals only)
    acp_args: tuple[str, ...] | None = None
    #: the argv of another program that speaks ACP on stdio for this kind, where its CLI
    #: does not itself (an adapter: Claude Code's, Codex's); when set it is the ACP
    #: agent, and :attr:`acp_args` is not used
    acp_command: tuple[str, ...] | None = None
    #: how a person installs :attr:`acp_command`'s program (shown when it is not found)
    acp_install: str | None = None

    def acp_program(self) -> list[str] | None:
        """The argv of its ACP agent before a client's args: :attr:`acp_command`, else
        its command with :attr:`acp_args`; None for a kind with no ACP mode."""
        if self.acp_command is not None:
            return list(self.acp_command)
        if self.acp_args is not None:
            return [*self.command, *self.acp_args]
        return None

    def acp_launch(self, args: list[str]) -> list[str]:
        """The argv of its ACP agent with ``args`` (checked): :meth:`acp_program` and
        ``args``. :class:`InvalidRequest` for a kind with no ACP mode."""
        program = self.acp_program()
        if program is None:
            raise InvalidRequest(
                f"{self.label or self.name} sessions have no ACP mode; use mode "
                "'terminal' (the default)"
            )
        return [*program, *args]

    def unavailable(self, path: str | None, mode: str = "terminal") -> str | None:
        """Why no session of this kind can start in ``mode`` with ``path`` as ``$PATH``
        (the program of that mode is not there, or not executable), in a sentence
        naming the program and how to install it; None when it can, and for ``acp``
        when the kind has no ACP mode (:meth:`acp_launch` says so)."""
        argv, install = self.command, self.install
        if mode == "acp" and self.acp_command is not None:
            argv, install = list(self.acp_command), self.acp_install
        elif mode == "acp" and self.acp_args is None:
            return None
        program = argv[0]
        if os.sep in program:
            found = os.path.isfile(program) and os.access(program, os.X_OK)
        else:
            found = shutil.which(program, path=path) is not None
        if found:
            return None
        where = "" if os.sep in program else " on PATH"
        how = f"; install it: {install}" if install else ""
        return f"{program} was not found{where}{how}"

    def describe(self, path: str | None = None) -> dict[str, Any]:
        """A JSON description for clients: name, command, and whether it can start with
        ``path`` as ``$PATH`` (``available``; if not, ``unavailable``: why, and how to
        install it); how clients show it: ``label`` and, when it has one, ``badge``;
        its ``modes``, and for a kind with an ACP mode the argv of its ACP agent
        (``acp_command``) and, when that cannot start, ``acp_unavailable``: why."""
        why = self.unavailable(path)
        described: dict[str, Any] = {
            "name": self.name,
            "command": self.command,
            "available": why is None,
            "label": self.label or self.name,
        }
        if self.badge is not None:
            described["badge"] = {"letter": self.badge[0], "color": self.badge[1]}
        acp = self.acp_program()
        described["modes"] = ["terminal"] + (["acp"] if acp is not None else [])
        if acp is not None:
            described["acp_command"] = acp
            acp_why = self.unavailable(path, "acp")
            if acp_why is not None:
                described["acp_unavailable"] = acp_why
        return described if why is None else {**described, "unavailable": why}


class AssignedIdKind(AgentKind):
    """A CLI whose conversation id we choose at launch (``--session-id <uuid4>``), so it
    is exact from the first second, and that resumes a conversation by its id: Claude
    Code, Gemini CLI, GitHub Copilot CLI, Qwen Code.

    On resume: :meth:`resume_args` when the conversation has a file
    (:meth:`~AgentKind.conversation_file`), or had one (the archive saw it: the CLI then
    says why it cannot resume, instead of a new conversation starting under the old id);
    ``--session-id <id>`` again when it never had one (no message was sent, so there is
    nothing to resume yet); a new conversation (``fresh``) when the id is unknown, or
    when its file holds no message (:meth:`~AgentKind.holds_messages`: the CLI wrote its
    head only, and would refuse to resume it). Never the CLI's "most recent
    conversation", which may be another session's.
    """

    #: the flags that choose the conversation: ours to set, refused in a client's args
    id_flags: frozenset[str] = frozenset()

    def live_conversation(self, env: Mapping[str, str], pid: int) -> str | None:
        """The conversation id CLI process ``pid`` holds now, from the file the CLI
        keeps per process (Claude Code's and Qwen Code's ``sessions/<pid>.json``);
        None when there is none. What :meth:`discover` follows a ``/clear`` by."""
        return None

    def discover(
        self,
        session: Session,
        pids: Sequence[int],
        env: Mapping[str, str],
        taken: Set[str],
    ) -> str | None:
        for pid in pids:
            cid = self.live_conversation(env, pid)
            if cid is not None:
                return cid
        return None

    def resume_args(self, conversation_id: str) -> list[str]:
        """The arguments that resume conversation ``conversation_id``."""
        return ["--resume", conversation_id]

    def check_args(self, args: object) -> list[str]:
        checked = super().check_args(args)
        for arg in checked:
            flag = arg.split("=", 1)[0]
            if flag in self.id_flags:
                raise InvalidRequest(
                    f"{flag} is set by jupyter_agents (each session gets its own "
                    "conversation id); to continue a conversation, restore its session"
                )
        return checked

    def launch(self, args: list[str]) -> Launch:
        cid = str(uuid.uuid4())
        return Launch([*self.command, "--session-id", cid, *args], cid)

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        cid = session.conversation_id
        if cid is None or not is_uuid(cid):
            return dataclasses.replace(self.launch(session.args), fresh=True)
        seen_by = dataclasses.replace(session, env=dict(env))  # where the new process looks
        path = self.conversation_file(seen_by, cid)
        if path is not None and not self.holds_messages(path):
            # its CLI wrote the file's head, no message: its resume would fail ("no
            # previous sessions found"); a new conversation in its folder, said so
            return dataclasses.replace(self.launch(session.args), fresh=True, empty=True)
        if had_file or path is not None:
            return Launch([*self.command, *self.resume_args(cid), *session.args], cid)
        return Launch([*self.command, "--session-id", cid, *session.args], cid)
