"""JupyterLab's terminal tab as agents use it (real server, real headless Chromium with
clipboard permission), on both backends: keys reach the program, a paste into a
program that asked for bracketed paste arrives bracketed (in a fresh tab, after a
reload, after a server SIGKILL and start), a program's OSC 52 copy lands in the
browser clipboard (and not with the setting off; a read is never answered), and a
session's title labels its tab and heads its panel row, after a restart too.

The program under test is ``rawread.py`` (written by the fixture): it puts its
terminal in raw mode and appends every byte it reads to a file the test reads, so
what a key or a paste sent is known exactly, not read off the screen.

The server, browser and helpers are tests/test_ui.py's (this module gets a server
per backend). Screenshots go to ``tests/artifacts/ui/``; the docs embed copies kept in
``docs/ui/``.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_ui
from test_ui import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Lab,
    act,
    dismiss_dialogs,
    new_terminal,
    open_lab,
    row,
    shot,
    show_panel,
    type_in_terminal,
    typed_until,
    wait_notification,
    wait_text,
    watch_console,
)

from jupyter_agents.pytest_plugin import kill_backends, poll

jp_asyncio_loop = test_ui.jp_asyncio_loop
jp_server_cleanup = test_ui.jp_server_cleanup

pytestmark = [pytest.mark.ui, pytest.mark.timeout(240)]

#: raw mode; ``paste``: ask for bracketed paste; ``query``: ask for the clipboard
#: (OSC 52 read). Every byte read is appended to the file argv[1].
RAWREAD = r"""
import os, sys, termios, tty
out, modes = sys.argv[1], sys.argv[2:]
saved = termios.tcgetattr(0)
tty.setraw(0)
try:
    if "paste" in modes:
        os.write(1, b"\x1b[?2004h")
    if "query" in modes:
        os.write(1, b"\x1b]52;c;?\x07")
    os.write(1, b"RAW-READY\r\n")
    with open(out, "ab", buffering=0) as log:
        while True:
            data = os.read(0, 4096)
            log.write(data)
            os.write(1, b"GOT " + data.hex().encode() + b"\r\n")
finally:
    termios.tcsetattr(0, termios.TCSADRAIN, saved)
"""

#: an OSC 52 copy of "SPLIT-✓-7" in two output frames 0.5 s apart, ended by ST
SPLIT52 = r"""
import base64, sys, time
data = base64.b64encode("SPLIT-\u2713-7".encode()).decode()
sys.stdout.write("\x1b]52;c;" + data[:3])
sys.stdout.flush()
time.sleep(0.5)
sys.stdout.write(data[3:] + "\x1b\\")
sys.stdout.flush()
print("SENT-" + "OK")
"""

CLIPBOARD = "() => navigator.clipboard.readText()"
SET_CLIPBOARD = "(text) => navigator.clipboard.writeText(text)"

#: what a real paste does: a paste event on xterm's textarea with the text
PASTE = """(text) => {
  const term = [...document.querySelectorAll('.jp-Terminal')]
    .find(t => t.offsetParent !== null);
  const area = term.querySelector('.xterm-helper-textarea');
  area.focus();
  const data = new DataTransfer();
  data.setData('text/plain', text);
  area.dispatchEvent(new ClipboardEvent('paste',
    {clipboardData: data, bubbles: true, cancelable: true}));
}"""


@pytest.fixture(scope="module", params=["tmux", "broker"])
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    sync_api = test_ui.playwright()
    root = tmp_path_factory.mktemp(f"ui-terminal-{request.param}")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        lab = Lab(root, browser, backend=request.param)
        (root / "rawread.py").write_text(RAWREAD)
        (root / "split52.py").write_text(SPLIT52)
        try:
            lab.server.start()
            yield lab
        finally:
            lab.server.stop(signal.SIGKILL)
            kill_backends(lab.state_dir)
            browser.close()


@pytest.fixture
def page(lab: Lab, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = lab.context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.server.base)
    page = context.new_page()
    page.set_default_timeout(20000)
    watch_console(page)
    try:
        yield page
    finally:
        test_ui.close_pages(context, request.node.name)


def settings(lab: Lab, values: dict[str, Any] | None) -> None:
    """Write (None: remove) the extension's settings file; read when Lab loads."""
    path = lab.settings / "jupyter-agents" / "sessions.jupyterlab-settings"
    if values is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))


