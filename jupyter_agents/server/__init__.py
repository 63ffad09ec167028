"""The Jupyter server extension: :class:`~jupyter_agents.server.app.AgentsApp` wires the
parts; REST handlers, the terminal websocket and its streams, the stock ``/api/terminals``
routes, the viewer page, and the server's activity for culling. The only wing that
imports tornado and jupyter_server.
"""
