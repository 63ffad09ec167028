"""Never someone else's conversation: an agent session whose conversation id was never
known is restored as a new conversation in its folder, never with a "most recent" flag
(``codex resume --last``), says so, and offers the folder's conversations, one of which
``restore --conversation`` continues (real tmux, the fake Codex that logs its argv)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_agents.clients.cli import main
from jupyter_agents.config import open_sessions
from jupyter_agents.pytest_plugin import kill_backends, poll, transcript_bytes


def test_an_unknown_codex_conversation_is_never_resumed_with_last(
    agents_state_dir: Path,
    fake_agents: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in fake_agents.env.items():
        monkeypatch.setenv(key, value)
    project = tmp_path / "proj"
    project.mkdir()
    state = ["--state-dir", str(agents_state_dir)]
    service = open_sessions(str(agents_state_dir))
    try:
        session, _ = service.create(cwd=str(project), kind="codex", strict=True)
        sid = session.id

        def conversation() -> str | None:
            service.refresh.follow_conversations()
            return service.get(sid).conversation_id

        # another conversation of this folder: what "--last" would resume
        other = poll(conversation, what="the first run's thread")
        kill_backends(agents_state_dir)  # a reboot
        service.reconcile()
        # this session never had a conversation of its own
        assert service.store.update(sid, conversation_id=None)
    finally:
        service.close()

    capsys.readouterr()
    assert main(["restore", "--all", *state]) == 0
    out = capsys.readouterr().out
    assert f"restored {sid} (codex)" in out and "started fresh" in out
    assert other in out  # offered, not resumed
    started = fake_agents.records("start")
    assert len(started) == 2
    assert "--last" not in started[-1]["argv"] and "resume" not in started[-1]["argv"]
    # the terminal says so, under the old output
    poll(lambda: b"started fresh" in transcript_bytes(agents_state_dir, sid), timeout=10)

    # the offered conversation, chosen: resumed by its id
    assert main(["kill", sid, *state]) == 0
    capsys.readouterr()
    assert main(["restore", sid, "--conversation", other, *state]) == 0, capsys.readouterr()
    started = fake_agents.records("start")
    assert started[-1]["argv"][:1] == ["resume"] or "resume" in started[-1]["argv"]
    assert other in started[-1]["argv"]
    assert main(["kill", sid, *state]) == 0
    # a conversation that is not its folder's is refused
    assert main(["restore", sid, "--conversation", "0" * 8, *state]) == 4
    assert "not a codex conversation of its folder" in capsys.readouterr().err
    assert not any("--last" in r["argv"] for r in fake_agents.records())
    # the magic takes the same choice
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    shell: Any = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        with pytest.raises(UsageError, match="not a codex conversation of its folder"):
            shell.run_line_magic("agent", f"resume {sid} --conversation {'0' * 8}")
        table = shell.run_line_magic("agent", f"resume {sid} --conversation {other}")
        assert [s.status for s in table.sessions] == ["running"]
        assert other in fake_agents.records("start")[-1]["argv"]
    finally:
        InteractiveShell.clear_instance()
