"""tmux's formats and quoting, pure (no I/O): the config we write, how tmux is run
(:class:`TmuxCommand`), command-line escaping, control-mode ``%output`` unescaping,
version parsing, the text of the environment file sessions read, what tmux is asked
about a pane as typed formats (dataclasses whose fields are tmux format variables:
:func:`format_of`, :func:`parse_format`), and commands sent on one line with their
replies by name (:class:`Commands`, :class:`Replies`). A snapshot's own request and
reply are in :mod:`.snapshot`, the transcript writer in :mod:`.writer`.

Facts these rely on (tmux >= 3.2, checked on 3.3a):

- A command-line argument ending in ``;`` ends a tmux command; :func:`tmux_arg`
  escapes it. ``new-session -c`` is format-expanded (``#`` must be doubled);
  ``-e`` values and the shell command are not.
- ``window-size manual`` in the config crashes tmux 3.3a on ``new-session -d``; we
  size windows with ``resize-window`` instead.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import re
import shlex
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Fields = TypeVar("_Fields", bound="DataclassInstance")

MIN_TMUX_VERSION = (3, 2)
#: longest input chunk per ``send-keys`` command (hex doubles it, plus separators)
SEND_CHUNK = 1024
#: unix socket paths are limited to ~108 bytes by the kernel
MAX_SOCKET_PATH = 100

CONFIG = """\
# written by jupyter_agents; the tmux server of this state dir reads it at start
set -g status off
set -g prefix None
set -g prefix2 None
set -g mouse off
set -g remain-on-exit on
set -g history-limit {history_limit}
set -g default-terminal "{default_terminal}"
set -g update-environment ""
set -g exit-empty on
set -g detach-on-destroy off
set -g escape-time 0
# a viewer's own focus reports reach the pane as typed bytes; tmux's (a control client
# attaching) would be keys nobody pressed
set -g focus-events off
set -g set-clipboard off
set -gw aggressive-resize off
"""


@dataclasses.dataclass(frozen=True)
class TmuxCommand:
    """How this process runs tmux against the server of a state dir: ``executable``
    on ``socket`` with the config file ``config``, each tmux process with the
    environment ``env`` (a minimal one: the tmux server passes its own to every session
    it starts). The backend's control plane and the control clients (:mod:`.control`)
    run tmux alike through it.

    >>> TmuxCommand("tmux", Path("/s/socket"), Path("/s/tmux.conf"), {}).argv("ls")
    ['tmux', '-u', '-S', '/s/socket', '-f', '/s/tmux.conf', 'ls']
    """

    executable: str
    socket: Path
    config: Path
    env: Mapping[str, str]

    def argv(self, *args: str) -> list[str]:
        """The command line of tmux running ``args`` (UTF-8 always, ``-u``)."""
        return [self.executable, "-u", "-S", str(self.socket), "-f", str(self.config), *args]


def tmux_arg(value: str) -> str:
    """Escape one argv element so tmux takes it literally as one argument.

    >>> tmux_arg("a;")
    'a\\\\;'
    >>> tmux_arg("plain")
    'plain'
    """
    return value[:-1] + "\\;" if value.endswith(";") else value


def tmux_format_arg(value: str) -> str:
    """Like :func:`tmux_arg`, for arguments tmux expands as formats (``#`` doubled)."""
    return tmux_arg(value.replace("#", "##"))


def tmux_pipe_arg(value: str) -> str:
    """Like :func:`tmux_format_arg`, for the command of ``pipe-pane``, which tmux also
    passes through ``strftime`` (``%`` doubled; ``new-session -c`` is not).

    >>> tmux_pipe_arg("printf '%d' #1")
    "printf '%%d' ##1"
    """
    return tmux_format_arg(value.replace("%", "%%"))


def tmux_quote_path(path: Path) -> str:
    """``path`` as one argument of a command line sent to tmux (a control client's
    input), for a command that expands formats in it (``save-buffer``): single-quoted,
    each ``'`` as ``'\\''`` (tmux's parser joins the pieces, as a shell does), ``#``
    doubled. It must hold no newline, which would end the line (the state dirs of
    :class:`~.TmuxBackend` hold none).

    >>> print(tmux_quote_path(Path("/s/it's #1")))
    '/s/it'\\''s ##1'
    """
    return "'" + str(path).replace("#", "##").replace("'", "'\\''") + "'"


def parse_version(text: str) -> tuple[int, int]:
    """``"tmux 3.3a"`` -> ``(3, 3)``; ``"tmux next-3.4"`` -> ``(3, 4)``; else ``(0, 0)``."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def unescape_output(data: bytes) -> bytes:
    r"""Undo control mode's escaping of ``%output`` data (``\ooo`` octal bytes).

    tmux escapes every byte below 32 and the backslash itself, so the data holds no other
    backslash sequence and C's escape decoder can do the work.
    """
    return codecs.escape_decode(data)[0]  # type: ignore[attr-defined,no-any-return]


# -- typed formats: what tmux is asked about a pane ------------------------------------


def format_of(fields: type[DataclassInstance]) -> str:
    """The tmux format that asks for ``fields``, a dataclass whose fields are named after
    tmux format variables (as libtmux's ``neo`` objects are): their values in order,
    separated by spaces. Read the answer with :func:`parse_format`.

    >>> format_of(PaneEnd)
    '#{pane_dead} #{pane_dead_status} #{pane_dead_signal}'
    """
    return " ".join(f"#{{{name}}}" for name, _ in _readers(fields))


def parse_format(fields: type[_Fields], line: bytes | str) -> _Fields | None:
    """``line``, tmux's answer to :func:`format_of` ``fields``, read into ``fields``;
    None if it is not one (a value missing or not of its field's type). Each value is
    read by its field's type: ``int`` (empty: 0), ``bool`` (a number; not 0: true),
    ``int | None`` (not a number: None), ``str``. The last field takes the rest of the
    line, so a field whose value may hold spaces (a name) must come last.

    >>> parse_format(PaneEnd, b"1  9"), parse_format(PaneEnd, "x 3 ")
    (PaneEnd(pane_dead=True, pane_dead_status=None, pane_dead_signal=9), None)
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    readers = _readers(fields)
    values = text.split(" ", len(readers) - 1)
    if len(values) != len(readers):
        return None
    try:
        read = {name: reader(v) for (name, reader), v in zip(readers, values, strict=True)}
    except ValueError:
        return None
    return fields(**read)


def parse_reply(fields: type[_Fields], reply: list[bytes] | None) -> _Fields | None:
    """The one line of a ``display-message -p`` reply read as :func:`parse_format`
    ``fields`` does; None for a failed command (None) or no line."""
    return parse_format(fields, reply[0]) if reply else None


def _read_int(value: str) -> int:
    return int(value) if value else 0


def _read_bool(value: str) -> bool:
    return _read_int(value) != 0


def _read_number(value: str) -> int | None:
    return int(value) if re.fullmatch(r"-?[0-9]+", value) else None


_READERS: dict[object, Callable[[str], object]] = {
    int: _read_int,
    bool: _read_bool,
    int | None: _read_number,
    str: str,
}


@functools.cache
def _readers(fields: type[DataclassInstance]) -> tuple[tuple[str, Callable[[str], object]], ...]:
    """The name and value reader of each field of ``fields`` (:func:`parse_format`)."""
    hints = typing.get_type_hints(fields)
    return tuple((f.name, _READERS[hints[f.name]]) for f in dataclasses.fields(fields))


@dataclasses.dataclass(frozen=True)
class PaneEnd:
    """Whether a pane's process ended, and how. tmux knows the status a moment after
    ``pane_dead`` turns 1."""

    pane_dead: bool
    pane_dead_status: int | None
    pane_dead_signal: int | None

    @property
    def exit_code(self) -> int | None:
        """The exit status; a signal ``n`` reads as ``128 + n``; None while unknown.

        >>> [parse_format(PaneEnd, v).exit_code for v in ("1 3 ", "1  9", "1  ", "0  ")]
        [3, 137, None, None]
        """
        if self.pane_dead_status is not None:
            return self.pane_dead_status
        return None if self.pane_dead_signal is None else 128 + self.pane_dead_signal


@dataclasses.dataclass(frozen=True)
class PaneStatus(PaneEnd):
    """:class:`PaneEnd` of the pane ``pane_id`` (tmux answers for the client's own pane
    when the target is gone)."""

    pane_id: str


@dataclasses.dataclass(frozen=True)
class ListedPane(PaneEnd):
    """A pane as the control plane lists them: :class:`PaneEnd`, its process, when it
    died (unix time), its session."""

    pane_pid: int | None
    pane_dead_time: int | None
    session_name: str


@dataclasses.dataclass(frozen=True)
class PaneInfo:
    """What a stream asks of its session's pane first: its id, its process's pid, the
    tmux server's pid, whether its transcript is piped, and the session it is of."""

    pane_id: str
    pane_pid: int | None
    pid: int | None
    pane_pipe: bool
    session_name: str

    @classmethod
    def of(cls, reply: list[bytes] | None, session_id: str) -> PaneInfo | None:
        """The pane of ``session_id`` from a reply to :func:`format_of` this class; None
        if it is another session's (tmux answers for the client's own session when the
        target is gone) or not one.

        >>> PaneInfo.of([b"%3 42 7 1 s1"], "s1")
        PaneInfo(pane_id='%3', pane_pid=42, pid=7, pane_pipe=True, session_name='s1')
        >>> PaneInfo.of([b"%3 42 7 1 s2"], "s1"), PaneInfo.of(None, "s1")
        (None, None)
        """
        info = parse_reply(cls, reply)
        if info is None or info.session_name != session_id:
            return None
        return info if re.fullmatch(r"%[0-9]+", info.pane_id) else None


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A tmux paste buffer, as ``list-buffers`` lists them."""

    buffer_size: int
    buffer_name: str


# -- command lines with named replies ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Commands:
    """tmux commands sent on one line, each under a name its reply is known by
    (:class:`Replies`): they run back to back, and a failed one ends the line (the
    commands after it fail too). Lines add up (``+``) in order.

    >>> line = Commands.of(a="display-message -p x") + Commands.of(b="list-buffers")
    >>> line.line, line.names
    ('display-message -p x ; list-buffers', ('a', 'b'))
    """

    named: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if len(set(self.names)) != len(self.named):
            raise ValueError(f"two commands of one line have one name: {self.names}")

    @classmethod
    def of(cls, **named: str) -> Commands:
        """The commands given as ``name=command``, in that order."""
        return cls(tuple(named.items()))

    def __add__(self, other: Commands) -> Commands:
        return Commands(self.named + other.named)

    def __len__(self) -> int:
        return len(self.named)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.named)

    @property
    def line(self) -> str:
        """The command line as tmux reads it."""
        return " ; ".join(command for _, command in self.named)


class Replies:
    """The replies to the :class:`Commands` of one line by name: each command's output
    lines, None if it failed or did not run (as for a name the line does not hold);
    :attr:`errors` holds the failed ones' messages."""

    def __init__(self) -> None:
        self._lines: dict[str, list[bytes] | None] = {}
        self.errors: list[bytes] = []

    def add(self, name: str, ok: bool, lines: list[bytes]) -> None:
        """The reply of the command ``name`` came: ``ok`` or not, with ``lines``."""
        self._lines[name] = lines if ok else None
        if not ok:
            self.errors.extend(lines)

    def __getitem__(self, name: str) -> list[bytes] | None:
        return self._lines.get(name)

    def __len__(self) -> int:
        """How many replies came."""
        return len(self._lines)


#: variables tmux sets for each pane itself; a session's environment never overrides them
TMUX_OWNED = frozenset({"TERM", "TMUX", "TMUX_PANE", "COLUMNS", "LINES"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_assignments(env: Mapping[str, str]) -> str:
    """``env`` as POSIX shell assignments, one a line, for the environment file a
    session reads. Names that are not shell identifiers (e.g. exported bash functions)
    are skipped.

    >>> print(env_assignments({"A": "it's", "BASH_FUNC_f%%": "() { :; }"}), end="")
    A='it'"'"'s'
    """
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items() if _ENV_NAME.fullmatch(k))
