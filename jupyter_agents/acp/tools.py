"""The client tools an ACP agent may ask its client for, run by the proxy when the
``acp_client_tools`` setting allows them (none by default): ``fs`` (``fs/read_text_file``,
``fs/write_text_file``) and ``terminal`` (``terminal/create``, ``terminal/output``,
``terminal/wait_for_exit``, ``terminal/kill``, ``terminal/release``), as the ACP schema
shapes them.

The contract, for each request the agent makes:

- **Confined to the session's working directory.** A path (a file's, a terminal's
  ``cwd``) must be absolute; it is resolved (``..`` and symbolic links followed) and
  refused unless what it resolves to is the working directory (resolved) or inside it.
  The file is then opened from the working directory down, one folder at a time, none
  of them followed if it is a symbolic link (``O_NOFOLLOW``): a link put on the way
  after the check is refused, not followed. A write also refuses what is not a regular
  file and a file with other hard links (one could be outside). A write makes the
  missing folders inside the working directory and replaces the file's content in
  place (its mode is kept).
- **Bounded.** A read returns at most :data:`READ_CAP` bytes of whole lines (a longer
  first line is cut), ending with a line that says where it was cut and how to read on;
  a terminal keeps the last ``outputByteLimit`` bytes of its output (at most
  :data:`OUTPUT_CAP`) and says ``truncated``; at most :data:`MAX_TERMINALS` terminals
  are kept until released: a new one makes room by forgetting the oldest whose command
  exited, and is refused while all of them run.
- **No shell.** A terminal runs ``command`` with ``args`` as its argv (found on the
  ``PATH`` of its environment), stdin from ``/dev/null``, stdout and stderr together, in
  the working directory unless ``cwd`` says another folder inside it, with the proxy's
  environment plus ``env``, in a process group of its own. ``terminal/kill`` and
  ``terminal/release`` end that group (``SIGKILL``), and so does :meth:`ClientTools.close`
  (the proxy ends).
- **Never blocking.** Files are read and written in a thread, terminals are asyncio
  subprocesses: the proxy's loop goes on meanwhile.

A request that cannot be done gets a JSON-RPC error (:class:`ToolError`) whose message
says why; the proxy journals each request and its answer like any other message.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import os
import signal
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_agents.core.procs import on_exit

#: the tools the setting may allow
TOOLS = ("fs", "terminal")
#: the most bytes of a file one ``fs/read_text_file`` returns
READ_CAP = 1 << 20
#: the most bytes of output a terminal keeps (its tail), whatever ``outputByteLimit`` asks
OUTPUT_CAP = 1 << 20
#: the most terminals kept at once (a released one is not kept; module docstring)
MAX_TERMINALS = 16
#: bytes read from a file or a terminal's output at a time
CHUNK = 1 << 16
#: seconds what an exited command wrote has to be read before its exit is told
DRAIN = 1.0

# JSON-RPC error codes, as ACP uses them
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002

Result = dict[str, Any]


@dataclass
class ToolError(Exception):
    """A request the client tools refuse or cannot do: the JSON-RPC error sent back."""

    code: int
    message: str

    def __str__(self) -> str:
        return self.message


def _os_error(path: str, e: OSError) -> ToolError:
    """The error an agent gets for ``e``, raised while at ``path``."""
    if isinstance(e, FileNotFoundError):
        return ToolError(RESOURCE_NOT_FOUND, f"{path}: no such file or folder")
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return ToolError(INVALID_PARAMS, f"{path}: a symbolic link or file is on the way")
    return ToolError(INTERNAL_ERROR, f"{path}: {e.strerror or e}")


def confine(root: Path, path: object, what: str = "path") -> Path:
    """``path`` resolved, if it is an absolute path that resolves to ``root`` (itself
    resolved) or to something inside it; else a :class:`ToolError` saying why.

    >>> root = Path("/no/such/root")  # (what is not there resolves as written)
    >>> confine(root, "/no/such/root/a/../b")
    PosixPath('/no/such/root/b')
    >>> confine(root, str(root / ".." / "x"))
    Traceback (most recent call last):
    ...
    jupyter_agents.acp.tools.ToolError: ... is outside the session's working directory ...
    >>> confine(root, "b")
    Traceback (most recent call last):
    ...
    jupyter_agents.acp.tools.ToolError: path 'b' is not absolute
    """
    if not isinstance(path, str) or not path or "\0" in path:
        raise ToolError(INVALID_PARAMS, f"{what} must be an absolute path")
    if not os.path.isabs(path):
        raise ToolError(INVALID_PARAMS, f"{what} {path!r} is not absolute")
    resolved = Path(os.path.realpath(path))
    if resolved != root and root not in resolved.parents:
        why = f"{path} is outside the session's working directory {root}"
        raise ToolError(INVALID_PARAMS, f"{why} (it resolves to {resolved})")
    return resolved


def _open_inside(root: Path, resolved: Path, flags: int, make_folders: bool = False) -> int:
    """A descriptor of ``resolved`` (inside ``root``, no symbolic link in it) opened
    with ``flags``, walking from ``root`` down without following a link anywhere;
    missing folders are made with ``make_folders``."""
    parts = resolved.relative_to(root).parts
    if not parts:
        raise ToolError(INVALID_PARAMS, f"{resolved} is the working directory, not a file")
    at = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            folder = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(part, folder, dir_fd=at)
            except FileNotFoundError:
                if not make_folders:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=at)
                fd = os.open(part, folder, dir_fd=at)
            os.close(at)
            at = fd
        flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # (no wait on a FIFO)
        return os.open(parts[-1], flags, 0o666, dir_fd=at)
    finally:
        os.close(at)


def read_text(
    root: Path, path: object, line: object = None, limit: object = None, cap: int = READ_CAP
) -> Result:
    """``fs/read_text_file``: the text of the file at ``path`` (confined to ``root``)
    from line ``line`` (1-based; default 1), at most ``limit`` lines (default all), at
    most ``cap`` bytes of whole lines (a longer first line is cut at a character),
    decoded as UTF-8 (a bad byte becomes U+FFFD). A cut read ends with a line
    ``[jupyter-agents: ... read on with line=N]`` and its ``_meta`` says
    ``{"jupyter-agents": {"truncated": true, "nextLine": N}}``."""
    first = _count(line, "line", 1) or 1
    most = _count(limit, "limit", None)
    resolved = confine(root, path)
    try:
        fd = _open_inside(root, resolved, os.O_RDONLY)
    except OSError as e:
        raise _os_error(str(path), e) from None
    with open(fd, "rb", buffering=CHUNK) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(INVALID_PARAMS, f"{path} is not a regular file")
        for _ in range(first - 1):
            while (piece := f.readline(CHUNK)) and not piece.endswith(b"\n"):
                pass
            if not piece:
                break
        out = bytearray()
        taken = 0
        cut = False
        while most is None or taken < most:
            piece = f.readline(cap + 1 - len(out))
            if not piece:
                break
            out += piece
            if len(out) > cap:
                cut = True
                break
            if piece.endswith(b"\n"):
                taken += 1
    if not cut:
        return {"content": out.decode(errors="replace")}
    whole = out.rfind(b"\n", 0, cap)
    kept = bytes(out[: whole + 1]) if whole >= 0 else bytes(out[:cap])
    lines = kept.count(b"\n")
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(kept, final=False)
    if whole >= 0:
        next_line = first + lines
        how = f"read on with line={next_line}"
    else:  # one line longer than the cap
        next_line = first + 1
        how = f"line {first} is longer than that; read on with line={next_line}"
    note = f"[jupyter-agents: cut at {cap} bytes; {how}]"
    return {
        "content": text + ("" if text.endswith("\n") or not text else "\n") + note,
        "_meta": {"jupyter-agents": {"truncated": True, "nextLine": next_line}},
    }


def write_text(root: Path, path: object, content: object) -> Result:
    """``fs/write_text_file``: ``content`` (UTF-8) becomes the content of the file at
    ``path`` (confined to ``root``), made (with its missing folders) if it is not there;
    a file that is not regular, or has other hard links, is refused."""
    if not isinstance(content, str):
        raise ToolError(INVALID_PARAMS, "content must be a string")
    try:
        data = content.encode()
    except UnicodeEncodeError as e:
        raise ToolError(INVALID_PARAMS, f"content is not valid Unicode: {e}") from None
    resolved = confine(root, path)
    try:
        fd = _open_inside(root, resolved, os.O_WRONLY | os.O_CREAT, make_folders=True)
    except OSError as e:
        raise _os_error(str(path), e) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(INVALID_PARAMS, f"{path} is not a regular file")
        if st.st_nlink > 1:
            raise ToolError(
                INVALID_PARAMS,
                f"{path} has {st.st_nlink - 1} other hard link(s), which may be outside "
                "the working directory: not written",
            )
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise _os_error(str(path), e) from None
    finally:
        os.close(fd)
    return {}


def _count(value: object, name: str, default: int | None) -> int | None:
    """``value`` as a count (an int >= 0), ``default`` for None."""
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolError(INVALID_PARAMS, f"{name} must be a whole number >= 0")
    return value


class Terminal:
    """One command an agent runs (module docstring): its output's tail and its exit."""

    def __init__(self, process: asyncio.subprocess.Process, limit: int) -> None:
        self.process = process
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        loop = asyncio.get_running_loop()
        self._reading = loop.create_task(self._read())
        self._exited: asyncio.Future[None] = loop.create_future()
        self._stop_watching = on_exit(process.pid, self._leader_ended)

    def _leader_ended(self) -> None:
        if not self._exited.done():
            self._exited.set_result(None)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while data := await self.process.stdout.read(CHUNK):
            self.output += data
            if len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                self.truncated = True

    def text(self) -> str:
        """The output kept, from a character's start (a cut one is left out)."""
        start = 0
        while start < min(len(self.output), 3) and self.output[start] & 0xC0 == 0x80:
            start += 1
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        return decoder.decode(self.output[start:], final=False)  # (nor a half one at its end)

    def status(self) -> Result | None:
        """``{"exitCode", "signal"}`` once its command exited, else None."""
        code = self.process.returncode
        if code is None or not self._exited.done():
            return None
        if code < 0:
            return {"exitCode": None, "signal": signal.Signals(-code).name}
        return {"exitCode": code, "signal": None}

    async def wait(self) -> Result:
        """Its exit status, once its command (the group's leader) exited and what it
        wrote is read (or :data:`DRAIN` s passed: a child of it may hold its output)."""
        await asyncio.shield(self._exited)
        while (status := self.status()) is None:  # (its reaper tells the loop soon after)
            await asyncio.sleep(0.01)
        await asyncio.wait([self._reading], timeout=DRAIN)
        return status

    def kill(self) -> None:
        """End its process group (``SIGKILL``), while anything of it may run: its
        command, or a child that still holds its output."""
        if self.process.returncode is None or not self._reading.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def forget(self) -> None:
        """Killed, and nothing of it watched any more."""
        self.kill()
        self._stop_watching()
        self._leader_ended()