def current_session(lab: Lab, page: Any) -> dict[str, Any]:
    """The running session of the terminal tab shown."""
    name = poll(
        lambda: page.evaluate(
            "() => { const w = window.jupyterapp.shell.currentWidget;"
            " return w && w.content && w.content.session && w.content.session.name; }"
        ),
        what="a terminal tab shown",
    )
    return poll(
        lambda: next(
            (s for s in lab.sessions().values() if s["name"] == name and s["status"] == "running"),
            None,
        ),
        what=f"the session of terminal {name}",
    )


def start_rawread(lab: Lab, page: Any, out: Path, *modes: str) -> dict[str, Any]:
    """A new terminal tab whose shell runs rawread.py (``modes``), logging to ``out``."""
    new_terminal(page)
    page.wait_for_selector(".jp-Terminal .xterm-accessibility-tree")
    session = current_session(lab, page)
    typed_until(page, "echo SHELL-$((2*21))", r"SHELL-42")
    type_in_terminal(page, f"{sys.executable} {lab.root / 'rawread.py'} {out} {' '.join(modes)}\n")
    wait_text(page, r"RAW-READY")
    return session


def show_terminal_tab(page: Any, name: str) -> None:
    """Once JupyterLab has restored terminal ``name``'s tab (after a reload: a loaded
    machine can take a while), make it the current one."""
    poll(
        lambda: page.evaluate(
            """(name) => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
                 if (w.content && w.content.session && w.content.session.name === name) {
                   window.jupyterapp.shell.activateById(w.id); return true; } }
               return false; }""",
            name,
        ),
        timeout=60,
        what=f"terminal {name}'s tab restored",
    )


def received(out: Path) -> bytes:
    return out.read_bytes() if out.exists() else b""


def wait_received(out: Path, expect: bytes, since: int, timeout: float = 10) -> bytes:
    """The bytes the program read after offset ``since``, once they end with ``expect``."""

    def got() -> bytes | None:
        data = received(out)[since:]
        return data if data.endswith(expect) else None

    try:
        return poll(got, timeout, f"{expect!r} read by the program")  # type: ignore[no-any-return]
    except AssertionError:
        raise AssertionError(
            f"the program read {received(out)[since:]!r}, not ending with {expect!r}"
        ) from None


def kill(lab: Lab, session: dict[str, Any]) -> None:
    lab.server.request("DELETE", f"/api/agents/sessions/{session['id']}")


# -- keys --------------------------------------------------------------------------------


def test_keys_reach_the_program(lab: Lab, page: Any, tmp_path: Path) -> None:
    """What JupyterLab 4.6 sends for the keys agents use, read by
    the program itself: Enter CR, Shift+Enter LF, Alt+Enter ESC CR, Escape ESC,
    Ctrl-B/R/L/C their control bytes."""
    out = tmp_path / "keys.bin"
    open_lab(page, lab, reset=True)
    session = start_rawread(lab, page, out)
    area = page.locator(".jp-Terminal:visible .xterm-helper-textarea").first
    for key, expect in [
        ("Enter", b"\r"),
        ("Shift+Enter", b"\n"),
        ("Alt+Enter", b"\x1b\r"),
        ("Escape", b"\x1b"),
        ("Control+b", b"\x02"),
        ("Control+r", b"\x12"),
        ("Control+l", b"\x0c"),
        ("Control+c", b"\x03"),
    ]:
        since = len(received(out))
        area.focus()
        page.keyboard.press(key)
        assert wait_received(out, expect, since) == expect, key
    shot(page, f"keys-{lab.backend}")
    kill(lab, session)


