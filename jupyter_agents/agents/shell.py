"""Kinds without a conversation CLI: the plain shell, and kinds configured by the user
(``AgentsApp.agents``) with a command, a resume template and an id strategy."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from jupyter_agents.agents.base import AgentKind, Launch
from jupyter_agents.core.records import Session

#: placeholder for the conversation id in a configured kind's command and resume argv
ID_PLACEHOLDER = "{conversation_id}"


class ShellKind(AgentKind):
    """A login shell; restoring one starts a fresh shell in the same cwd."""

    name = "shell"

    def launch(self, args: list[str]) -> Launch:
        return Launch([*self.command, *args])

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        return Launch([*self.command, *session.args])


class CustomKind(AgentKind):
    """A kind from configuration, e.g.::

        c.AgentsApp.agents = {
            "aider": {"command": ["aider"], "resume": ["aider", "--restore-chat-history"]},
            "mycli": {"command": ["mycli", "--id", "{conversation_id}"],
                      "resume": ["mycli", "--resume", "{conversation_id}"], "id": "assign"},
        }

    ``id`` is ``none`` (no conversation id; resume runs ``resume`` as is) or ``assign``
    (a fresh UUID replaces ``{conversation_id}`` in ``command`` at launch and in
    ``resume`` on restore). Launch args are appended to both. ``attention`` is ``none``
    or ``silence``: a heuristic, labelled so (``attention_source`` ``heuristic``): the
    session is ``waiting`` once its output has been silent for ``silence`` seconds
    (default 5), else ``working``.
    """

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        resume: Sequence[str] | None,
        id_strategy: str,
        attention: str = "none",
        silence: float = 5.0,
    ) -> None:
        self.name = name
        super().__init__(command)
        if attention not in ("none", "silence"):
            raise ValueError(f"agent kind {name!r}: attention must be 'none' or 'silence'")
        if not isinstance(silence, (int, float)) or silence <= 0:
            raise ValueError(f"agent kind {name!r}: silence must be a positive number")
        self.reports = "heuristic" if attention == "silence" else None
        self.silence = float(silence)
        self.resume_template = list(resume) if resume else list(command)
        if not all(isinstance(a, str) and a for a in self.resume_template):
            raise ValueError(f"agent kind {name!r}: resume must be a list of strings")
        if id_strategy not in ("none", "assign"):
            raise ValueError(f"agent kind {name!r}: id must be 'none' or 'assign'")
        if id_strategy == "assign" and ID_PLACEHOLDER not in self.command:
            raise ValueError(
                f"agent kind {name!r}: id 'assign' needs {ID_PLACEHOLDER!r} as an element "
                "of command"
            )
        if id_strategy == "none" and ID_PLACEHOLDER in [*self.command, *self.resume_template]:
            raise ValueError(f"agent kind {name!r}: {ID_PLACEHOLDER!r} needs id 'assign'")
        self.id_strategy = id_strategy

    @staticmethod
    def _fill(template: list[str], conversation_id: str | None) -> list[str]:
        return [conversation_id if a == ID_PLACEHOLDER and conversation_id else a for a in template]

    def launch(self, args: list[str]) -> Launch:
        cid = str(uuid.uuid4()) if self.id_strategy == "assign" else None
        return Launch([*self._fill(self.command, cid), *args], cid)

    def resume(self, session: Session, env: Mapping[str, str], had_file: bool = False) -> Launch:
        cid = session.conversation_id
        return Launch([*self._fill(self.resume_template, cid), *session.args], cid)
