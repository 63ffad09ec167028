"""An agent session's conversations as a document: Markdown to read (user and assistant
turns, tool calls and their results summarised, timestamps), a notebook (its turn
events, :mod:`jupyter_agents.sessions.turns`: a Markdown cell per message, a code cell
per tool call with its output; read-only) or the raw JSON-lines records, from the CLI's
own files or their archived copies (:mod:`jupyter_agents.agents.archive`). A notebook can
also be written as a read-only file (:func:`write_notebook`), by default in the state
dir's ``notebooks/`` folder, away from the user's files.

Each record is rendered by the session's kind (:meth:`AgentKind.markdown
<jupyter_agents.agents.base.AgentKind.markdown>`), which knows its CLI's records; what it
does not render is left out of the Markdown. A line that is not JSON (a file cut
mid-write, a damaged one) is noted in the Markdown and the rest still shown; the
``jsonl`` export is the files' bytes as they are. Bounded: records are read one line at
a time, at most :data:`MAX_RECORD` bytes each; summaries are cut to
:data:`~jupyter_agents.agents.markdown.SUMMARY` characters. Blocking.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from jupyter_agents.agents.archive import ConversationFile
from jupyter_agents.agents.base import AgentKind
from jupyter_agents.agents.markdown import code, one_line, timestamp, what_it_does
from jupyter_agents.core.errors import InvalidRequest, NotFound
from jupyter_agents.core.records import Session
from jupyter_agents.sessions import turns
from jupyter_agents.sessions.service import SessionService

#: format -> (Content-Type, file extension)
FORMATS = {
    "md": ("text/markdown; charset=utf-8", "md"),
    "jsonl": ("application/x-ndjson", "jsonl"),
    "ipynb": ("application/x-ipynb+json", "ipynb"),
}
#: the longest record (line) parsed; longer ones are noted, not parsed
MAX_RECORD = 16 << 20
#: bytes read at a time for the raw export
CHUNK = 1 << 20


def export_name(session: Session, fmt: str) -> str:
    """The download name: ``<kind>-<name>-<id>-conversation.<ext>``."""
    return f"{session.kind}-{session.name}-{session.id}-conversation.{FORMATS[fmt][1]}"


def open_export(
    service: SessionService, session_id: str, fmt: str
) -> tuple[Session, Iterator[bytes]]:
    """The session and its conversations as ``fmt`` (:data:`FORMATS`), streamed.

    :class:`InvalidRequest` for a session whose kind keeps no conversation files (a
    shell), :class:`NotFound` for an unknown session or one with no conversation file
    (nothing was sent yet, or the files are gone and none was archived).
    """
    session = service.get(session_id)
    kind = service.kinds.get(session.kind)
    if kind is None or not kind.keeps_conversations:
        raise InvalidRequest(
            f"session {session_id} is a {session.kind} session; only agents that keep "
            f"conversation files ({', '.join(conversation_kinds(service))}) have a conversation"
        )
    files = service.conversation_files(session)
    if not files:
        raise NotFound(
            f"session {session_id} has no conversation file: nothing was sent yet, or its "
            "files are gone and none was archived"
        )
    if fmt == "jsonl":
        return session, raw(files)
    if fmt == "ipynb":
        return session, iter([notebook(session, kind, files).encode()])
    return session, (text.encode() for text in markdown(session, kind, files))


def conversation_kinds(service: SessionService) -> list[str]:
    """The kinds whose sessions have a conversation to export."""
    return [name for name, kind in service.kinds.items() if kind.keeps_conversations]


def raw(files: Iterable[ConversationFile]) -> Iterator[bytes]:
    """The files' bytes as they are, one after the other (a newline between two when
    the first does not end in one)."""
    last = b"\n"
    for file in files:
        try:
            f = file.path.open("rb")
        except OSError:
            continue
        with f:
            first = True
            while chunk := f.read(CHUNK):
                if first and last != b"\n":
                    yield b"\n"
                first, last = False, chunk[-1:]
                yield chunk


def records(file: ConversationFile) -> Iterator[tuple[int, Any | None, int]]:
    """``(offset, record or None if not JSON, length)`` for each line of a file."""
    try:
        f = file.path.open("rb")
    except OSError:
        return
    with f:
        offset = 0
        while line := f.readline(MAX_RECORD + 1):
            length = len(line)
            if length > MAX_RECORD and not line.endswith(b"\n"):
                while (more := f.readline(CHUNK)) and not more.endswith(b"\n"):
                    length += len(more)
                length += len(more)
                yield offset, None, length
            elif line.strip():
                try:
                    yield offset, json.loads(line), length
                except ValueError:
                    yield offset, None, length
            offset += length


def markdown(session: Session, kind: AgentKind, files: list[ConversationFile]) -> Iterator[str]:
    """The Markdown document of ``session``'s conversations (records rendered by its
    ``kind``), a block at a time."""
    title = session.title or session.name
    yield f"# {session.kind} session {title} ({session.id})\n\n"
    if session.cwd:
        yield f"- Folder: {code(session.cwd)}\n"
    yield f"- Conversations: {len(files)}\n\n"
    for file in files:
        where = "archived copy" if file.archived else "the CLI's file"
        yield f"## Conversation {code(file.conversation or '?')}\n\n"
        yield f"*From {where}: {code(str(file.path))}*\n\n"
        for offset, record, length in records(file):
            if record is None:
                yield (
                    f"> *The record at byte {offset} ({length} bytes) is not JSON: it is "
                    "left out here (the jsonl export has it as it is).*\n\n"
                )
                continue
            if isinstance(record, dict):
                yield from kind.markdown(record)


#: the most cells a notebook export holds (a longer conversation ends with a note)
MAX_CELLS = 20_000


def notebook(session: Session, kind: AgentKind, files: list[ConversationFile]) -> str:
    """The notebook (nbformat 4, validated) of ``session``'s conversations: a Markdown
    cell per message (the user's quoted, thoughts in italics, compactions noted), a code
    cell per tool call (its command, or its input as JSON, as source; what it returned as
    a stream output, or an error output when it failed), the plans as checklists. Read-only
    (``editable``: false), the session, kind and conversation ids in metadata.

    Each cell's id is made from what its event says (:func:`cell_id`), so the same
    conversation gives the same notebook byte for byte, and the export of a conversation
    that went on is the earlier export with cells added: nbdime matches cells by id and
    shows just those."""
    import nbformat

    v4: Any = importlib.import_module("nbformat.v4")

    cells: list[Any] = []
    calls: dict[str, Any] = {}
    plan: list[dict[str, Any]] = []
    ids: Counter[str] = Counter()
    title = session.title or session.name
    cells.append(
        v4.new_markdown_cell(f"# {session.kind} session {title} ({session.id})", id="session")
    )
    position = turns.START
    while len(cells) < MAX_CELLS:
        page = turns.read_turns(kind, files, position, turns.MAX_EVENTS)
        for ev in page.events:
            cell = _cell(ev, calls, plan)
            if cell is not None:
                cell.id = cell_id(ev, ids)
                cells.append(cell)
        if not page.more or page.next == position:
            break
        position = page.next
    else:
        cells.append(v4.new_markdown_cell(f"*Cut at {MAX_CELLS} cells.*", id="cut"))
    for cell in cells:  # the heading and the cut note too: all of it is read-only
        cell.metadata.update({"editable": False, "deletable": False})
    nb = v4.new_notebook(cells=cells)
    nb.metadata["jupyter_agents"] = {
        "session": session.id,
        "kind": session.kind,
        "conversations": [f.conversation for f in files],
    }
    nbformat.validate(nb)
    return str(nbformat.writes(nb))  # type: ignore[no-untyped-call]


def cell_id(ev: dict[str, Any], seen: Counter[str]) -> str:
    """The notebook cell id of a turn event: a digest of what it says (type, time, text,
    tool call), with ``-2``, ``-3``... for the same again (``seen`` counts them); not its
    position, which moves when a CLI rewrites its file.

    >>> seen = Counter()
    >>> said = {"type": "user_message", "at": None, "text": "hi", "id": "0:0:1:00000000"}
    >>> first, again = cell_id(said, seen), cell_id({**said, "id": "0:9:1:0a0b0c0d"}, seen)
    >>> len(first), again == first + "-2"
    (16, True)
    """
    what = {k: v for k, v in ev.items() if k != "id"}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    seen[digest[:16]] += 1
    n = seen[digest[:16]]
    return digest[:16] if n == 1 else f"{digest[:16]}-{n}"


def _cell(ev: dict[str, Any], calls: dict[str, Any], plan: list[dict[str, Any]]) -> Any:
    """The cell of one turn event (None for one that adds to an earlier cell, or none).
    ``calls``: the code cell of each tool call so far; ``plan``: the plan so far (a
    ``partial`` plan event changes the entries it names, by id, and the cell shows the
    whole plan as it is then)."""
    v4: Any = importlib.import_module("nbformat.v4")

    kind = ev["type"]
    when = f" · {timestamp(ev['at'])}" if ev.get("at") else ""
    if kind == "user_message":
        quoted = "".join(f"> {line}\n" if line else ">\n" for line in ev["text"].split("\n"))
        return v4.new_markdown_cell(f"**User**{when}\n\n{quoted}")
    if kind == "agent_message":
        return v4.new_markdown_cell(f"**Assistant**{when}\n\n{ev['text']}")
    if kind == "thought":
        return v4.new_markdown_cell(f"*Thinking{when}:* {one_line(ev['text'])}")
    if kind == "compaction":
        return v4.new_markdown_cell(f"*The conversation was compacted{when}.*")
    if kind == "plan":
        if ev.get("partial"):
            for entry in ev["entries"]:
                known = next(
                    (e for e in plan if "id" in entry and e.get("id") == entry["id"]), None
                )
                if known is None:
                    plan.append(dict(entry))
                else:
                    known.update({k: v for k, v in entry.items() if v is not None})
        else:
            plan[:] = [dict(e) for e in ev["entries"]]
        marks = {"completed": "[x]", "in_progress": "[-]", "pending": "[ ]"}
        items = "".join(
            f"- {marks.get(e.get('status', ''), '[ ]')} {e.get('content', '')}\n" for e in plan
        )
        return v4.new_markdown_cell(f"**Plan**{when}\n\n{items}")
    if kind == "tool_call":
        known = calls.get(ev.get("tool_call_id") or "")
        if known is not None:  # the same call again: a later status, perhaps named now
            if "input" in ev:  # (an ACP agent may give its input only in an update)
                known.source = what_it_does(ev["input"])
            if "title" in ev:
                known.metadata.update(tool=ev.get("tool"), title=ev["title"])
            return None
        source = what_it_does(ev.get("input"))
        cell = v4.new_code_cell(
            source=source, metadata={"tool": ev.get("tool"), "title": ev.get("title")}
        )
        calls[ev.get("tool_call_id") or ev["id"]] = cell
        return cell
    if kind == "tool_call_update":
        cell = calls.get(ev.get("tool_call_id") or "")
        if cell is None:
            return None
        if ev["status"] == "failed":
            cell.outputs.append(
                v4.new_output(
                    "error",
                    ename="ToolError",
                    evalue=one_line(ev.get("output", "")),
                    traceback=[ev.get("output", "")],
                )
            )
        else:
            cell.outputs.append(v4.new_output("stream", name="stdout", text=ev.get("output", "")))
        return None
    return None


#: the folder of the state dir that holds the notebooks written with no path given
NOTEBOOKS = "notebooks"


def notebook_path(state_dir: Path, session: Session) -> Path:
    """Where :func:`write_notebook` puts a session's notebook when given no path:
    ``<state_dir>/notebooks/<kind>-<name>-<id>-conversation.ipynb``."""
    return state_dir / NOTEBOOKS / export_name(session, "ipynb")


def write_notebook(service: SessionService, session_id: str, path: Path | None = None) -> Path:
    """Write the notebook of a session's conversations (:func:`notebook`) to ``path``, by
    default :func:`notebook_path`; returns where. The file is read-only (mode 0400: its
    owner reads it, Jupyter opens it read-only) and replaced whole (written aside, then
    renamed), so writing it again after more turns gives the newer notebook.

    :class:`InvalidRequest` for a ``path`` that does not end in ``.ipynb``, whose folder
    is missing, or that holds anything but an earlier notebook of this session (a file of
    the user's is never replaced); what :func:`open_export` raises for the session.
    """
    session, chunks = open_export(service, session_id, "ipynb")
    if path is None:
        path = notebook_path(service.state_dir, session)
        path.parent.mkdir(mode=0o700, exist_ok=True)
    if path.suffix != ".ipynb":
        raise InvalidRequest(f"{path}: a notebook's name ends in .ipynb")
    if not path.parent.is_dir():
        raise InvalidRequest(f"{path}: there is no folder {path.parent}")
    if (path.exists() or path.is_symlink()) and not _notebook_of(path, session.id):
        raise InvalidRequest(
            f"{path} exists and is not a notebook of session {session.id}'s conversation; "
            "it is left as it is: choose another path"
        )
    fd, aside = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.chmod(aside, 0o400)
        os.replace(aside, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(aside)
        raise InvalidRequest(f"cannot write {path}: {e.strerror or e}") from None
    return path


def _notebook_of(path: Path, session_id: str) -> bool:
    """Whether ``path`` is a plain file holding a notebook of session ``session_id``'s
    conversation (one :func:`write_notebook` wrote)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            nb = json.load(f)
    except (OSError, ValueError):
        return False
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    ours = meta.get("jupyter_agents") if isinstance(meta, dict) else None
    return isinstance(ours, dict) and ours.get("session") == session_id
