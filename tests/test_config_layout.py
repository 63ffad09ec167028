"""The settings docs/deployment.md gives for Zero to JupyterHub apply as written.

The docs' YAML is parsed as Helm would read it; each ``singleuser.extraFiles`` entry is
written (as JSON, what Zero to JupyterHub makes of ``data`` for a ``.json`` mount) where
the pod would have it, with the system config folder it names (``/etc/jupyter``, on the
config path of every image) stood in for by a temporary folder on
``JUPYTER_CONFIG_PATH``. A real ``jupyter server`` then starts, and its log must show
each documented setting with the documented value, read from that file. A file the
docs put where Jupyter does not read settings (``jupyter_server_config.d/``) fails here.
The hub's half of the YAML must match the example hub the hub tests run.
"""

from __future__ import annotations

import json
import os
import re
import runpy
from pathlib import Path, PurePosixPath
from typing import Any

import test_hub
import yaml
from jupyter_core.paths import SYSTEM_CONFIG_PATH
from packaging.version import Version
from traitlets.config import Config

from jupyter_agents.config import AgentsSettings
from jupyter_agents.pytest_plugin import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
DEPLOYMENT = ROOT / "docs" / "deployment.md"
EXAMPLE = ROOT / "examples" / "jupyterhub" / "jupyterhub_config.py"
CONSTRAINTS = ROOT / ".ci" / "hub-constraints.txt"
#: the ``c.AgentsApp`` settings the start-up log names with their source
LOGGED = {"backend", "restore_on_start", "on_shutdown", "agent_keepalive"}


def helm_values() -> dict[str, Any]:
    """The Zero to JupyterHub values of docs/deployment.md (its YAML block with a
    ``singleuser`` key), parsed."""
    blocks = re.findall(r"```yaml\n(.*?)```", DEPLOYMENT.read_text(), re.S)
    values = [v for v in map(yaml.safe_load, blocks) if isinstance(v, dict) and "singleuser" in v]
    assert len(values) == 1, "docs/deployment.md: one Zero to JupyterHub values block"
    return values[0]


def lay_out(values: dict[str, Any], pod: Path) -> tuple[list[str], dict[Path, dict[str, Any]]]:
    """Write each extraFile under ``pod`` as the pod would have it: the config path
    folders standing in for the system ones, and {file: data}."""
    config_path: list[str] = []
    files: dict[Path, dict[str, Any]] = {}
    for name, spec in values["singleuser"]["extraFiles"].items():
        mount = PurePosixPath(spec["mountPath"])
        assert str(mount.parent) in SYSTEM_CONFIG_PATH, (
            f"extraFiles.{name} is mounted at {mount}: Jupyter reads settings only from "
            f"files in a config path folder ({SYSTEM_CONFIG_PATH} in an image)"
        )
        assert mount.suffix == ".json", f"extraFiles.{name}: data is written as JSON"
        target = pod / mount.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(spec["data"]))
        config_path.append(str(target.parent))
        files[target] = spec["data"]
    return config_path, files


def test_the_documented_kubernetes_settings_apply(tmp_path: Path) -> None:
    config_path, files = lay_out(helm_values(), tmp_path / "pod")
    (path, data), *others = files.items()
    assert not others and set(data["AgentsApp"]) <= LOGGED
    env = {"JUPYTER_CONFIG_PATH": os.pathsep.join(config_path), "PYTHONPATH": str(ROOT)}
    server = ServerProcess(tmp_path / "state", tmp_path, env=env).start()
    try:
        assert server.request("GET", "/api/terminals")[0] == 200
    finally:
        server.stop()
    log = server.log_path.read_text()
    for name, value in data["AgentsApp"].items():
        effective = getattr(AgentsSettings(**{name: value}), name)  # 7200 -> 7200.0
        line = f"jupyter_agents: setting {name} = {effective!r} (from file {path})"
        assert line in log, f"{name} not in effect:\n{log[-3000:]}"
    for name in LOGGED - set(data["AgentsApp"]):
        assert re.search(rf"jupyter_agents: setting {name} = .* \(default\)", log), name
    authorizer = data["ServerApp"]["authorizer_class"]
    assert authorizer == "jupyter_agents.auth.ViewerAuthorizer"
    # no JupyterHub here, so sharing is refused; the authorizer came from the file
    assert f"(authorizer_class from file {path})" in log, log[-3000:]


def test_the_documented_hub_values_are_the_example_hubs() -> None:
    """The roles and server token scopes of the docs' YAML are the example hub's (the
    one tests/test_hub*.py run), so the Kubernetes form is the tested one."""
    hub = helm_values()["hub"]
    c = Config()
    env = {"JUPYTER_AGENTS_HUB_ADMIN_TOKEN": ""}
    saved = {k: os.environ.pop(k) for k in env if k in os.environ}
    try:
        runpy.run_path(str(EXAMPLE), {"get_config": lambda: c})
    finally:
        os.environ.update(saved)
    roles = {role["name"]: role for role in c.JupyterHub.load_roles}
    assert hub["loadRoles"]["user"]["scopes"] == roles["user"]["scopes"]
    scopes = hub["config"]["KubeSpawner"]["server_token_scopes"]
    assert scopes == c.Spawner.server_token_scopes


def test_the_local_hub_recipe_is_the_one_the_hub_tests_run() -> None:
    """docs/deployment.md shows the example config the hub tests run, documents every
    variable it reads, and asks for a JupyterHub the tests' pinned one satisfies."""
    page = DEPLOYMENT.read_text()
    assert "```{literalinclude} ../examples/jupyterhub/jupyterhub_config.py" in page
    assert test_hub.EXAMPLE.resolve() == EXAMPLE
    read = set(re.findall(r"env\(\s*[\"'](JUPYTER_AGENTS_HUB_\w+)", EXAMPLE.read_text()))
    assert read and read == set(re.findall(r"`(JUPYTER_AGENTS_HUB_\w+)`", page))
    needed = re.search(r"JupyterHub (\d+(?:\.\d+)*) or later", page)
    pinned = re.search(r"^jupyterhub==([\d.]+)$", CONSTRAINTS.read_text(), re.M)
    assert needed and pinned
    assert Version(pinned[1]) >= Version(needed[1])