# -- bracketed paste ---------------------------------------------------------------------


def test_bracketed_paste_survives_reload_and_restart(lab: Lab, page: Any, tmp_path: Path) -> None:
    """A program that asked for bracketed paste (``CSI ? 2004 h``) gets a two-line paste
    as ``ESC[200~L1 CR L2 ESC[201~``: in a fresh tab, after a page reload, and after the
    server is SIGKILLed and started again (the tab reconnects by itself, then a reload
    too). Without the bracket an agent would submit the first line on its own."""
    out = tmp_path / "paste.bin"
    bracketed = b"\x1b[200~L1\rL2\x1b[201~"
    open_lab(page, lab, reset=True)
    session = start_rawread(lab, page, out, "paste")

    def paste_arrives_bracketed(when: str) -> None:
        since = len(received(out))
        page.evaluate(PASTE, "L1\nL2")
        try:
            got = wait_received(out, b"L2\x1b[201~", since)
        except AssertionError:
            raise AssertionError(
                f"{when}: the paste arrived as {received(out)[since:]!r}, not bracketed"
            ) from None
        assert got == bracketed, when

    paste_arrives_bracketed("in a fresh tab")

    page.reload()
    open_lab(page, lab)
    show_terminal_tab(page, session["name"])
    wait_text(page, r"RAW-READY")
    paste_arrives_bracketed("after a reload")

    lab.restart(signal.SIGKILL)  # the backend keeps the program running
    # the tab reconnects by itself: a key reaches the program again
    deadline = time.monotonic() + 60
    while True:
        dismiss_dialogs(page)
        since = len(received(out))
        page.locator(".jp-Terminal:visible .xterm-helper-textarea").first.focus()
        page.keyboard.type("k")
        try:
            wait_received(out, b"k", since, timeout=3)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
    assert lab.sessions()[session["id"]]["status"] == "running"
    paste_arrives_bracketed("after a server restart (the tab reconnected)")

    page.reload()
    open_lab(page, lab)
    show_terminal_tab(page, session["name"])
    wait_text(page, r"RAW-READY")
    paste_arrives_bracketed("after a server restart and a reload")
    kill(lab, session)


# -- clipboard (OSC 52) ------------------------------------------------------------------


