"""The configuration reference, generated from the traits at build time.

:data:`DOCUMENTED` names every configurable class of jupyter_agents that a user sets in
``jupyter_server_config.py``; :func:`reference_rst` walks each one's
``class_traits(config=True)`` and writes one ``confval`` entry per trait (its type, its
default, its ``help``). The directive ``jupyter-agents-config`` puts that text into a
page; its text is reStructuredText, so in a MyST page it goes inside ``{eval-rst}``.
``tests/test_docs.py`` checks the text against the classes, and that no
configurable class of the package is missing from :data:`DOCUMENTED`.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from typing import Any

from docutils import nodes
from docutils.parsers.rst.states import RSTState
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles
from traitlets import TraitType
from traitlets.config import Configurable
from traitlets.utils.importstring import import_item


@dataclasses.dataclass(frozen=True)
class Documented:
    """One configurable class: ``c.<section>.<trait>`` in the config files."""

    path: str  # import string of the class
    section: str  # the name its config section goes by
    intro: str  # what the class is, in a sentence or two (RST)


DOCUMENTED = [
    Documented(
        "jupyter_agents.server.app.AgentsApp",
        "AgentsApp",
        "The server extension. The server, the CLI (``jupyter agents``) and kernels "
        "(``%agent``) read the same ``c.AgentsApp`` section from the Jupyter Server "
        "config files, so all three open the same state dir with the same rules.",
    ),
    Documented(
        "jupyter_agents.backends.tmux.backend.TmuxBackend",
        "TmuxBackend",
        "The tmux backend: one tmux server per state dir on ``<state_dir>/tmux/socket``.",
    ),
    Documented(
        "jupyter_agents.backends.broker.client.BrokerBackend",
        "BrokerBackend",
        "The pty broker backend: our daemon of ``<state_dir>/broker``, where there is no "
        "tmux or with ``backend = 'broker'``.",
    ),
    Documented(
        "jupyter_agents.server.terminals.TerminalManager",
        "TerminalManager",
        "The stock terminal manager API over the sessions "
        "(``web_app.settings['terminal_manager']``); its culling traits are the stock "
        "ones, also settable as ``c.ServerApp.TerminalManager...``.",
    ),
]

#: the package whose own traits come first; traits of base classes from elsewhere
#: (jupyter_server's ExtensionApp, traitlets' Application) follow under "inherited"
PACKAGE = "jupyter_agents"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One trait as the reference shows it."""

    section: str
    name: str
    type: str
    default: str  # RST inline text
    help: str  # the trait's help, as written
    owner: str  # module.Class that defines it

    @property
    def ours(self) -> bool:
        return self.owner.split(".")[0] == PACKAGE


def owner(cls: type[Configurable], name: str) -> str:
    for klass in cls.__mro__:
        if name in vars(klass):
            return f"{klass.__module__}.{klass.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _dynamic(cls: type[Configurable], name: str, trait: TraitType[Any, Any]) -> bool:
    """Whether the default is computed when an instance is made (a ``@default``
    method): then the value of this machine is not the documented default."""
    generator = cls._all_trait_default_generators.get(name)
    return generator is not None and getattr(generator, "__self__", None) is not trait


def _type(trait: TraitType[Any, Any]) -> str:
    kind = type(trait).__name__
    if kind == "Enum":
        return "Enum: " + ", ".join(f"``{v!r}``" for v in trait.values)  # type: ignore[attr-defined]
    if kind == "Union":
        parts = [_type(t) for t in trait.trait_types]  # type: ignore[attr-defined]
        return "Union of " + "; ".join(parts)
    return kind


def _default(cls: type[Configurable], name: str, trait: TraitType[Any, Any]) -> str:
    if _dynamic(cls, name, trait):
        return "computed at start"
    try:
        text = trait.default_value_repr()
    except Exception:  # a default that cannot be built outside a server
        return "computed at start"
    return f"``{text}``"


def entries(doc: Documented) -> list[Entry]:
    """Every configurable trait of the class ``doc`` names, its own first, sorted."""
    cls = import_item(doc.path)
    found = [
        Entry(
            section=doc.section,
            name=name,
            type=_type(trait),
            default=_default(cls, name, trait),
            help=trait.help or "",
            owner=owner(cls, name),
        )
        for name, trait in cls.class_traits(config=True).items()
    ]
    return sorted(found, key=lambda e: (not e.ours, e.name))


_SPECIAL = re.compile(r"([\\`*_|\[\]])")


def _escape(text: str) -> str:
    """Text as RST: literally, whatever it contains."""
    return _SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _help_rst(text: str) -> list[str]:
    """A help string as RST lines: its paragraphs, and indented parts (examples) as
    literal blocks."""
    if not text.strip():
        return ["No description.", ""]
    out: list[str] = []
    for para in re.split(r"\n\s*\n", textwrap.dedent(text).strip()):
        lines = para.splitlines()
        if any(line.startswith(" ") for line in lines):
            out += ["::", "", *("   " + line for line in lines), ""]
        else:
            out += [_escape(para), ""]
    return out


def _help_lines(entry: Entry) -> list[str]:
    """Our help strings are plain text; traitlets and jupyter_server write theirs in
    RST (as their own generated docs use them)."""
    if entry.ours or not entry.help:
        return _help_rst(entry.help)
    return [*textwrap.dedent(entry.help).strip().splitlines(), ""]


def _entry_rst(entry: Entry) -> list[str]:
    lines = [
        f".. confval:: {entry.section}.{entry.name}",
        f"   :type: {entry.type}",
        f"   :default: {entry.default}",
        "",
        *(f"   {line}" if line else "" for line in _help_lines(entry)),
    ]
    if not entry.ours:
        lines += [f"   Inherited from ``{entry.owner}``.", ""]
    return [*lines, ""]


def reference_rst() -> str:
    """The whole reference: one section per class of :data:`DOCUMENTED`."""
    out: list[str] = []
    for doc in DOCUMENTED:
        found = entries(doc)
        title = f"``{doc.section}``"
        out += [title, "-" * len(title), "", doc.intro, ""]
        inherited = [e for e in found if not e.ours]
        for e in found:
            if e is (inherited[0] if inherited else None):
                sub = f"Inherited by ``{doc.section}``"
                out += [
                    sub,
                    "~" * len(sub),
                    "",
                    "Traits of the base classes (jupyter_server's ``ExtensionApp``, "
                    "traitlets' ``Application``); jupyter_agents does not use most of "
                    "them.",
                    "",
                ]
            out += _entry_rst(e)
    return "\n".join(out)


class ConfigReference(SphinxDirective):
    """``jupyter-agents-config``: the generated reference, in place."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        if not isinstance(self.state, RSTState):
            raise self.error("jupyter-agents-config writes RST: put it inside {eval-rst}")
        container = nodes.section()
        container.document = self.state.document
        text = StringList(reference_rst().splitlines(), source="configref.reference_rst")
        nested_parse_with_titles(self.state, text, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("jupyter-agents-config", ConfigReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
