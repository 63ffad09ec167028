"""What a new process gets: its terminal name, its working directory, its environment.

Policy the session service applies: it reads this process's environment and which
directories exist, and changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

from jupyter_agents.core.errors import InvalidRequest

NAME_PATTERN = re.compile(r"\w{1,64}")
log = logging.getLogger(__name__)

#: runs a module as ``python -m`` does, without the cwd on ``sys.path`` (Python 3.10,
#: which has no ``-P``): ``-c`` puts ``""`` first, which goes before anything is imported
_RUN_MODULE = (
    "import sys; del sys.path[0]; import runpy; "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


def python_module_argv(module: str, *args: str) -> list[str]:
    """The argv that runs our ``module`` with this interpreter (as ``python -m``), never
    importing from the directory it runs in: agent CLIs run hooks in the session's
    folder, where a project's own ``json.py`` or ``socket.py`` would otherwise shadow
    the standard library. ``-P`` on Python 3.11+, the same effect by hand on 3.10.

    >>> python_module_argv("jupyter_agents.hook", "x")[-2:]
    ['jupyter_agents.hook', 'x']
    """
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module, *args]
    return [sys.executable, "-c", _RUN_MODULE, module, *args]


def validate_name(name: object) -> str:
    """A terminal name as given by a client, or :class:`InvalidRequest`.

    >>> validate_name("build_1")
    'build_1'
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        shown = repr(name)[:80]
        raise InvalidRequest(
            f"invalid terminal name {shown}: use 1-64 letters, digits or underscores"
        )
    return name


def next_free_name(taken: Iterable[str]) -> str:
    """The smallest positive integer not in ``taken``, as a string ("1" first).

    >>> next_free_name({"1", "2", "x"})
    '3'
    """
    used = set(taken)
    n = 1
    while str(n) in used:
        n += 1
    return str(n)


def scrubbed_env(environ: dict[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """``environ`` without the names matching any of ``patterns`` (fnmatch, case-sensitive).

    >>> scrubbed_env({"A": "1", "JUPYTERHUB_OAUTH_X": "s"}, ["JUPYTERHUB_OAUTH_*"])
    {'A': '1'}
    """
    pats = list(patterns)
    return {k: v for k, v in environ.items() if not any(fnmatchcase(k, p) for p in pats)}


@dataclasses.dataclass
class EnvPolicy:
    """Environment and cwd rules of new processes: ``scrub`` (fnmatch patterns removed),
    ``extra`` (variables added), ``root_dir`` (where relative cwds resolve)."""

    scrub: list[str]
    extra: dict[str, str]
    root_dir: str

    def environment(self, recorded: dict[str, str] | None = None) -> dict[str, str]:
        """A new process's environment: this process's (or ``recorded``, a session's
        launch environment) scrubbed, plus ``extra``."""
        env = scrubbed_env(dict(os.environ) if recorded is None else recorded, self.scrub)
        env.update(self.extra)
        return env

    def resolve_cwd(self, cwd: object, strict: bool = False) -> str:
        """Like jupyter_server_terminals: absolute, or relative to the root; a path that
        does not exist (or is not a string) falls back to the root, or with ``strict``
        is refused with :class:`InvalidRequest`."""
        root = Path(self.root_dir or os.getcwd()).expanduser()
        if cwd is None or cwd == "":
            return str(root.resolve())
        if isinstance(cwd, str) and "\0" not in cwd:
            for candidate in (Path(cwd), root / cwd):
                try:  # a name too long, "~nosuchuser"...: not an existing directory
                    candidate = candidate.expanduser()
                    if candidate.is_absolute() and candidate.is_dir():
                        return str(candidate.resolve())
                except (OSError, RuntimeError):
                    continue
        if strict:
            raise InvalidRequest(f"cwd {str(cwd)[:200]!r} is not an existing directory")
        log.info("jupyter_agents: requested cwd %r does not exist; using %s", cwd, root)
        return str(root.resolve())