def test_osc52_copy_lands_in_the_clipboard_unless_turned_off(
    lab: Lab, page: Any, tmp_path: Path
) -> None:
    """A program's OSC 52 write (BEL- or ST-ended, also split across output frames)
    reaches the browser clipboard, and a notice says so; one made while the person
    works elsewhere (the panel's search box has the focus), or replayed by a reload,
    leaves the clipboard as it was; an OSC 52 read is never answered; with the setting
    ``clipboardFromPrograms`` off a write leaves the clipboard as it was."""
    open_lab(page, lab, reset=True)
    new_terminal(page)
    page.wait_for_selector(".jp-Terminal .xterm-accessibility-tree")
    session = current_session(lab, page)
    page.evaluate(SET_CLIPBOARD, "BEFORE")
    typed_until(
        page,
        "printf '\\033]52;c;%s\\a' \"$(printf COPIED-%s 42 | base64)\"; echo DONE-$((1+1))",
        r"DONE-2",
    )
    poll(lambda: page.evaluate(CLIPBOARD) == "COPIED-42", what="the copy in the clipboard")
    wait_notification(page, "copied 9 characters")
    # split across frames (0.5 s apart), ended by ST
    typed_until(page, f"{sys.executable} {lab.root / 'split52.py'}", r"SENT-OK")
    poll(lambda: page.evaluate(CLIPBOARD) == "SPLIT-✓-7", what="the split copy")
    # copied while the person types elsewhere: not honoured
    type_in_terminal(
        page, "sleep 2; printf '\\033]52;c;%s\\a' \"$(printf AWAY | base64)\"; echo AWAY-$((3+3))\n"
    )
    show_panel(page).locator(".jp-AgentsSearch-input").focus()
    wait_text(page, r"AWAY-6")
    page.wait_for_timeout(1000)
    assert page.evaluate(CLIPBOARD) == "SPLIT-✓-7"
    # a reload replays the screen, not the copies
    page.evaluate(SET_CLIPBOARD, "AFTER")
    page.reload()
    page.wait_for_selector(".jp-Terminal .xterm-accessibility-tree")
    wait_text(page, r"SENT-OK")
    page.wait_for_timeout(1000)
    assert page.evaluate(CLIPBOARD) == "AFTER"
    kill(lab, session)

    # a read is not answered: nothing reaches the program
    out = tmp_path / "query.bin"
    session = start_rawread(lab, page, out, "query")
    page.wait_for_timeout(1500)
    assert received(out) == b""
    assert page.evaluate(CLIPBOARD) == "AFTER"
    kill(lab, session)

    settings(lab, {"clipboardFromPrograms": False})
    try:
        open_lab(page, lab, reset=True)
        new_terminal(page)
        page.wait_for_selector(".jp-Terminal .xterm-accessibility-tree")
        session = current_session(lab, page)
        typed_until(
            page,
            "printf '\\033]52;c;%s\\a' \"$(printf IGNORED | base64)\"; echo DONE-$((2+2))",
            r"DONE-4",
        )
        page.wait_for_timeout(1500)
        assert page.evaluate(CLIPBOARD) == "AFTER"
        kill(lab, session)
    finally:
        settings(lab, None)


# -- titles ------------------------------------------------------------------------------

TAB = """(name) => {
  const w = [...window.jupyterapp.shell.widgets('main')]
    .find(w => w.content && w.content.session && w.content.session.name === name);
  if (!w) { return null; }
  const tab = document.querySelector(`.lm-TabBar-tab[data-id='${w.id}'] .lm-TabBar-tabLabel`);
  return {id: w.id, label: w.title.label, shown: tab ? tab.textContent : null};
}"""


def tab_label(page: Any, name: str) -> str | None:
    """What the terminal tab of ``name`` shows (checked against its widget's title)."""
    tab = page.evaluate(TAB, name)
    if not tab:
        return None
    assert tab["shown"] in (None, tab["label"])
    return tab["label"]  # type: ignore[no-any-return]


def wait_label(page: Any, name: str, label: str, timeout: float = 20) -> None:
    try:
        poll(lambda: tab_label(page, name) == label, timeout, f"tab label {label!r}")
    except AssertionError:
        raise AssertionError(
            f"the tab of {name} says {tab_label(page, name)!r}, not {label!r}"
        ) from None


def heading(page: Any, session_id: str) -> str:
    return str(row(page, session_id).locator(".jp-AgentsPanel-name").inner_text())


def answer_rename(page: Any, title: str) -> None:
    dialog = page.locator(".jp-Dialog")
    dialog.locator("input").fill(title)
    dialog.locator("button.jp-mod-accept").click()
    dialog.wait_for(state="detached")


def rename_from_menu(page: Any, name: str, title: str, on: str = "tab") -> None:
    """Rename Session… from the context menu of the tab of terminal ``name`` (``on``
    "tab") or of the terminal itself (``on`` "terminal")."""
    tab_id = page.evaluate(TAB, name)["id"]
    target = (
        page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab[data-id='{tab_id}']")
        if on == "tab"
        else page.locator(f"#{tab_id} .jp-Terminal")
    )
    target.click(button="right")
    page.locator(".lm-Menu-item", has_text="Rename Session…").click()
    answer_rename(page, title)


