"""Read-only sharing: grants to watch a running session (``shares``), and the identity
provider and authorizer that let a JupyterHub user reach only the viewer routes
(``auth``). Stands on the sessions wing and the core.
"""
