"""The pty broker backend: a daemon that owns the ptys (no tmux needed; the Windows path).

- :mod:`.protocol`: the framed protocol over the private unix socket;
- :mod:`.server`: the daemon (sessions, transcripts, the protocol's ops);
- :mod:`.fanout`: a session's output to its clients (bounded queues, resync);
- :mod:`.ptys`: the pty-factory seam (ptyprocess on POSIX, pywinpty on Windows);
- :mod:`.replay`: the bounded raw replay;
- :mod:`.client`: :class:`BrokerBackend` and its streams, the heartbeat;
- :mod:`.attach`: a terminal client for looking at a session by hand.
"""

from jupyter_agents.backends.broker.client import BrokerBackend

__all__ = ["BrokerBackend"]
