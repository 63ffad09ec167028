"""Terminal state as a browser sees it: byte streams rendered by ``@xterm/headless`` 5.5
(the engine of JupyterLab 4.6's terminal tab; tests/xterm/render.js), so a test compares
what a person and a program would get, not our own parser's idea of it.

``.ci/run`` installs it (``npm ci`` in tests/xterm); a test that needs it and finds it
missing fails with that instruction rather than skipping.
"""

from __future__ import annotations

import atexit
import base64
import json
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PROBE = Path(__file__).parent / "xterm"
#: what :func:`differences` compares, and what it reports only
COMPARED = (
    "lines",
    "styles",
    "cursor",
    "buffer",
    "modes",
    "cursorStyle",
    "cursorBlink",
    "mouse",
    "scrollRegion",
    "title",
)


def render(
    streams: Sequence[Sequence[bytes]],
    cols: int = 80,
    rows: int = 24,
    scrollback: int = 1000,
    styles: bool = True,
) -> list[dict[str, Any]]:
    """Each stream (its chunks written in order, each write finished before the next)
    rendered into a fresh terminal of ``cols`` x ``rows``: one state per stream; without
    ``styles`` every line's style is ``""`` (much faster for long histories)."""
    if not (PROBE / "node_modules" / "@xterm" / "headless").is_dir():
        raise AssertionError(f"@xterm/headless is missing: run `npm ci` in {PROBE}")
    spec = {
        "terminals": [
            {
                "cols": cols,
                "rows": rows,
                "scrollback": scrollback,
                "chunks": [base64.b64encode(c).decode() for c in chunks],
                "styles": styles,
            }
            for chunks in streams
        ]
    }
    return _RENDERER.render(spec)


class _Renderer:
    """One ``render.js`` for this process, started on first use (a render then
    costs no Node.js start: 0.09 CPU-s less each, and :func:`shows` renders once a
    second); it ends when this process does (its stdin closes). One render at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def render(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                proc = self._proc = subprocess.Popen(
                    ["node", str(PROBE / "render.js")],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(spec) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                line = ""
            if not line:
                self._proc = None
                proc.kill()
                raise AssertionError(f"render.js ended (exit code {proc.wait()})")
        answer = json.loads(line)
        assert "error" not in answer, answer["error"][-2000:]
        return list(answer["states"])

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_RENDERER = _Renderer()
atexit.register(_RENDERER.close)


def screen(state: dict[str, Any]) -> dict[str, Any]:
    """The part of a state a reconnect must give back exactly: the visible screen (the
    rows from the viewport down: history above it may hold more or fewer lines), its
    styles, the cursor, the active buffer, every mode, the cursor style, mouse
    protocol and encoding, scroll region and title."""
    top = state["buffer"]["baseY"]
    return {
        **{k: state[k] for k in COMPARED if k not in ("lines", "styles", "buffer")},
        "buffer": state["buffer"]["type"],
        # trailing blanks are invisible (and tmux pads its captures with them)
        "lines": [line.rstrip(" ") for line in state["lines"][top:]],
        "styles": state["styles"][top:],
    }


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> dict[str, Any]:
    """``{field: (expected, actual)}`` for every field of :func:`screen` that differs."""
    a, b = screen(expected), screen(actual)
    return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def shows(
    *texts: str,
    after: str | None = None,
    absent: str | None = None,
    cols: int = 80,
    rows: int = 24,
) -> Callable[[Any], bool]:
    """A check for ``TermClient.wait_for``: each of ``texts`` is on a line of the terminal
    (history included), in this order, line after line, as xterm.js renders what the
    client got, or only what it got after the first ``after``; and ``absent`` is on no
    line. Rendered about once a second. Not the raw stream: a TUI such as Claude Code's
    redraws only the cells that changed, so a word drawn where the last frame had the
    same letter in the same column arrives split by a cursor move."""
    last = [0.0]

    def check(client: Any) -> bool:
        got: str = client.text
        if after is not None:
            if after not in got:
                return False
            got = got[got.index(after) + len(after) :]
        if time.monotonic() - last[0] < 1:
            return False
        last[0] = time.monotonic()
        (state,) = render([[got.encode()]], cols, rows, styles=False)
        if absent is not None and any(absent in line for line in state["lines"]):
            return False
        lines = iter(state["lines"])
        return all(any(text in line for line in lines) for text in texts)

    return check
