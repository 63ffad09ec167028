"""The kinds a server offers: the built-in ones (:data:`BUILTIN`, each a module of this
folder, and the shell) and those ``AgentsApp.agents`` configures (:func:`make_kinds`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_agents.agents.base import AgentKind
from jupyter_agents.agents.claude import ClaudeKind
from jupyter_agents.agents.codex import CodexKind
from jupyter_agents.agents.copilot import CopilotKind
from jupyter_agents.agents.gemini import GeminiKind
from jupyter_agents.agents.opencode import OpenCodeKind
from jupyter_agents.agents.qwen import QwenKind
from jupyter_agents.agents.shell import CustomKind, ShellKind

_KIND_NAME = re.compile(r"\w{1,32}", re.ASCII)
#: the agent CLIs known here (beside the shell): each a module of this folder
BUILTIN: tuple[type[AgentKind], ...] = (
    ClaudeKind,
    CodexKind,
    GeminiKind,
    CopilotKind,
    QwenKind,
    OpenCodeKind,
)


def builtin_prices() -> dict[str, dict[str, float]]:
    """The list prices of every built-in kind's models (``AgentsApp.prices``' default)."""
    return {model: dict(row) for kind in BUILTIN for model, row in kind.prices.items()}


def builtin_env() -> list[str]:
    """The variables every built-in CLI sets for its own children (scrubbed by default)."""
    return [name for kind in BUILTIN for name in kind.own_env]


def make_kinds(
    shell_command: Sequence[str], config: Mapping[str, Any], permission_wait: float = 120.0
) -> dict[str, AgentKind]:
    """The kinds a server offers: the built-ins, with ``config`` applied.

    ``config`` maps a kind name to ``{"command": [...], "resume": [...], "id": ...,
    "attention": "none" | "silence", "silence": seconds, "acp": [...],
    "acp_command": [...]}``; ``acp``: the arguments that make ``command`` speak the Agent
    Client Protocol on stdio (its sessions may then be ``acp`` ones; ``[]``: the command
    speaks it as is); ``acp_command``: instead, another program that speaks it for this
    kind (an adapter). ``permission_wait``: how long a kind whose CLI shows no dialog
    while a permission request waits elsewhere (Codex, Copilot, Qwen) waits for an answer
    (its ``ask_wait``). For a built-in kind (:data:`BUILTIN`) only ``command`` (where the
    CLI is) and ``acp_command`` (where its ACP agent is) may be given; ``shell`` is the
    terminal shell and cannot be configured here. Raises ``ValueError`` naming the bad
    entry.
    """
    kinds: dict[str, AgentKind] = {"shell": ShellKind(shell_command)}
    kinds.update({kind.name: kind([kind.name]) for kind in BUILTIN})
    for name, spec in config.items():
        if not isinstance(name, str) or not _KIND_NAME.fullmatch(name) or name == "shell":
            raise ValueError(f"agent kind name {name!r}: use 1-32 letters, digits or '_'")
        if not isinstance(spec, Mapping) or not set(spec) <= {
            "command",
            "resume",
            "id",
            "attention",
            "silence",
            "acp",
            "acp_command",
        }:
            raise ValueError(
                f"agent kind {name!r}: expected a dict with command, resume, id, attention, "
                "silence, acp, acp_command"
            )
        acp = spec.get("acp")
        if acp is not None and not (isinstance(acp, list) and all(isinstance(a, str) for a in acp)):
            raise ValueError(f"agent kind {name!r}: acp must be a list of strings")
        acp_command = spec.get("acp_command")
        if acp_command is not None and not (
            isinstance(acp_command, list)
            and acp_command
            and all(isinstance(a, str) and a for a in acp_command)
        ):
            raise ValueError(f"agent kind {name!r}: acp_command must be a non-empty argv list")
        if acp is not None and acp_command is not None:
            raise ValueError(f"agent kind {name!r}: give acp or acp_command, not both")
        command = spec.get("command")
        builtin = name in {kind.name for kind in BUILTIN}
        if not isinstance(command, list) and not (builtin and command is None and spec):
            raise ValueError(f"agent kind {name!r}: command must be a list of strings")
        if builtin:
            if not set(spec) <= {"command", "acp_command"}:
                raise ValueError(
                    f"agent kind {name!r}: only 'command' and 'acp_command' can be configured"
                )
            if command is not None:
                kinds[name] = type(kinds[name])(command)
        else:
            resume = spec.get("resume")
            if resume is not None and not isinstance(resume, list):
                raise ValueError(f"agent kind {name!r}: resume must be a list of strings")
            assert command is not None  # (checked above: only a built-in may leave it out)
            kinds[name] = CustomKind(
                name,
                command,
                resume,
                str(spec.get("id", "none")),
                str(spec.get("attention", "none")),
                spec.get("silence", 5.0),
            )
            if acp is not None:
                kinds[name].acp_args = tuple(acp)
        if acp_command is not None:
            kinds[name].acp_command = tuple(acp_command)
    for kind in kinds.values():
        if kind.ask_wait is not None:
            kind.ask_wait = permission_wait
    return kinds
