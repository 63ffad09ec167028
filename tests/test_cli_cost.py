"""The dashboard's COST column equals ``%agent ls``'s and ``list``'s for a session with
usage (a real server, the fake Claude answering one prompt, default prices)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_agents.clients.cli import main
from jupyter_agents.clients.display import COLUMNS
from jupyter_agents.pytest_plugin import poll

SONNET = "claude-sonnet-4-5-20250929"  # priced by the default table


def cost_cells(table_html: str) -> dict[str, str]:
    """The ``cost`` cell of each row of an HTML session table, by session id."""
    rows = re.findall(r"<tr>(.*?)</tr>", table_html)
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in rows]
    return {c[0]: c[COLUMNS.index("cost")] for c in cells if c}


def test_dashboard_cost_equals_the_magics(
    agents_server: Any,
    agents_state_dir: Path,
    fake_agents: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = agents_server(env=fake_agents.env)
    status, agent = server.request(
        "POST",
        "/api/agents/sessions",
        {"kind": "claude", "cwd": str(tmp_path), "args": ["--model", SONNET]},
    )
    assert status == 201, agent
    sid = agent["id"]
    server.type_line(agent["name"], "hello", "claude heard: hello")

    def priced() -> Any:
        usage = server.request("GET", f"/api/agents/sessions/{sid}")[1].get("usage")
        return usage if usage and usage.get("cost") else None

    poll(priced, timeout=30, what="the session's cost")

    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))
    for key, value in fake_agents.env.items():
        monkeypatch.setenv(key, value)
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        listed = shell.run_line_magic("agent", "ls")
        magic = cost_cells(listed._repr_html_())[sid]
        # as text, on an 80-column screen: no line wider (issue 54, item 17)
        monkeypatch.setenv("COLUMNS", "80")
        text = repr(listed)
        assert max(map(len, text.splitlines())) <= 80 and sid[:6] in text, text
    finally:
        InteractiveShell.clear_instance()
    assert magic.startswith("$"), magic
    capsys.readouterr()
    assert main(["cost"]) == 0
    said = capsys.readouterr().out
    assert max(map(len, said.splitlines())) <= 80 and "total: " in said, said

    from jupyter_agents.clients.widgets import Dashboard

    dashboard = Dashboard(state_dir=str(agents_state_dir), interval=30)
    try:
        assert cost_cells(dashboard.table.value)[sid] == magic
    finally:
        dashboard.close()
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert main(["list", "--wide"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(sid))
    assert magic in row
