"""docs/cli.md lists every command of ``jupyter agents``, generated from the parser
(docs/_ext/clicommands.py) as the reference page is; the site builds without warnings."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_agents.cli import build_parser

pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")

DOCS = Path(__file__).parent.parent / "docs"


def test_the_cli_page_lists_every_command(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "text"]
    build = subprocess.run(
        [*argv, "-d", str(tmp_path / ".doctrees"), str(DOCS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    page = " ".join((tmp_path / "cli.txt").read_text().split())
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert f'"jupyter agents {name}' in page, name
        assert " ".join((command.description or "").split()) in page, name
    for word in ("rename", "send", "attach", "Ctrl-]", "register-python-argcomplete", "=<id>:"):
        assert word in page, word
