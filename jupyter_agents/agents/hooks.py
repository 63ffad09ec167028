"""Hook plumbing every kind's set-up uses: where events are spooled, the argv of the
hook a CLI runs (:mod:`jupyter_agents.hook`: record an event, or ask for a permission
and wait for its answer), and a session's private settings file of hooks, merged after
an administrator's own. Which events a kind hooks, and how its CLI is given them, is
the kind's (its module in this folder)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_agents.agents.spool import spool_path
from jupyter_agents.core.launch import python_module_argv
from jupyter_agents.core.paths import ensure_private_dir


def spool_dir(state_dir: Path) -> Path:
    """Where hook events are spooled (made 0700)."""
    return ensure_private_dir(state_dir / "spool")


def hook_command(state_dir: Path, session_id: str, event: str | None = None) -> list[str]:
    """The argv of the hook for one session: the same Python and package as ours, which
    never imports from the folder the CLI runs it in (:func:`python_module_argv`).
    ``event``: record every event it is run for as this one (``--as``, for a CLI
    whose event names are not Claude's)."""
    named = [] if event is None else ["--as", event]
    return python_module_argv("jupyter_agents.hook", *named, str(spool_path(state_dir, session_id)))


def ask_command(
    state_dir: Path,
    session_id: str,
    wait: float,
    fallback: str,
    event: str | None = None,
    answer: str = "claude",
) -> list[str]:
    """The argv of the hook that makes a ``PermissionRequest`` a pending request and
    waits up to ``wait`` seconds for its answer (:mod:`jupyter_agents.hook`); ``event``
    as in :func:`hook_command` (``PermissionRequest`` for a CLI that calls it otherwise);
    ``answer``: the shape of the decision the CLI reads
    (:func:`~jupyter_agents.agents.permissions.hook_output`)."""
    named = [] if event is None else ["--as", event]
    return python_module_argv(
        "jupyter_agents.hook",
        *named,
        "--answer",
        answer,
        "--ask",
        f"{wait:g}",
        fallback,
        str(spool_path(state_dir, session_id)),
    )


def merged_hooks(settings: Mapping[str, Any], ours: Mapping[str, list[Any]]) -> dict[str, Any]:
    """``settings`` (an administrator's, in Claude's layout of ``hooks.<Event>``) with
    our hook definitions added after its own of each event, its other settings as
    they are (Gemini CLI and Qwen Code take every scope's hooks, in order).

    >>> admin = {"ui": {"theme": "x"}, "hooks": {"Stop": [{"hooks": ["theirs"]}]}}
    >>> merged = merged_hooks(admin, {"Stop": [{"hooks": ["ours"]}]})
    >>> merged["ui"], merged["hooks"]["Stop"]
    ({'theme': 'x'}, [{'hooks': ['theirs']}, {'hooks': ['ours']}])
    """
    theirs = settings.get("hooks")
    hooks: dict[str, Any] = dict(theirs) if isinstance(theirs, Mapping) else {}
    for event, definitions in ours.items():
        before = hooks.get(event)
        hooks[event] = [*(before if isinstance(before, list) else []), *definitions]
    return {**settings, "hooks": hooks}


def hook_settings_path(state_dir: Path, name: str) -> Path:
    """Where :func:`write_hook_settings` writes the settings file ``name``."""
    return state_dir / "hooks" / name


def write_hook_settings(state_dir: Path, name: str, content: Mapping[str, Any]) -> Path:
    """Write ``content`` as JSON to ``<state_dir>/hooks/<name>``, readable by its owner
    only (a symlink there is refused), and return its path: a session's private
    settings file, which its CLI reads on every start."""
    spool_dir(state_dir)
    ensure_private_dir(state_dir / "hooks")
    path = hook_settings_path(state_dir, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # a file of an earlier run may have been loosened
        json.dump(content, f)
    return path
