"""Read-only sharing configured in a config file, under a real JupyterHub: the form
docs/deployment.md gives for Zero to JupyterHub.

jupyterhub-singleuser sets ``ServerApp.identity_provider_class`` over every config file
(docs/deployment.md), so sharing configured only in a file once answered 409 at the first
grant. Here the example hub runs without the command-line classes; each single-user
server instead reads the docs' ``singleuser.extraFiles`` entry, laid out as the pod
would have it (tests/test_config_layout.py's :func:`lay_out`) in a folder on
``JUPYTER_CONFIG_PATH``. alice's server must say at start that it can share, and where
its authorizer came from; her grant is made; bob takes its accept link, watches, and
still cannot reach anything else of her server. The command-line form is
tests/test_hub_sharing.py's.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_hub
from test_config_layout import helm_values, lay_out
from test_hub import Hub, running_hub, typed
from test_hub_sharing import ALICE, BOB, accept, http_status, make_grant, new_session, watch

pytestmark = [m for m in test_hub.pytestmark if m.name != "timeout"] + [pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def pod() -> Iterator[tuple[list[str], Path]]:
    """The docs' extraFiles laid out in a folder every user can read: (config path
    folders, the settings file)."""
    root = Path(tempfile.mkdtemp(prefix="ja-pod-"))
    root.chmod(0o755)
    config_path, files = lay_out(helm_values(), root)
    for path in [*root.rglob("*"), *files]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield config_path, next(iter(files))
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def hub(pod: tuple[list[str], Path]) -> Iterator[Hub]:
    config_path, _file = pod
    config = (
        "c.Spawner.args = [a for a in c.Spawner.args if '.auth.Viewer' not in a]\n"
        f"c.Spawner.environment = {{'JUPYTER_CONFIG_PATH': {':'.join(config_path)!r}}}\n"
    )
    with running_hub((ALICE, BOB), config) as running:
        running.start_server(ALICE)
        yield running


def test_sharing_from_a_config_file_works_under_singleuser(
    hub: Hub, pod: tuple[list[str], Path]
) -> None:
    _config_path, settings = pod
    log = hub.log_path.read_text()
    # the example's Spawner.args win over the same setting in the file, and the log says so
    assert "jupyter_agents: setting restore_on_start = 'agents' (from command line)" in log
    assert "jupyter_agents: setting agent_keepalive = 7200.0 (from file " in log
    assert (
        "jupyter_agents: read-only sharing available (authorizer_class from file "
        f"{settings}; jupyterhub-singleuser's identity provider narrowed to ours)"
    ) in log, log[-3000:]

    token = hub.token(ALICE)
    shell = new_session(hub, token)
    alice = hub.ws(ALICE, token, shell["name"])
    status, grant = make_grant(hub, token, shell["id"], BOB, 900)
    assert status == 201, grant  # was 409: the identity provider was not ours
    assert "hub_error" not in grant, grant["hub_error"]
    assert urllib.parse.urlsplit(grant["accept_url"]).path == "/hub/accept-share"

    bob = accept(hub, grant)
    viewer = watch(hub, bob, grant["id"])
    typed(alice, "echo FROM-$((6*7))-ALICE", "FROM-42-ALICE")
    viewer.wait_for(lambda c: "FROM-42-ALICE" in c.text)
    # the hub share lets bob's browser in; our classes keep him to the watch page
    for path in ("/api/terminals", "/api/agents/sessions", "/api/contents", "/api/kernels"):
        code, _url, _page = bob.open(f"{hub.url}/user/{ALICE}{path}")
        assert code == 403, (path, code)
    assert http_status(hub, "GET", "/api/terminals", hub.token(BOB)) == 403
    viewer.close()
    alice.close()
