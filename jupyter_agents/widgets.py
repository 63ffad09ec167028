"""The public name of the ipywidgets dashboard, as notebooks spell it
(``jupyter_agents.widgets.Dashboard()``); it lives in :mod:`jupyter_agents.clients.widgets`.
A name that notebooks already hold: kept as long as they may."""

from jupyter_agents.clients.widgets import Dashboard

__all__ = ["Dashboard"]
