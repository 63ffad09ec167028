"""jupyter_agents: Jupyter terminals and AI coding agents that outlive the Jupyter server."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from jupyter_agents.server.app import AgentsApp

    return [{"module": "jupyter_agents.server.app", "app": AgentsApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab extension (the "Agents" panel), for ``jupyter labextension``."""
    return [{"src": "labextension", "dest": "jupyter-agents"}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_agents``: register the ``%agent`` magic."""
    from jupyter_agents.clients.magics import AgentMagics

    ipython.register_magics(AgentMagics)
