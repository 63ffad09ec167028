"""Sphinx directive ``cli-commands``: every ``jupyter agents`` command with its synopsis
and its one-line help, generated from the CLI's parser (``jupyter_agents.clients.cli``), so the
CLI page lists every command as the generated reference does."""

from __future__ import annotations

import argparse
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive

from jupyter_agents.clients.cli import build_parser


def commands() -> list[tuple[str, str, str]]:
    """``(name, synopsis, help)`` of every command, in the parser's order; the synopsis
    without ``--state-dir``, which every command takes."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    found = []
    for name, command in sub.choices.items():
        words = [name]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.dest == "state_dir":
                continue
            if not action.option_strings:
                shown = (action.metavar or action.dest).upper()
                if action.nargs in ("?", "*"):
                    shown = f"[{shown}{'...' if action.nargs == '*' else ''}]"
                words.append(str(shown))
                continue
            flag = max(action.option_strings, key=len)
            if action.nargs != 0:
                flag += f" {action.metavar or action.dest.upper()}"
            words.append(flag if action.required else f"[{flag}]")
        found.append((name, " ".join(words), helps.get(name, "")))
    return found


class CliCommands(Directive):
    """A definition list: ``jupyter agents <synopsis>``, then what it does."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        listing = nodes.definition_list()
        for _name, synopsis, text in commands():
            item = nodes.definition_list_item()
            item += nodes.term("", "", nodes.literal(text=f"jupyter agents {synopsis}"))
            item += nodes.definition("", nodes.paragraph(text=text))
            listing += item
        return [listing]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("cli-commands", CliCommands)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
