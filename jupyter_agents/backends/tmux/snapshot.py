"""A snapshot of a tmux pane, pure: what is asked of tmux (:class:`SnapshotRequest`, the
commands of one line), the reply read into named fields (:class:`Snapshot`: the pane's
state, its history, its screens) and the replay composed from them
(:func:`compose_replay`).

The pane's state is :class:`PaneState`, whose fields are tmux format variables of the
same names: a field added there (with its type and default) is asked for and read with
no other change; :func:`compose_replay` decides what it restores.
"""

from __future__ import annotations

import dataclasses
import re

from jupyter_agents.backends.tmux.formats import Commands, Replies, format_of, parse_reply
from jupyter_agents.terminal.render import PLAIN, sgr
from jupyter_agents.terminal.state import Followed
from jupyter_agents.terminal.vt import TerminalModes


@dataclasses.dataclass(frozen=True)
class PaneState:
    """The pane's state a replay needs besides its text, each field the tmux format
    variable of its name (:func:`~.formats.format_of`); a field whose value may hold
    spaces (a title) goes last (:func:`~.formats.parse_format`)."""

    history_size: int = 0
    alternate_on: bool = False
    cursor_x: int = 0
    cursor_y: int = 0
    cursor_flag: bool = False
    keypad_cursor_flag: bool = False
    keypad_flag: bool = False
    mouse_standard_flag: bool = False
    mouse_button_flag: bool = False
    mouse_all_flag: bool = False
    mouse_sgr_flag: bool = False
    insert_flag: bool = False
    wrap_flag: bool = False
    origin_flag: bool = False
    scroll_region_upper: int = 0
    scroll_region_lower: int = 0
    pane_height: int = 0
    pane_width: int = 0


@dataclasses.dataclass(frozen=True)
class SnapshotRequest:
    """A snapshot of ``target``'s pane: its state, its history older than ``recent``
    lines (plain text), the rest of its history and its screen (with escapes), and the
    normal screen under an alternate one (that capture fails when there is none: last
    on the line, it ends nothing). ``buffers``: the two captures of history go into
    these tmux buffers instead, with empty replies; no buffer for the older history
    (None: it is known, :mod:`.history`) leaves it uncaptured.

    >>> SnapshotRequest("=s:", 5, ("a", "b")).commands().line.split(" ; ")[1:3]
    ['capture-pane -b a -J -S - -E -6 -t =s:', 'capture-pane -b b -e -J -S -5 -E -1 -t =s:']
    >>> SnapshotRequest("=s:", 5, (None, "b")).commands().names
    ('state', 'recent', 'screen', 'saved')
    """

    target: str
    recent: int
    buffers: tuple[str | None, str] | None = None

    def commands(self) -> Commands:
        """The commands, named as :meth:`Snapshot.read` reads their replies."""
        old_into, recent_into = self.buffers or ("", "")
        target, recent = self.target, self.recent
        old = (
            Commands.of(old=f"capture-pane {_into(old_into)} -J -S - -E {-recent - 1} -t {target}")
            if old_into is not None
            else Commands(())
        )
        return (
            Commands.of(state=f"display-message -p -t {target} '{format_of(PaneState)}'")
            + old
            + Commands.of(
                recent=f"capture-pane {_into(recent_into)} -e -J -S {-recent} -E -1 -t {target}",
                screen=f"capture-pane -p -e -J -S 0 -E - -t {target}",
                saved=f"capture-pane -a -p -e -J -t {target}",
            )
        )


