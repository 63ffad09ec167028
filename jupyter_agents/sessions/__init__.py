"""Session lifecycle: start, list, stop, reconcile at boot, restore after a reboot.

:class:`~jupyter_agents.sessions.service.SessionService` changes a session's state and
publishes it; ``reconcile`` re-adopts, interrupts or orphans at boot; ``restore`` brings
an interrupted session back; search, query, export, send and prune are what front ends
do to sessions. Stands on the agents, spend, backends, terminal and core wings.
"""