class ClientTools:
    """The client tools of one proxy: those of :data:`TOOLS` in ``allowed``, confined
    to the ACP session's working directory ``cwd`` (module docstring)."""

    def __init__(self, cwd: str, allowed: Collection[str] = ()) -> None:
        unknown = set(allowed) - set(TOOLS)
        if unknown:
            raise ValueError(f"unknown client tools {sorted(unknown)}: choose from {TOOLS}")
        self.root = Path(os.path.realpath(cwd))
        self.allowed = frozenset(allowed)
        self._terminals: dict[str, Terminal] = {}
        self._n = 0

    def capabilities(self) -> Result:
        """What ``initialize`` tells the agent of them (``clientCapabilities``)."""
        files = "fs" in self.allowed
        return {
            "fs": {"readTextFile": files, "writeTextFile": files},
            "terminal": "terminal" in self.allowed,
        }

    def offers(self, method: str) -> bool:
        """Whether ``method`` is one of the allowed tools' methods."""
        return method in self._methods()

    def _methods(self) -> dict[str, Any]:
        methods: dict[str, Any] = {}
        if "fs" in self.allowed:
            methods["fs/read_text_file"] = self._read
            methods["fs/write_text_file"] = self._write
        if "terminal" in self.allowed:
            methods["terminal/create"] = self._create
            methods["terminal/output"] = self._output
            methods["terminal/wait_for_exit"] = self._wait
            methods["terminal/kill"] = self._kill
            methods["terminal/release"] = self._release
        return methods

    async def call(self, method: str, params: object) -> Result:
        """The result of the agent's request ``method`` with ``params``; a
        :class:`ToolError` for one refused or failed."""
        handler = self._methods().get(method)
        if handler is None:
            raise ToolError(METHOD_NOT_FOUND, f"{method} is not offered")
        if not isinstance(params, Mapping):
            raise ToolError(INVALID_PARAMS, f"{method} needs params (an object)")
        result: Result = await handler(params)
        return result

    async def _read(self, params: Mapping[str, Any]) -> Result:
        return await asyncio.to_thread(
            read_text, self.root, params.get("path"), params.get("line"), params.get("limit")
        )

    async def _write(self, params: Mapping[str, Any]) -> Result:
        return await asyncio.to_thread(
            write_text, self.root, params.get("path"), params.get("content")
        )

    async def _create(self, params: Mapping[str, Any]) -> Result:
        command = params.get("command")
        args = params.get("args") or []
        if not isinstance(command, str) or not command:
            raise ToolError(INVALID_PARAMS, "command must be a program's name or path")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ToolError(INVALID_PARAMS, "args must be a list of strings")
        env = dict(os.environ)
        for item in params.get("env") or []:
            name = item.get("name") if isinstance(item, Mapping) else None
            value = item.get("value") if isinstance(item, Mapping) else None
            if not isinstance(name, str) or not name or "=" in name or not isinstance(value, str):
                raise ToolError(INVALID_PARAMS, "env must be a list of {name, value} strings")
            env[name] = value
        cwd = self.root
        if params.get("cwd") is not None:
            cwd = confine(self.root, params.get("cwd"), "cwd")
            if not cwd.is_dir():
                raise ToolError(INVALID_PARAMS, f"cwd {params.get('cwd')} is not a folder")
        asked = _count(params.get("outputByteLimit"), "outputByteLimit", OUTPUT_CAP)
        limit = min(OUTPUT_CAP if asked is None else asked, OUTPUT_CAP)
        for terminal_id, kept in list(self._terminals.items()):
            if len(self._terminals) < MAX_TERMINALS:
                break
            if kept.status() is not None:  # the oldest that exited makes room
                del self._terminals[terminal_id]
                kept.forget()
        if len(self._terminals) >= MAX_TERMINALS:
            raise ToolError(
                INTERNAL_ERROR,
                f"{MAX_TERMINALS} terminals are running: kill or release one (terminal/kill, "
                "terminal/release)",
            )
        try:
            process = await asyncio.create_subprocess_exec(
                command,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,  # its own group: ended whole
            )
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            code = RESOURCE_NOT_FOUND if isinstance(e, FileNotFoundError) else INTERNAL_ERROR
            raise ToolError(code, f"cannot run {command!r}: {why} (no shell runs it)") from None
        self._n += 1
        terminal_id = f"term-{self._n}"
        self._terminals[terminal_id] = Terminal(process, limit)
        return {"terminalId": terminal_id}

    def _terminal(self, params: Mapping[str, Any]) -> tuple[str, Terminal]:
        terminal_id = params.get("terminalId")
        terminal = self._terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            raise ToolError(RESOURCE_NOT_FOUND, f"no terminal {terminal_id!r} (released?)")
        assert isinstance(terminal_id, str)
        return terminal_id, terminal

    async def _output(self, params: Mapping[str, Any]) -> Result:
        _, terminal = self._terminal(params)
        status = terminal.status()
        if status is not None:  # exited: what it wrote before it did is in
            status = await terminal.wait()
        result: Result = {"output": terminal.text(), "truncated": terminal.truncated}
        if status is not None:
            result["exitStatus"] = status
        return result

    async def _wait(self, params: Mapping[str, Any]) -> Result:
        _, terminal = self._terminal(params)
        return await terminal.wait()

    async def _kill(self, params: Mapping[str, Any]) -> Result:
        _, terminal = self._terminal(params)
        terminal.kill()
        return {}

    async def _release(self, params: Mapping[str, Any]) -> Result:
        terminal_id, terminal = self._terminal(params)
        del self._terminals[terminal_id]
        terminal.forget()
        return {}

    def close(self) -> None:
        """End every terminal's process group (the proxy is ending)."""
        for terminal in self._terminals.values():
            terminal.forget()
        self._terminals.clear()
