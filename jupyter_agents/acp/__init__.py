"""Agent Client Protocol sessions (issue 58): an ACP agent's stdio held by a proxy under
the same owner as terminals (:mod:`.proxy`), its messages journaled (:mod:`.journal`),
and the server's end of it (:mod:`.client`), which may come and go while the agent
runs on."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from jupyter_agents.core.paths import ensure_private_dir, socket_dir


def journal_folder(state_dir: Path, session_id: str) -> Path:
    """Where the journal of ACP session ``session_id`` is kept."""
    return state_dir / "acp" / session_id


def proxy_socket(state_dir: Path, session_id: str) -> Path:
    """Where the proxy of ACP session ``session_id`` listens (short: a socket's path is
    at most about 100 bytes)."""
    return socket_dir(state_dir, "acp") / f"{session_id}.sock"


def proxy_argv(
    state_dir: Path,
    session_id: str,
    cwd: str,
    agent: list[str],
    resume: str | None = None,
    tools: Sequence[str] = (),
) -> list[str]:
    """The argv of the proxy that runs ``agent`` (an ACP agent's argv) for session
    ``session_id`` in ``cwd``, going on with conversation ``resume`` if given, letting
    the agent use the client ``tools`` (of :data:`~jupyter_agents.acp.tools.TOOLS`;
    none by default). Its journal's folder is made here (private), so that it can be
    watched at once."""
    ensure_private_dir(journal_folder(state_dir, session_id))
    return [
        sys.executable,
        "-m",
        "jupyter_agents.acp.proxy",
        "--folder",
        str(journal_folder(state_dir, session_id)),
        "--socket",
        str(proxy_socket(state_dir, session_id)),
        "--cwd",
        cwd,
        "--state-dir",
        str(state_dir),
        "--session",
        session_id,
        *(["--resume", resume] if resume else []),
        *(["--client-tools", ",".join(tools)] if tools else []),
        "--",
        *agent,
    ]
