"""The documentation site: it builds with warnings as errors, and its generated
references say what the code does.

The site is built once (Sphinx's text builder, ``-W``) and read as a reader would read
it: the configuration reference must list every configurable trait with its help and
default, and no configurable class of the package may be missing from it; the REST
page every route of ``rest-api.yml`` with every description whole; the CLI page every
command and option of the parser.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from traitlets.config import Configurable

import jupyter_agents
from jupyter_agents.clients.cli import build_parser

pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SPEC = ROOT / "jupyter_agents" / "rest-api.yml"
METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}

sys.path.insert(0, str(DOCS / "_ext"))
import configref  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site as text, built like .ci/run builds it (warnings are errors)."""
    out = tmp_path_factory.mktemp("docs")
    argv = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "text"]
    build = subprocess.run(
        [*argv, "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return out


def flat(text: str) -> str:
    """Text with its inline markup and all white space taken out (the text builder
    wraps lines, also at hyphens)."""
    return re.sub(r'[\s*"`]', "", text)


def config_entries(page: str) -> dict[str, str]:
    """``Section.trait`` -> the text of its entry, as the config page shows them."""
    heads = list(re.finditer(r"^(\w+\.\w+)\n\n   Type:\n", page, re.M))
    ends = [m.start() for m in heads[1:]] + [len(page)]
    return {m.group(1): page[m.end() : end] for m, end in zip(heads, ends, strict=True)}


def test_config_reference_lists_every_trait_with_help_and_default(site: Path) -> None:
    shown = config_entries((site / "reference" / "config.txt").read_text())
    expected: dict[str, str] = {}
    for doc in configref.DOCUMENTED:
        cls = configref.import_item(doc.path)
        for name, trait in cls.class_traits(config=True).items():
            help_text = trait.help or "No description."
            if not configref.owner(cls, name).startswith(configref.PACKAGE + "."):
                # jupyter_server's and traitlets' help is RST: its first line, as written
                help_text = help_text.strip().splitlines()[0]
            expected[f"{doc.section}.{name}"] = help_text
    assert set(shown) == set(expected), (
        f"missing: {sorted(set(expected) - set(shown))}, "
        f"not traits: {sorted(set(shown) - set(expected))}"
    )
    for key, help_text in expected.items():
        assert "Default:" in shown[key], key
        assert flat(help_text) in flat(shown[key]), key
    # ours come with their real defaults, or say that one is computed at start
    assert '"33554432"' in shown["AgentsApp.transcript_max_bytes"]
    assert "computed at start" in shown["AgentsApp.state_dir"]
    assert '"300"' in shown["TerminalManager.cull_interval"]


def test_every_configurable_class_of_the_package_is_in_the_reference() -> None:
    """A new configurable class (a third backend, a trait on a new manager) fails here
    until it is added to ``configref.DOCUMENTED``."""
    documented = [configref.import_item(d.path) for d in configref.DOCUMENTED]
    missing = []
    for info in pkgutil.walk_packages(jupyter_agents.__path__, "jupyter_agents."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if not (
                isinstance(obj, type)
                and issubclass(obj, Configurable)
                and obj.__module__ == info.name
            ):
                continue
            own = obj.class_own_traits(config=True)
            if own and not any(issubclass(d, obj) for d in documented):
                missing.append(f"{info.name}.{obj.__name__}: {sorted(own)}")
    assert not missing, missing


def routes() -> list[tuple[str, str]]:
    spec = yaml.safe_load(SPEC.read_text())
    return [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    ]


def test_rest_page_lists_every_route_of_the_spec(site: Path) -> None:
    page = (site / "reference" / "rest.txt").read_text()
    shown = set(re.findall(r"^([A-Z]+) (/\S*)$", page, re.M))
    expected = set(routes())
    assert len(expected) > 20
    assert expected <= shown, sorted(expected - shown)


def test_rest_page_shows_every_description_whole(site: Path) -> None:
    """Flow-style YAML ends a value at a comma: ``{description: a, b}`` says only "a",
    and the rest becomes a key no reader sees."""
    page = flat((site / "reference" / "rest.txt").read_text())
    texts: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and " " in key and not where.endswith("/paths"):
                    pytest.fail(f"{where}: key {key!r} is a description cut at a comma")
                if key in ("summary", "description") and isinstance(value, str):
                    texts.append(value)
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    spec = yaml.safe_load(SPEC.read_text())
    walk(spec["paths"], "/paths")
    assert texts
    for text in texts:
        assert flat(text) in page, text


def test_cli_page_lists_every_command_and_option(site: Path) -> None:
    page = (site / "reference" / "cli.txt").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) > 10
    for name, command in sub.choices.items():
        assert re.search(rf"^{re.escape(name)}\n-+$", page, re.M), name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue  # sphinx-argparse leaves -h out
            for option in action.option_strings:
                assert option in page, f"{name} {option}"


def test_the_cli_page_lists_every_command(site: Path) -> None:
    """docs/cli.md lists every command of ``jupyter agents``, generated from the parser
    (docs/_ext/clicommands.py) as the reference page is."""
    page = " ".join((site / "cli.txt").read_text().split())
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert f'"jupyter agents {name}' in page, name
        assert " ".join((command.description or "").split()) in page, name
    for word in ("rename", "send", "attach", "Ctrl-]", "register-python-argcomplete", "=<id>:"):
        assert word in page, word
