"""The public name of the hub's identity provider and authorizer for read-only sharing,
as JupyterHub configs spell them (``--ServerApp.authorizer_class=
jupyter_agents.auth.ViewerAuthorizer``); they live in :mod:`jupyter_agents.sharing.auth`.
A name that configs already hold: kept as long as they may."""

from jupyter_agents.sharing.auth import ViewerAuthorizer, ViewerIdentityProvider

__all__ = ["ViewerAuthorizer", "ViewerIdentityProvider"]
