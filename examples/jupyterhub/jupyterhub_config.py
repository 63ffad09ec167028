"""A local JupyterHub whose users get persistent terminals and agents (jupyter_agents).

Run as root (LocalProcessSpawner starts each user's server as that system user), with
JupyterHub 5.5.1 or later, jupyterhub-singleuser and jupyter-agents in one environment
the users can read, and configurable-http-proxy on PATH (docs/deployment.md):

    JUPYTER_AGENTS_HUB_USERS="alice bob" jupyterhub -f examples/jupyterhub/jupyterhub_config.py

Each user's single-user server loads jupyter_agents from the Python it runs on (``tmux``
on PATH, else the pty broker is used). Per user:

- sessions, transcripts and the tmux socket live in ``~/.local/share/jupyter/agents``
  (0700, owned by the user): no other user can list, attach or read them;
- stopping a server (hub API, culling, ``jupyterhub`` restart) leaves the user's terminals
  and agents running (``on_shutdown = "detach"``); the next server re-adopts them;
- after a reboot (or a pod restart, with the home on a persistent volume) the agents are
  resumed with their conversation ids (``restore_on_start = "agents"``);
- a user may let another watch one session read-only, for a limited time
  (docs/sharing.md): the single-user server runs with jupyter_agents'
  authorizer and identity provider (a hub share alone would hand over the whole server),
  users may share (``shares!user``), and each server may make share codes with its own
  token (``shares!server``) for the accept link that comes with each grant;
- with ``JUPYTER_AGENTS_HUB_CULL_TIMEOUT`` set, jupyterhub-idle-culler runs as a hub
  service and stops servers idle that many seconds (an agent at work keeps its server
  active up to ``AgentsApp.agent_keepalive``);
- with ``JUPYTER_AGENTS_HUB_RECLAIM_IDLE`` set, ``jupyter_agents.clients.reclaim`` runs as a hub
  service and ends sessions idle that many seconds with no viewer (agents at work are
  kept within their keepalive) and every session of a user the hub deletes.

The hub tests (tests/test_hub*.py) run this file with real system users; the variables
below let them choose ports and paths. The shared password is for the demo: use PAM,
OAuth...
"""

import os
import shutil
import sys

c = get_config()  # type: ignore[name-defined]  # noqa: F821

env = os.environ.get
c.JupyterHub.bind_url = env("JUPYTER_AGENTS_HUB_URL", "http://127.0.0.1:8000")
c.JupyterHub.hub_port = int(env("JUPYTER_AGENTS_HUB_PORT", "8081"))
c.JupyterHub.db_url = f"sqlite:///{env('JUPYTER_AGENTS_HUB_DIR', '.')}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{env('JUPYTER_AGENTS_HUB_DIR', '.')}/cookie_secret"
c.ConfigurableHTTPProxy.command = [
    shutil.which("configurable-http-proxy") or "configurable-http-proxy"
]
c.ConfigurableHTTPProxy.pid_file = f"{env('JUPYTER_AGENTS_HUB_DIR', '.')}/proxy.pid"

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = env("JUPYTER_AGENTS_HUB_PASSWORD", "change-me")
c.Authenticator.allowed_users = set(env("JUPYTER_AGENTS_HUB_USERS", "alice bob").split())

c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
c.Spawner.cmd = [os.path.join(os.path.dirname(sys.executable), "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 60
# jupyter_agents, per user server:
c.Spawner.args = [
    "--AgentsApp.restore_on_start=agents",  # resume agents after a reboot / pod restart
    "--AgentsApp.on_shutdown=detach",  # the default: stopping or culling keeps sessions
    # read-only sharing: the owner ($JUPYTERHUB_USER) may do everything, anyone the hub
    # lets in only watch the session a grant names (in a jupyter_server_config file on
    # the servers' config path, the authorizer line alone does it: docs/sharing.md)
    "--ServerApp.authorizer_class=jupyter_agents.auth.ViewerAuthorizer",
    "--ServerApp.identity_provider_class=jupyter_agents.auth.ViewerIdentityProvider",
]
# users may share their servers (share codes; add "read:users:name" to share by name)
c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "shares!user"]}]
# each server's own token: the default server role's scopes, plus share codes of itself
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    "shares!server",
]

c.JupyterHub.services = []
# idle culling: a hub service with the scopes it needs to find and stop idle servers
if env("JUPYTER_AGENTS_HUB_CULL_TIMEOUT"):
    c.JupyterHub.services.append(
        {
            "name": "idle-culler",
            "command": [
                sys.executable,
                "-m",
                "jupyterhub_idle_culler",
                f"--timeout={env('JUPYTER_AGENTS_HUB_CULL_TIMEOUT')}",
                f"--cull-every={env('JUPYTER_AGENTS_HUB_CULL_EVERY', '60')}",
            ],
        }
    )
    c.JupyterHub.load_roles.append(
        {
            "name": "idle-culler",
            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
            "services": ["idle-culler"],
        }
    )

# reclaiming detached sessions (docs/deployment.md): those idle this long, and every one
# of a user the hub deletes; as root, reading each user's state dir as that user
if env("JUPYTER_AGENTS_HUB_RECLAIM_IDLE"):
    c.JupyterHub.services.append(
        {
            "name": "agents-reclaim",
            "command": [
                sys.executable,
                "-m",
                "jupyter_agents.clients.reclaim",
                "--end",
                f"--idle-timeout={env('JUPYTER_AGENTS_HUB_RECLAIM_IDLE')}",
                f"--every={env('JUPYTER_AGENTS_HUB_RECLAIM_EVERY', '300')}",
            ],
        }
    )
    c.JupyterHub.load_roles.append(
        {"name": "agents-reclaim", "scopes": ["list:users"], "services": ["agents-reclaim"]}
    )

# an admin token for scripts (and the tests): users, servers, tokens, and users' shares
if env("JUPYTER_AGENTS_HUB_ADMIN_TOKEN"):
    c.JupyterHub.services.append(
        {"name": "admin-script", "api_token": env("JUPYTER_AGENTS_HUB_ADMIN_TOKEN")}
    )
    c.JupyterHub.load_roles.append(
        {
            "name": "admin-script",
            "scopes": ["admin:users", "admin:servers", "tokens", "read:shares"],
            "services": ["admin-script"],
        }
    )
