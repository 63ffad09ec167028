"""Front ends outside the browser: the ``jupyter agents`` CLI, the ``%agent`` magics, the
ipywidgets dashboard, the tables they print, and the hub's reclaim of idle servers.
They build the parts through :mod:`jupyter_agents.config`, as the server does.
"""
