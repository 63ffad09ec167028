"""The tmux backend: sessions live in a tmux server on a private socket in the state dir.

Control plane (spawn, list, remove) runs one ``tmux`` command per call. The data plane
reads each viewed session's output from its transcript, which ``pipe-pane`` writes from
tmux itself (so it stays complete while no Jupyter server runs), and drives input,
sizes and snapshots through one shared *control-mode* client per IO loop.

Modules: :mod:`.backend` (control plane), :mod:`.stream` (data plane: one viewed
session), :mod:`.control` (the shared control client), :mod:`.cut` (placing a snapshot
in the transcript), :mod:`.snapshot` (pure: a snapshot's request, its reply by name and
the replay composed from it), :mod:`.history` (the older history kept between cuts),
:mod:`.tail` (wake-ups when a transcript grows), :mod:`.formats` (pure: quoting, typed
formats, named command lines, the config; the tmux facts they rely on).

"""

from jupyter_agents.backends.tmux.backend import TmuxBackend
from jupyter_agents.backends.tmux.stream import TmuxStream

__all__ = ["TmuxBackend", "TmuxStream"]
