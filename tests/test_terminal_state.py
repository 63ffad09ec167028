"""A reconnected tab is the same terminal (issue 28): rendered with @xterm/headless (the
engine of JupyterLab's terminal tab), a tab that watched a program from its start and
tabs that connect later (a page reload: a fresh terminal; a server restart: Lab writes
the replay onto the screen it has) show the same screen, colours, cursor, buffer, every
mode in ``terminal.modes``, cursor visibility and style, mouse protocol and encoding,
scroll region and title, on both backends."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest
from test_real_cli import _MISSING as REAL_CLAUDE_MISSING
from test_real_cli import _SCRUB as SCRUB
from test_real_cli import offline_home
from xterm_probe import differences, render

from jupyter_agents.pytest_plugin import ServerProcess, TermClient
from jupyter_agents.terminal.vt import PRIVATE_MODES, TerminalModes

both_backends = pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)

COLS, ROWS = 80, 24

#: a program that sets every mode that changes what a key, a paste or output does,
#: then draws inside a scroll region and waits (printf's escapes, so sh can run it)
EVERY_MODE = r"""
printf '\033]0;agent: fixing the tests\007'
printf '\033[?2004h\033[?1004h\033[?1002h\033[?1006h'
printf '\033[?1h\033=\033[4h\033[?7l\033[5 q\033[?25l'
printf '\033[3;20r\033[3;1H\033[32mgreen\033[0m in the region\r\n'
printf 'MODES SET\r\n'
sleep 1.5
FLOOD
printf 'ALL DONE\r\n'
exec sleep 600
"""
#: the test server's transcripts keep 256 KiB (in 64 KiB segments: 320 KiB at most)
#: and its tmux panes 2,000 lines of history (142 KB of the flood's lines)
TRANSCRIPT_MAX, HISTORY_LIMIT = 256 * 1024, 2000
#: output enough to push the bytes that set the modes out of every replay, by backend:
#: the transcript and the pane's history (tmux) or the broker's raw replay (0.5-1 MB,
#: broker/replay.py); a refresh of the server after the modes were set (as a TUI sets
#: them at its start)
FLOOD_BYTES = {"tmux": 600_000, "broker": 1_200_000}
FLOOD = "head -c {} /dev/zero | tr '\\0' x | fold -w 70 | sed 's/$/\\r/'"


def stdout(client: TermClient, since: int = 0) -> list[bytes]:
    """The output frames a client got (from message ``since`` on), as bytes."""
    return [m[1].encode() for m in client.messages[since:] if m[0] == "stdout"]


def settle(*clients: TermClient) -> None:
    """Receive until none of ``clients`` gets anything for a second (output that comes
    while one is drained reaches the others too: they are drained again)."""
    while True:
        before = [len(c.messages) for c in clients]
        for client in clients:
            client.drain(quiet=1.0)
        if [len(c.messages) for c in clients] == before:
            return


def same(original: dict, replayed: dict, flood: bool = False, what: str = "") -> None:
    """``replayed`` shows what ``original`` does. After a flood, the broker's raw replay
    cannot redraw rows outside the scroll region that nothing repainted since the kept
    bytes began (broker/replay.py): those two rows are left out there."""
    diff = differences(original, replayed)
    if flood:
        region = slice(2, 20)  # the program's scroll region, rows 3 to 20
        for key in ("lines", "styles"):
            if key in diff and diff[key][0][region] == diff[key][1][region]:
                del diff[key]
    if "lines" in diff:  # say which rows, compactly
        rows = [
            (i, a, b)
            for i, (a, b) in enumerate(zip(diff["lines"][0], diff["lines"][1], strict=False))
            if a != b
        ]
        diff["lines"] = (len(diff["lines"][0]), len(diff["lines"][1]), rows[:6])  # type: ignore[assignment]
    if "styles" in diff:
        a, b = diff["styles"]
        diff["styles"] = [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y][
            :4
        ]  # type: ignore[assignment]
    assert diff == {}, what + "\n" + "\n".join(f"{k}: {v}" for k, v in diff.items())


def start_program(server: ServerProcess, tmp_path: Path, script: str) -> tuple[str, TermClient]:
    """A terminal whose first tab watches ``script`` run from its first byte on."""
    (tmp_path / "prog.sh").write_text(script)
    status, model = server.request("POST", "/api/terminals", {"cwd": str(tmp_path)})
    assert status == 200, model
    name = model["name"]
    watcher = server.ws(name)
    watcher.send("set_size", ROWS, COLS, 600, 800)
    watcher.wait_for("bash-5.2#")
    watcher.stdin("sh prog.sh\r")
    return name, watcher


def reconnects_the_same(
    server: ServerProcess,
    name: str,
    watcher: TermClient,
    shown: str,
    flood: bool = False,
    still: bool = True,
) -> dict:
    """A tab opened now (a page reload) and a tab reconnecting after a SIGKILL restart
    (the replay written onto the screen it had) show what ``watcher``, which watched
    from the start, shows (``shown``: text on the screen by then); its state. A program
    that is not ``still`` may redraw while no server runs (the restart resizes its
    terminal): the reconnected tab must then show what a tab opened after the restart
    shows."""
    settle(watcher)
    reload = server.ws(name)  # a page reload: a fresh terminal gets the replay
    reload.wait_for(shown)
    settle(reload, watcher)
    if flood:  # the replay no longer holds the bytes that set the modes
        assert b"MODES SET" not in b"".join(stdout(reload))
    original, reloaded = render([stdout(watcher), stdout(reload)], COLS, ROWS)
    same(original, reloaded, flood, "after a reload")

    server.stop(signal.SIGKILL)
    server.start()
    again = server.ws(name)  # Lab reconnects: the replay lands on the screen it had
    again.wait_for(shown)
    fresh = server.ws(name)
    fresh.wait_for(shown)
    settle(again, fresh)
    restarted, opened = render([stdout(watcher) + stdout(again), stdout(fresh)], COLS, ROWS)
    same(original if still else opened, restarted, flood, "after a restart")
    return original


@both_backends
@pytest.mark.parametrize("flood", [False, True], ids=["modes", "modes-then-flood"])
def test_a_reconnected_tab_has_every_mode_of_the_program(
    agents_server, agents_backend, tmp_path, flood
):
    server = agents_server(
        args=[
            f"--AgentsApp.transcript_max_bytes={TRANSCRIPT_MAX}",
            f"--TmuxBackend.history_limit={HISTORY_LIMIT}",
            "--AgentsApp.refresh_interval=0.5",
        ]
    )
    script = EVERY_MODE.replace("FLOOD", FLOOD.format(FLOOD_BYTES[agents_backend]) if flood else "")
    name, watcher = start_program(server, tmp_path, script)
    watcher.wait_for("ALL DONE", timeout=60)
    original = reconnects_the_same(server, name, watcher, "ALL DONE", flood)
    assert original["modes"]["bracketedPasteMode"] and original["title"]  # the program's


@both_backends
def test_a_reconnected_tab_has_vim_as_it_was(agents_server, tmp_path):
    # vim: the alternate screen, mouse (mouse=a), bracketed paste, cursor keys, a scroll
    # region while it scrolls, and a file scrolled to its middle
    server = agents_server()
    (tmp_path / "notes.txt").write_text("".join(f"line {i} of the notes\n" for i in range(200)))
    script = "exec vim -u NONE -N -i NONE -c 'set mouse=a nu' -c 'normal 120Gzz' notes.txt\n"
    name, watcher = start_program(server, tmp_path, script)
    watcher.wait_for("line 120 of the notes", timeout=30)
    original = reconnects_the_same(server, name, watcher, "line 120 of the notes")
    assert original["buffer"]["type"] == "alternate"
    assert original["modes"]["mouseTrackingMode"] != "none"


#: every sequence that sets something TerminalModes follows, and some that reset it
SETTERS = [
    *(
        b"\x1b[?%d%s" % (m, hl)
        for m in PRIVATE_MODES
        if m not in (1049, 1047, 47)
        for hl in (b"h", b"l")
    ),
    b"\x1b[?1000;1006h",
    b"\x1b[?12h",
    b"\x1b[?12l",
    b"\x1b[3;20;7r",
    b"\x1b[38;5;196mred\x1b[0m\x1b[5;1H\x1b[K",
    b"\x1b[?2004;1004l",
    b"\x1b[4h",
    b"\x1b[4l",
    b"\x1b=",
    b"\x1b>",
    *(b"\x1b[%d q" % n for n in range(7)),
    b"\x1b[ q",
    b"\x1b[3;20r",
    b"\x1b[r",
    b"\x1b[5;9r",
    b"\x1b]0;first title\x07",
    b"\x1b]2;second \xc3\xa9\x1b\\",
    b"\x1bc",
    b"\x1b[!p",
]


def test_terminal_modes_set_what_the_program_set_as_xterm_sees_it():
    # 300 random programs: each a stream of settings and text; a fresh terminal given
    # only TerminalModes' sequences (a reload), and the program's own terminal given
    # them after a reset (a reconnect), must end in the same modes
    rng = random.Random(28)
    streams, replays, reconnects = [], [], []
    for _ in range(300):
        chunks = [rng.choice(SETTERS) + b"text\r\n" for _ in range(rng.randrange(1, 25))]
        modes = TerminalModes()
        for chunk in chunks:
            modes.feed(chunk)
        streams.append(chunks)
        replays.append([b"\x1bc" + modes.sequences() + modes.layout((0, 5))])
        reconnects.append([*chunks, *replays[-1]])
    states = render(streams + replays + reconnects, COLS, ROWS)
    keys = ("modes", "cursorStyle", "cursorBlink", "mouse", "scrollRegion", "title")

    def seen(state: dict) -> dict:
        return {k: state[k] for k in keys} | {"hidden": state["cursor"]["hidden"]}

    for i, original in enumerate(states[:300]):
        assert seen(states[300 + i]) == seen(original), (streams[i], replays[i])
        assert seen(states[600 + i]) == seen(original), (streams[i], replays[i])


@pytest.mark.realcli
@pytest.mark.timeout(300)
@pytest.mark.skipif(REAL_CLAUDE_MISSING is not None, reason=REAL_CLAUDE_MISSING or "")
@both_backends
def test_a_reconnected_tab_has_the_real_claude_code_tui_as_it_was(
    agents_server, tmp_path, monkeypatch
):
    # the real CLI offline (docs/development.md): its TUI at the prompt, after a turn
    for name in SCRUB:
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "proj"
    project.mkdir()
    env = offline_home(tmp_path, project)
    server = agents_server(env=env)
    status, agent = server.request(
        "POST", "/api/agents/sessions", {"kind": "claude", "cwd": str(project)}
    )
    assert status == 201, agent
    watcher = server.ws(agent["name"])
    watcher.send("set_size", ROWS, COLS, 600, 800)
    watcher.wait_for("\u276f", timeout=90)  # its prompt sign
    watcher.stdin("say hello")
    time.sleep(1)
    watcher.stdin("\r")
    watcher.wait_for("say hello", timeout=60)
    time.sleep(3)  # the failed turn (no key) settles
    original = reconnects_the_same(server, agent["name"], watcher, "\u276f", still=False)
    assert original["modes"]["bracketedPasteMode"]  # Claude Code asks for it
