"""``jupyter agents list``, ``show`` and every ``--help`` fit an 80-column terminal; the
default listing holds what a person acts on, ``--all`` every record, ``--wide`` every
column (real tmux sessions, the installed entry point)."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyter_agents.clients.cli import build_parser, main
from jupyter_agents.clients.display import COLUMNS
from jupyter_agents.config import open_sessions


def run(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    jupyter = shutil.which("jupyter")
    assert jupyter
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [jupyter, "agents", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.fixture
def ten(agents_state_dir: Path, tmp_path: Path) -> list[str]:
    """Ten shells in a deep folder, long titles on some, one killed two days ago."""
    deep = tmp_path / "projects" / "a-rather-long-project-name" / "with" / "nested" / "folders"
    deep.mkdir(parents=True)
    state = ["--state-dir", str(agents_state_dir)]
    for _ in range(10):
        assert main(["new", "shell", "--cwd", str(deep), *state]) == 0
    service = open_sessions(str(agents_state_dir))
    try:
        ids = [s.id for s in service.store.list()]
        for sid in ids[:3]:
            service.rename(sid, "a title that someone wrote to say what this terminal does")
        service.terminate(ids[-1], reason="ended by the test, a while ago")
        old = datetime.now(timezone.utc) - timedelta(days=2)
        service.store.update(ids[-1], last_activity=old.isoformat().replace("+00:00", "Z"))
    finally:
        service.close()
    return ids


def test_list_fits_80_columns_and_wide_has_every_column(agents_state_dir, ten, capsys):
    state = ["--state-dir", str(agents_state_dir)]
    listed = run("list", "--all", *state, columns=80)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) >= 11
    assert max(len(line) for line in lines) <= 80, listed.stdout
    for word in ("NAME", "KIND", "STATUS", "ATTENTION"):
        assert word in lines[0]
    # the killed one says why, under the table
    assert any("killed: ended by the test" in line for line in lines[11:]), listed.stdout
    # an id prefix as shown acts on the session, as git's short hashes do
    short = lines[1].split()[0]
    assert ten[0].startswith(short) and len(short) < len(ten[0])
    assert main(["show", short, "--json", *state]) == 0
    assert f'"id": "{ten[0]}"' in capsys.readouterr().out

    wide = run("list", "--all", "--wide", *state, columns=80)
    head = wide.stdout.splitlines()[0]
    assert [c for c in COLUMNS if c.upper() in head] == list(COLUMNS)
    assert all(sid in wide.stdout for sid in ten)  # full ids
    assert max(len(line) for line in wide.stdout.splitlines()) > 80


def test_list_shows_what_to_act_on_and_all_shows_every_record(agents_state_dir, ten):
    state = ["--state-dir", str(agents_state_dir)]
    default = run("list", "--wide", *state).stdout
    assert ten[-1] not in default and all(sid in default for sid in ten[:-1])
    assert "1 session that ended over 24 h ago not shown: --all lists them" in default
    assert ten[-1] in run("list", "--all", "--wide", *state).stdout
    piped = run("list", *state).stdout  # not a terminal, no COLUMNS: nothing cut
    assert all(sid in piped for sid in ten[:-1])


def test_show_is_for_people_and_json_stays(agents_state_dir, ten):
    state = ["--state-dir", str(agents_state_dir)]
    shown = run("show", ten[-1], *state, columns=80)
    assert shown.returncode == 0
    assert f"id: {ten[-1]}" in shown.stdout.splitlines()
    assert "status: killed" in shown.stdout and "reason: ended by the test" in shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    assert run("show", ten[-1], "--json", *state).stdout.startswith("{")


def test_every_help_fits_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    helps = [parser.format_help()]
    sub = next(a for a in parser._actions if a.dest == "command")
    helps += [p.format_help() for p in sub.choices.values()]  # type: ignore[union-attr]
    too_wide = [line for text in helps for line in text.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