def test_renamed_session_keeps_tab_label_and_panel_title_after_restart(lab: Lab, page: Any) -> None:
    """The program's title (OSC 0) heads the panel row; a person's title, given from the
    panel row, labels the tab and heads the row, wins over the program's next title, is
    matched by the filter and the search, and is still both after a server SIGKILL,
    restart and reload (stock Lab shows "Terminal N" then); renamed again from the tab's
    context menu, and cleared from the terminal's: the program's title comes back."""
    open_lab(page, lab, reset=True)
    panel = show_panel(page)
    new_terminal(page)
    page.wait_for_selector(".jp-Terminal .xterm-accessibility-tree")
    session = current_session(lab, page)
    sid, name = session["id"], session["name"]
    typed_until(page, "printf '\\033]0;%s\\a' PROGRAM-$((6*7)); echo T1-OK", r"T1-OK")
    wait_label(page, name, "PROGRAM-42")
    poll(lambda: heading(page, sid) == "PROGRAM-42", 30, "the program's title in the panel")
    assert lab.sessions()[sid]["title_source"] == "program"

    # a person's title, from the panel row
    row(page, sid).hover()
    act(page, sid, "rename")
    answer_rename(page, "Fix the upload bug")
    poll(
        lambda: (
            (s := lab.sessions()[sid])["title"] == "Fix the upload bug"
            and s["title_source"] == "user"
        ),
        what="the title in the store",
    )
    wait_label(page, name, "Fix the upload bug")
    poll(lambda: heading(page, sid) == "Fix the upload bug", what="the title heading the row")
    # the program's next title does not replace it (the server sees it: an event)
    typed_until(page, "printf '\\033]0;%s\\a' LATER-$((1+1)); echo T2-OK", r"T2-OK")
    page.wait_for_timeout(2000)
    assert tab_label(page, name) == "Fix the upload bug"
    assert heading(page, sid) == "Fix the upload bug"

    # the filter and the search match it
    live = panel.locator(".jp-AgentsPanel-group[open] .jp-AgentsPanel-row")
    panel.locator(".jp-AgentsPanel-filter").fill("upload bug")
    poll(lambda: live.count() == 1, what="one row left by the filter")
    assert live.first.get_attribute("data-session-id") == sid
    panel.locator(".jp-AgentsPanel-filter").fill("")
    box = panel.locator(".jp-AgentsSearch-input")
    box.fill("UPLOAD")
    box.press("Enter")
    hit = panel.locator(f".jp-AgentsSearch-hit[data-source='title'][data-session-id='{sid}']")
    hit.wait_for()
    assert hit.locator("mark").inner_text() == "upload"

    # more titled sessions, for the screenshot: an agent named by a person, a shell
    # named by its program
    agent = lab.server.request("POST", "/api/agents/sessions", {"kind": "claude"})[1]
    renamed = lab.server.request(
        "PATCH", f"/api/agents/sessions/{agent['id']}", {"title": "Refactor the parser"}
    )
    assert renamed[0] == 200, renamed
    other = lab.server.request("POST", "/api/agents/sessions", {"kind": "shell"})[1]
    client = lab.server.ws(other["name"])
    try:
        client.stdin("printf '\\033]2;%s\\a' 'pytest -x tests/'\r")
        poll(lambda: heading(page, other["id"]) == "pytest -x tests/", 30, "a program's title")
    finally:
        client.close()
    box.fill("")
    box.press("Enter")
    page.mouse.move(0, 0)
    # titled rows wrap: nothing sticks out of the sidebar
    assert panel.evaluate("(n) => n.scrollWidth <= n.clientWidth")
    path = shot(page, f"titles-panel-{lab.backend}")
    print(f"\nscreenshot: {path}")

    # a server SIGKILL and start, a reload: the tab and the row keep the title
    lab.restart(signal.SIGKILL)
    page.reload()
    open_lab(page, lab)
    show_panel(page)
    wait_label(page, name, "Fix the upload bug", timeout=30)
    poll(lambda: heading(page, sid) == "Fix the upload bug", what="the title after the restart")

    # renamed from the tab's context menu; cleared from the terminal's: the program's
    # title again
    rename_from_menu(page, name, "Renamed from the tab")
    wait_label(page, name, "Renamed from the tab")
    assert lab.sessions()[sid]["title"] == "Renamed from the tab"
    poll(lambda: heading(page, sid) == "Renamed from the tab", what="the row after the tab")
    rename_from_menu(page, name, "", on="terminal")
    poll(lambda: lab.sessions()[sid]["title_source"] == "program", what="the title cleared")
    assert lab.sessions()[sid]["title"] == "LATER-2"
    wait_label(page, name, "LATER-2")
    poll(lambda: heading(page, sid) == "LATER-2", what="the program's title in the row")
    for s in (session, agent, other):
        kill(lab, s)


