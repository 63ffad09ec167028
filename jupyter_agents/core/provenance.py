"""Where a server's setting came from: the command line, which config file, or the default.

Jupyter reads settings from the command line (spawner args included) and from the
``jupyter_server_config.json``/``.py`` files on its config path (``jupyter --paths``);
a file elsewhere, such as ``jupyter_server_config.d/`` (read only for
``ServerApp.jpserver_extensions``), is ignored without a word. The start-up log names the
source of each setting that matters on a hub (:data:`HUB_SETTINGS`), so an admin sees
at once whether theirs applied.

JSON files are read again to find the one that set a trait (the last one loaded wins, as
when Jupyter merged them); Python files are never run again (they may have effects):
the last one that names the trait is reported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: the ``c.AgentsApp`` traits whose value and source the server logs at start
HUB_SETTINGS = ("backend", "restore_on_start", "on_shutdown", "agent_keepalive")

#: the config sections ``c.AgentsApp`` traits are read from (the class and its base)
AGENTS_SECTIONS = ("AgentsApp", "AgentsSettings")

DEFAULT = "default"
COMMAND_LINE = "command line"


def source(serverapp: Any, sections: tuple[str, ...], name: str) -> str:
    """Where trait ``name`` of the config ``sections`` got its value in ``serverapp``
    (a ``ServerApp`` that has loaded its config): :data:`COMMAND_LINE`, ``"file <path>"``,
    ``"config"`` (set by code, such as an extension's own config), or :data:`DEFAULT`."""
    cli = getattr(serverapp, "cli_config", None) or {}
    if any(name in cli.get(section, {}) for section in sections):
        return COMMAND_LINE
    for path in reversed(list(getattr(serverapp, "loaded_config_files", []))):
        if _file_sets(Path(path), sections, name):
            return f"file {path}"
    config = serverapp.config
    if any(section in config and name in config[section] for section in sections):
        return "config"
    return DEFAULT


def _file_sets(path: Path, sections: tuple[str, ...], name: str) -> bool:
    """Whether the config file at ``path`` sets ``name`` in one of ``sections``."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return False
        return isinstance(data, dict) and any(
            isinstance(data.get(s), dict) and name in data[s] for s in sections
        )
    return any(re.search(rf"\b{re.escape(s)}\.{re.escape(name)}\b", text) for s in sections)


def describe(value: Any, where: str) -> str:
    """``value`` and ``where`` as the start-up log writes them.

    >>> describe("agents", "file /etc/jupyter/jupyter_server_config.json")
    "'agents' (from file /etc/jupyter/jupyter_server_config.json)"
    >>> describe(7200.0, "default")
    '7200.0 (default)'
    """
    return f"{value!r} ({where if where == DEFAULT else 'from ' + where})"
