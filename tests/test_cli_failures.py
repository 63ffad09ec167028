"""One truth about failures: a kind whose CLI is missing is refused with the same
sentence by the CLI and the magic, and a resume that fails is reported with its reason
by ``jupyter agents restore``, ``%agent resume``, the dashboard's button, ``list`` and
``%agent ls``; none of them says "done" (real tmux, the fake Codex)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_agents.clients.cli import main
from jupyter_agents.config import open_sessions
from jupyter_agents.pytest_plugin import kill_backends, poll


@pytest.fixture
def ipython(agents_state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_agents")
    yield shell
    InteractiveShell.clear_instance()


def test_a_missing_cli_is_refused_with_one_sentence(ipython, agents_state_dir, tmp_path, capsys):
    state = ["--state-dir", str(agents_state_dir)]
    assert main(["new", "codex", "--cwd", str(tmp_path), *state]) == 4
    said = capsys.readouterr().err.strip()
    assert said.startswith("jupyter agents: cannot start a codex session: "), said
    sentence = said.removeprefix("jupyter agents: ")
    with pytest.raises(UsageError) as refused:
        ipython.run_line_magic("agent", f"new codex --cwd {tmp_path}")
    assert str(refused.value) == f"%agent new: {sentence}"
    assert main(["list", "--all", "--json", *state]) == 0
    assert json.loads(capsys.readouterr().out) == []  # nothing started, nothing recorded


@pytest.fixture
def failed_resume(
    agents_state_dir: Path, fake_agents: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A Codex session after a reboot whose conversation is gone: its resume fails at
    once with the CLI's words. Its id."""
    for key, value in fake_agents.env.items():
        monkeypatch.setenv(key, value)
    project = tmp_path / "proj"
    project.mkdir()
    service = open_sessions(str(agents_state_dir))
    try:
        session, _ = service.create(cwd=str(project), kind="codex", strict=True)

        def conversation() -> str | None:
            service.refresh.follow_conversations()
            return service.get(session.id).conversation_id

        poll(conversation, what="the codex conversation id")
    finally:
        service.close()
    kill_backends(agents_state_dir)  # a reboot: no tmux, the state dir intact
    for rollout in (fake_agents.home / ".codex" / "sessions").rglob("*.jsonl"):
        rollout.unlink()
    return session.id


WORDS = "No saved session found with ID"  # what the (fake) Codex says


def test_a_failed_resume_is_reported_everywhere(
    ipython, agents_state_dir, failed_resume, capsys, monkeypatch
):
    sid = failed_resume
    state = ["--state-dir", str(agents_state_dir)]
    # the CLI: the reason on stderr, exit 1, nothing "restored"
    assert main(["restore", "--all", *state]) == 1
    out, err = capsys.readouterr()
    assert f"{sid}: resume failed: {WORDS}" in err and "restored" not in out
    # list: the reason under the table; show: in its fields
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["list", *state]) == 0
    listed = capsys.readouterr().out
    assert f"interrupted: resume failed: {WORDS}" in listed, listed

    # %agent resume --all and %agent resume ID: each failure printed with its reason
    table = ipython.run_line_magic("agent", "resume --all")
    err = capsys.readouterr().err
    assert f"{sid}: resume failed: {WORDS}" in err
    assert [s.status for s in table.sessions] == ["interrupted"]
    assert WORDS in table._repr_html_()  # the why column
    ipython.run_line_magic("agent", f"restore {sid[:8]}")  # the CLI's verb, an id prefix
    assert f"{sid}: resume failed: {WORDS}" in capsys.readouterr().err
    listed = ipython.run_line_magic("agent", "ls")
    assert WORDS in listed._repr_html_() and WORDS in str(listed)

    # the dashboard's button: the reason, never "done"
    from jupyter_agents.clients.widgets import Dashboard

    dashboard = Dashboard(state_dir=str(agents_state_dir), interval=30)
    try:
        row = dashboard.rows.children[0]
        button = next(b for b in row.children[1:] if b.description == "restore")
        button.click()
        poll(lambda: "failed" in dashboard.status.value or None, timeout=30)
        assert WORDS in dashboard.status.value and "done" not in dashboard.status.value
        assert WORDS in dashboard.table.value  # the why column
    finally:
        dashboard.close()
    assert os.environ["JUPYTER_AGENTS_STATE_DIR"] == str(agents_state_dir)


def test_restore_all_on_a_terminal_keeps_every_failure_readable(
    agents_state_dir: Path, fake_agents: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three agents after a reboot, their CLI gone: ``restore --all`` on a real terminal
    (a tmux pane of 80x24, read back as a person sees it) shows all three reasons; the
    progress bar redraws only its own line. Exit 1."""
    import shutil
    import subprocess

    for key, value in fake_agents.env.items():
        monkeypatch.setenv(key, value)
    project = tmp_path / "proj"
    project.mkdir()
    service = open_sessions(str(agents_state_dir))
    try:
        ids = [service.create(cwd=str(project), kind="claude")[0].id for _ in range(3)]
    finally:
        service.close()
    kill_backends(agents_state_dir)  # a reboot
    (fake_agents.bin / "claude").unlink()  # and the CLI uninstalled
    jupyter = shutil.which("jupyter")
    assert jupyter
    socket = tmp_path / "screen-tmux"
    screen = ["tmux", "-S", str(socket), "-f", "/dev/null"]
    done = tmp_path / "exit-status"
    command = f"{jupyter} agents restore --all --state-dir {agents_state_dir}; echo $? > {done}"
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    try:
        subprocess.run(
            [
                *screen,
                "new-session",
                "-d",
                "-x",
                "80",
                "-y",
                "24",
                "sh",
                "-c",
                f"{command}; sleep 60",
            ],
            check=True,
            env=env,
            timeout=20,
        )
        poll(lambda: done.exists() and done.read_text().strip(), timeout=60, what="the restore")
        shown = subprocess.run(
            [*screen, "capture-pane", "-p", "-J", "-t", "0"], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run([*screen, "kill-server"], capture_output=True)
    assert done.read_text().strip() == "1"
    lines = shown.splitlines()
    for sid in ids:
        said = [line for line in lines if line.startswith(f"{sid} could not be restored: ")]
        assert len(said) == 1 and "claude" in said[0], shown
    assert lines.count(next(line for line in lines if line.startswith("[#"))) == 1, shown
    assert "[####################] 3/3" in shown, shown
