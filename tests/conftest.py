pytest_plugins = ["jupyter_agents.pytest_plugin", "pytest_jupyter.jupyter_server"]