def xterm_size(page: Any) -> str:
    """The visible terminal tab's xterm.js size, ``COLSxROWS``."""
    return str(
        page.evaluate(
            "() => { const w = window.jupyterapp.shell.currentWidget;"
            " const t = w && w.content && w.content._term;"
            " return t ? `${t.cols}x${t.rows}` : ''; }"
        )
    )


def test_a_tab_sized_by_another_window_shows_that_size_and_says_so(lab: Lab, page: Any) -> None:
    """A desktop types into a terminal; a phone (the same user) opens it to look: the
    terminal keeps the desktop's size, and the phone's tab shows it at that size,
    scaled down to fit, with a bar saying why (before, its own narrow width rewrapped
    every line). Typing on the phone gives the phone its own fit and the bar moves to
    the desktop."""
    page.set_viewport_size({"width": 1400, "height": 900})
    open_lab(page, lab, reset=True)
    new_terminal(page)
    typed_until(page, "echo DESK-$((6*7))", r"DESK-42")
    name = str(page.evaluate("() => window.jupyterapp.shell.currentWidget.content.session.name"))
    desk = xterm_size(page)
    phone = page.context.new_page()
    try:
        phone.set_viewport_size({"width": 360, "height": 740})
        open_lab(phone, lab, reset=True)
        phone.evaluate(  # the panel's Open: on a phone, the terminal alone
            "(name) => window.jupyterapp.commands.execute('jupyter-agents:open', {name})", name
        )
        bar = phone.locator(".jp-AgentsSized")
        bar.wait_for()
        cols, rows = desk.split("x")
        assert bar.inner_text() == (
            f"Shown at {cols}\N{MULTIPLICATION SIGN}{rows}, the size of the window that typed "
            "last. "
            "Type here to fit it to this tab."
        )
        poll(lambda: xterm_size(phone) == desk, what=f"the phone at the desk's {desk}")
        scale = float(
            phone.locator(".jp-Terminal[data-agents-scale]").get_attribute("data-agents-scale")
        )
        assert 0 < scale < 1, scale  # scaled down to fit the phone
        box = bar.bounding_box()
        assert box and box["height"] > 10 and box["width"] > 200, box  # it shows
        shot(phone, "sized-by-another-window")
        wait_text(phone, r"DESK-42")
        assert page.locator(".jp-AgentsSized").count() == 0  # the desk is the typist
        # the phone types: its own fit applies, and now the desk is told
        typed_until(phone, "echo PHONE-$((7*6))", r"PHONE-42")
        poll(lambda: bar.count() == 0, what="the phone's bar gone")
        poll(lambda: xterm_size(phone) != desk, what="the phone's own fit")
        typed_until(phone, "echo $(stty size | tr ' ' x)-SIZE", r"\d+x\d+-SIZE")
        rows_cols = re.findall(r"(\d+x\d+)-SIZE", test_ui.terminal_text(phone))[-1]
        assert rows_cols == "x".join(xterm_size(phone).split("x")[::-1])  # the phone's
        shown = xterm_size(phone).replace("x", "\N{MULTIPLICATION SIGN}")
        page.locator(".jp-AgentsSized", has_text=f"Shown at {shown},").wait_for()
    finally:
        phone.close()
