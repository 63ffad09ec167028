"""The tmux backend: sessions live in a tmux server on a private socket in the state dir.

Control plane (spawn, list, remove) runs one ``tmux`` command per call. The data plane
is one tmux *control-mode* client per streamed session (:class:`TmuxStream`): input
goes in as ``send-keys -H`` (hex, so no byte is ever parsed as tmux syntax), output
comes back as ``%output`` lines, and snapshots are command replies that tmux orders
exactly against that output. The raw transcript is written by ``pipe-pane`` from
tmux itself, so it stays complete while no Jupyter server runs.

Modules: :mod:`.backend` (control plane), :mod:`.stream` (data plane), :mod:`.formats`
(pure: quoting, parsing, the config, replay composition; the tmux facts they rely on).

"""

from .backend import TmuxBackend
from .stream import TmuxStream

__all__ = ["TmuxBackend", "TmuxStream"]
