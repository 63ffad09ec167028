"""A pytest plugin that runs another project's test suite (jupyter_server_terminals')
with jupyter_agents enabled in every pytest-jupyter server it starts: our extension
is switched on through the environment's config path, as an installed extension is,
on a private state dir whose backend is killed after each test. The backend is
``$JUPYTER_AGENTS_TEST_BACKEND`` (``tmux`` or ``broker``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_agents.pytest_plugin import kill_backends


@pytest.fixture(autouse=True)
def _jupyter_agents_enabled(
    jp_env_config_path: Path, jp_data_dir: Path, tmp_path: Path
) -> Iterator[None]:
    state = tmp_path / "agents-state"
    config = {
        "ServerApp": {"jpserver_extensions": {"jupyter_agents": True}},
        "AgentsApp": {
            "state_dir": str(state),
            "backend": os.environ.get("JUPYTER_AGENTS_TEST_BACKEND", "tmux"),
        },
    }
    folder = jp_env_config_path / "jupyter_server_config.d"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_agents.json").write_text(json.dumps(config))
    yield
    # where the suite's own server config wins over ours, the default state dir is used
    for used in (state, jp_data_dir / "agents"):
        kill_backends(used)


@pytest.fixture(autouse=True)
def _jupyter_agents_served(request: pytest.FixtureRequest, _jupyter_agents_enabled: None) -> None:
    """Fails a test whose server does not run our terminals on the backend asked for
    (so a pass means ours)."""
    if "jp_serverapp" in request.fixturenames:
        app = request.getfixturevalue("jp_serverapp")
        manager = app.web_app.settings.get("terminal_manager")
        if app.terminals_enabled:
            assert type(manager).__module__.startswith("jupyter_agents"), type(manager)
            backend = manager.service.backends.default().name
            assert backend == os.environ.get("JUPYTER_AGENTS_TEST_BACKEND", "tmux"), backend
