"""One vocabulary: ``%agent`` takes the CLI's verbs (list, show, grep, cost, restore,
attach) with the CLI's meaning (real tmux, IPython in this process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_agents.clients.magics import TERMINAL_MIME
from jupyter_agents.pytest_plugin import poll, transcript_bytes


def test_the_magic_speaks_the_clis_verbs(
    agents_state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    monkeypatch.chdir(tmp_path)
    shell: Any = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        sid = shell.run_line_magic("agent", "new shell --name verbs").sessions[0].id
        assert [s.id for s in shell.run_line_magic("agent", "list").sessions] == [sid]
        assert [s.id for s in shell.run_line_magic("agent", "ls --all").sessions] == [sid]
        capsys.readouterr()
        shell.run_line_magic("agent", "show verbs")
        shown = capsys.readouterr().out.splitlines()
        assert f"id: {sid}" in shown and "status: running" in shown
        shell.run_line_magic("agent", f"show {sid[:8]} --json")
        assert f'"id": "{sid}"' in capsys.readouterr().out
        from jupyter_agents.clients.cli import main

        main(["send", sid, "echo magic-$((20+22))"])
        poll(lambda: b"magic-42" in transcript_bytes(agents_state_dir, sid), timeout=15)
        capsys.readouterr()
        shell.run_line_magic("agent", "grep magic-42")
        assert f"{sid} verbs" in capsys.readouterr().out
        shell.run_line_magic("agent", "cost")
        assert "total:" in capsys.readouterr().out
        link = shell.run_line_magic("agent", "attach verbs")
        assert 'href="/terminals/verbs"' in link._repr_html_()
        assert f"jupyter agents attach {sid}" in repr(link)
        # what JupyterLab's extension renders as a button that opens the tab
        data, _ = shell.display_formatter.format(link)
        assert data[TERMINAL_MIME] == {"name": "verbs", "id": sid, "kind": "shell"}
        shell.run_line_magic("agent", "kill verbs")
        with pytest.raises(UsageError, match="nothing to attach to"):
            shell.run_line_magic("agent", f"attach {sid}")
        # the newest session of a name, once none runs under it
        assert shell.run_line_magic("agent", "restore verbs").sessions[0].id == sid
    finally:
        InteractiveShell.clear_instance()
