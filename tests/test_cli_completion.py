"""Tab completion of ``jupyter agents`` (argcomplete, through ``jupyter``'s own
completion as a shell registered with ``register-python-argcomplete jupyter`` asks it):
commands, options, and session ids and names from the store."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("argcomplete", reason="the completion extra")


def completions(line: str, tmp_path: Path) -> list[str]:
    """What the shell would offer for ``line`` (the cursor at its end)."""
    jupyter = shutil.which("jupyter")
    assert jupyter
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    got = subprocess.run([jupyter], env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return [c.strip() for c in out.read_text().split("\v")]


def test_commands_options_and_sessions_complete(agents_state_dir, tmp_path):
    assert {"list", "limit"} <= set(completions("jupyter agents li", tmp_path))
    assert "--wide" in completions("jupyter agents list --w", tmp_path)
    state = f"--state-dir {agents_state_dir}"
    jupyter = shutil.which("jupyter")
    assert jupyter
    made = subprocess.run(
        [jupyter, "agents", "new", "shell", "--cwd", str(tmp_path), *state.split()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    sid = made.stdout.strip()
    offered = completions(f"jupyter agents kill {state} ", tmp_path)
    assert sid in offered and "1" in offered  # its id and its terminal's name
    assert completions(f"jupyter agents show {state} {sid[:6]}", tmp_path) == [sid]
