"""The OSC 52 parser of the JupyterLab extension (``labextension/src/osc52.ts``), run
in node as the build compiled it (``labextension/lib/osc52.js``): frames in, copied
texts out. The browser half (a program's copy landing in Chromium's clipboard, the
setting that turns it off) is ``tests/test_ui_terminal.py``.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PARSER = Path(__file__).parent.parent / "labextension" / "lib" / "osc52.js"

#: feeds each case's frames to a new parser (``max``: its size bound) and prints
#: what each case copied, and the parser's held data after the last frame
RUNNER = r"""
const fs = require('fs');
const source = fs.readFileSync(process.argv[1], 'utf8');
import('data:text/javascript;base64,' + Buffer.from(source).toString('base64')).then(m => {
  const cases = JSON.parse(fs.readFileSync(0, 'utf8'));
  const out = cases.map(({ frames, max }) => {
    const parser = max ? new m.Osc52Parser(max) : new m.Osc52Parser();
    const copied = frames.flatMap(f => parser.feed(f));
    return { copied, held: parser._data.join('').length, max: m.MAX_OSC52 };
  });
  process.stdout.write(JSON.stringify(out));
});
"""

ESC, BEL, ST = "\x1b", "\x07", "\x1b\\"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def osc52(text: str, end: str = BEL, selection: str = "c") -> str:
    return f"{ESC}]52;{selection};{b64(text)}{end}"


def run(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if shutil.which("node") is None:
        pytest.skip("needs node")
    if not PARSER.exists():
        pytest.skip("the labextension is not built (cd labextension && npm run build)")
    out = subprocess.run(
        ["node", "-e", RUNNER, str(PARSER)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def copied(*frames: str, max: int | None = None) -> list[str]:
    return run([{"frames": list(frames), "max": max}])[0]["copied"]  # type: ignore[no-any-return]


def test_writes_with_each_terminator_and_selection() -> None:
    assert copied(osc52("hello")) == ["hello"]
    assert copied(osc52("with ST", end=ST)) == ["with ST"]
    assert copied(f"\x9d52;c;{b64('C1')}\x9c") == ["C1"]
    assert copied(osc52("no selection", selection="")) == ["no selection"]
    assert copied(osc52("primary", selection="p")) == ["primary"]
    assert copied(osc52("héllo ✓ 日本")) == ["héllo ✓ 日本"]  # UTF-8
    # amid other output, two in one frame: both, in order
    frame = f"before{osc52('one')}\x1b[31mred\x1b]0;a title{BEL}{osc52('two', end=ST)}after"
    assert copied(frame) == ["one", "two"]


def test_reads_clears_other_osc_and_bad_data_copy_nothing() -> None:
    assert copied(f"{ESC}]52;c;?{BEL}") == []  # a read: never answered, nothing copied
    assert copied(f"{ESC}]52;c;{BEL}") == []  # a clear
    assert copied(f"{ESC}]52;c;!!not base64!!{BEL}") == []
    assert copied(f"{ESC}]52;x y;{b64('bad selection')}{BEL}") == []
    assert copied(f"{ESC}]0;{b64('a title')}{BEL}", f"{ESC}]521;c;{b64('x')}{BEL}") == []


def test_aborted_sequences_copy_nothing_and_the_next_one_works() -> None:
    text = b64("lost")
    # CAN and SUB abort; an ESC that is not ST aborts and may start the next write
    assert copied(f"{ESC}]52;c;{text}\x18{osc52('after CAN')}") == ["after CAN"]
    assert copied(f"{ESC}]52;c;{text}\x1a{osc52('after SUB')}") == ["after SUB"]
    assert copied(f"{ESC}]52;c;{text}{osc52('restarted')}") == ["restarted"]
    assert copied(f"{ESC}]52;c;{text}{ESC}[0m{osc52('after CSI')}") == ["after CSI"]
    # ... also when that ESC ends a frame
    assert copied(f"{ESC}]52;c;{text}{ESC}", f"]52;c;{b64('next frame')}{BEL}") == ["next frame"]


def test_a_write_split_across_frames_at_every_point() -> None:
    for end in (BEL, ST):
        stream = f"x\r\n{osc52('split me ✓', end=end)}y"
        cases = [{"frames": [stream[:i], stream[i:]], "max": None} for i in range(len(stream) + 1)]
        cases.append({"frames": list(stream), "max": None})  # one character per frame
        for i, result in enumerate(run(cases)):
            assert result["copied"] == ["split me ✓"], (end, i)


def test_size_is_bounded_and_an_oversized_write_is_dropped() -> None:
    big = b64("z" * 3000)  # 4000 base64 characters
    results = run(
        [
            # over the bound: dropped, in one frame or many, and the parser holds at
            # most the bound meanwhile; the write after it works
            {"frames": [f"{ESC}]52;c;{big}{BEL}{osc52('small')}"], "max": 1000},
            {
                "frames": [f"{ESC}]52;c;", *[big[i : i + 100] for i in range(0, 4000, 100)]],
                "max": 1000,
            },
            {"frames": [f"{ESC}]52;c;{big}{BEL}"], "max": 4000},  # at the bound: kept
            {"frames": [osc52("default bound")], "max": None},
        ]
    )
    assert results[0]["copied"] == ["small"]
    assert results[1]["copied"] == [] and results[1]["held"] <= 1000
    assert results[2]["copied"] == ["z" * 3000]
    assert results[3]["max"] == 1 << 20