def _into(buffer: str) -> str:
    """Where a capture goes: tmux buffer ``buffer``, or the reply (none given)."""
    return f"-b {buffer}" if buffer else "-p"


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A pane as a :class:`SnapshotRequest` found it: its ``state``, its history older
    than ``recent`` lines (``old_history``, plain text), the rest of its history
    (``recent_history``) and its ``screen`` (with escapes), and the normal screen under
    an alternate one (``saved_screen``; None: there is none)."""

    state: PaneState
    recent: int
    old_history: list[str]
    recent_history: list[str]
    screen: list[str]
    saved_screen: list[str] | None

    @classmethod
    def read(cls, request: SnapshotRequest, replies: Replies) -> Snapshot | None:
        """The replies to ``request``'s commands; None without the pane's state (the
        session vanished meanwhile).

        >>> state = " ".join(["9"] + ["0"] * (len(dataclasses.fields(PaneState)) - 1))
        >>> replies = Replies()
        >>> for name, lines in ("state", [state]), ("old", ["old"]), ("recent", ["new"]):
        ...     replies.add(name, True, [line.encode() for line in lines])
        >>> Snapshot.read(SnapshotRequest("=s:", 5), replies).history
        ['old', 'new']
        >>> Snapshot.read(SnapshotRequest("=s:", 5), Replies()) is None
        True
        """
        state = parse_reply(PaneState, replies["state"])
        if state is None:
            return None
        old, recent, screen = (decode_lines(replies[n]) or [] for n in ("old", "recent", "screen"))
        saved = decode_lines(replies["saved"]) or None  # the capture failed: no alternate one
        return cls(state, request.recent, old, recent, screen, saved)

    def with_history(self, old: str, recent: str) -> Snapshot:
        """This snapshot with the history captured into buffers (their texts)."""
        old_lines, recent_lines = (text.removesuffix("\n").split("\n") for text in (old, recent))
        return dataclasses.replace(self, old_history=old_lines, recent_history=recent_lines)

    @property
    def history(self) -> list[str]:
        """Every line of history, oldest first."""
        # the plain capture of older history holds the top line again when there is none
        old = self.old_history if self.state.history_size > self.recent else []
        return old + self.recent_history

    def replay(self, with_history: bool = True, followed: Followed | None = None) -> str:
        """The replay text (:func:`compose_replay`); ``with_history=False``: the
        screen only; ``followed``: the modes the program set, as far as followed."""
        history = self.history if with_history else []
        return compose_replay(self.state, history, self.screen, self.saved_screen, followed)


def decode_lines(lines: list[bytes] | None) -> list[str] | None:
    """The text of a reply's lines (None stays None), decoded in one piece.

    >>> decode_lines([b"a", b"\\xff"]), decode_lines([]), decode_lines(None)
    (['a', '\\ufffd'], [], None)
    """
    if lines is None:
        return None
    return b"\n".join(lines).decode("utf-8", "replace").split("\n") if lines else []


def pane_modes(state: PaneState, followed: Followed | None) -> TerminalModes:
    """The modes a replay sets. What the program's output set, followed from its
    transcript, is what a tab that showed all of it has (our viewers get the raw bytes,
    and xterm.js reads them, not tmux): when every byte was followed (``exact``) that is
    the answer. Otherwise tmux's own flags say what they can (cursor keys, keypad, mouse
    tracking and SGR encoding, insert, wraparound, origin, cursor visibility) and the
    followed modes the rest: bracketed paste, focus reporting, the cursor's shape, the
    title, which tmux keeps no format for. The scroll region is always tmux's (the
    cursor is placed within it).

    >>> state = PaneState(cursor_flag=True, wrap_flag=True, mouse_standard_flag=True)
    >>> pane_modes(state, None).mouse, pane_modes(state, None).private[2004]
    (1000, False)
    """
    followed_modes = followed.modes if followed is not None else TerminalModes()
    region = (state.scroll_region_upper + 1, state.scroll_region_lower + 1)
    whole = region == (1, state.pane_height) or region[1] <= region[0]
    if followed is not None and followed.exact:
        return dataclasses.replace(
            followed_modes,
            private=dict(followed_modes.private),
            scroll_region=None if whole else region,
        )
    private = dict(followed_modes.private)
    private |= {1: state.keypad_cursor_flag, 6: state.origin_flag, 7: state.wrap_flag}
    private |= {25: state.cursor_flag}
    private.setdefault(2004, False)
    mouse = (
        1003
        if state.mouse_all_flag
        else 1002
        if state.mouse_button_flag
        else 1000
        if state.mouse_standard_flag
        else None
    )
    return dataclasses.replace(
        followed_modes,
        private=private,
        mouse=mouse,
        mouse_encoding=1006 if state.mouse_sgr_flag else None,
        insert=state.insert_flag,
        keypad=state.keypad_flag,
        scroll_region=None if whole else region,
    )


_SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def unpadded(line: str) -> str:
    r"""A captured line without the blanks tmux pads it with (``capture-pane -J`` keeps
    trailing spaces), where they are plain: cells a terminal shows as empty, not spaces
    with a colour.

    >>> unpadded("ok   "), unpadded("\x1b[41mred   "), unpadded("\x1b[41mred\x1b[49m   ")
    ('ok', '\x1b[41mred   ', '\x1b[41mred\x1b[49m')
    """
    stripped = line.rstrip(" ")
    if len(stripped) == len(line):
        return line
    style = PLAIN
    for m in _SGR.finditer(stripped):
        style = sgr(style, m[1])
    return stripped if style == PLAIN else line


def carried(carry: str, line: str) -> str:
    r"""The colour sequences in force after ``line`` (those of ``carry`` and the line's,
    from its last full reset on): what the next captured line starts in.

    >>> carried("", "\x1b[31mred \x1b[1mbold"), carried("\x1b[31m", "x\x1b[0;32my\x1b[4mz")
    ('\x1b[31m\x1b[1m', '\x1b[0;32m\x1b[4m')
    """
    for m in _SGR.finditer(line):
        params = m[1]
        carry = m[0] if params in ("", "0") or params.startswith("0;") else carry + m[0]
    return "" if carry in ("\x1b[m", "\x1b[0m") else carry


def compose_replay(
    state: PaneState,
    history: list[str],
    screen: list[str],
    saved_screen: list[str] | None,
    followed: Followed | None = None,
) -> str:
    """Build the replay text from a snapshot's pieces (see :meth:`Stream.snapshot`).

    ``history`` and ``screen`` are captured lines (with escapes); ``saved_screen`` is
    the normal screen when a full-screen program has the alternate screen active
    (``history`` empty: the screen only); then every mode (:func:`pane_modes`) and the
    cursor. The result starts with a full reset, so it can be written onto a terminal
    that already shows an older copy.
    """

    def lines(block: list[str]) -> str:
        # tmux writes a line's colours where they change from the cell before, which may
        # be on the line above: each line starts with the colours the one above ended in
        out, carry = [], ""
        for line in block:
            out.append(carry + unpadded(line))
            carry = carried(carry, line)
        return "\x1b[0m\r\n".join(out) + "\x1b[0m"

    s = state
    out = ["\x1bc\x1b[3J"]
    if s.history_size and history:
        out.append(lines(history) + "\r\n")
    if s.alternate_on and saved_screen is not None:
        out.append(lines(saved_screen))
        out.append("\x1b[?1049h\x1b[H\x1b[2J")
    out.append(lines(screen))
    modes = pane_modes(state, followed)
    out.append(modes.sequences().decode("utf-8", "replace"))
    out.append(modes.layout((s.cursor_x, s.cursor_y)).decode())
    return "".join(out)
