"""The transcript writer of a tmux session: :data:`WRITER` (``writer.pl``, a file of this
package), which ``pipe-pane -O`` runs with the pane's output on stdin, and the command
that runs it (:func:`transcript_pipe`).

It writes the layout of :mod:`jupyter_agents.terminal.segments` with its timing index, as the
broker's :class:`~jupyter_agents.backends.broker.recorder.Recorder` does: it appends to
the newest segment (continuing an earlier run's), rolls to a new one when the segment or
its index is full and deletes the oldest beyond the number kept (with their indexes, and
the gap markers before the first kept byte). A failed write (a full disk) loses that
read's output and leaves one empty gap marker per episode; every later read tries
again, so the pane never blocks and tmux never buffers a flood. It ends when the pipe
ends. Perl, because POSIX sh cannot tell the time below a second and one process per
session is the cost wanted (perl-base is Essential on Debian; ``Time::HiRes``, of the
``perl`` package, gives milliseconds, else the index has whole seconds).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from jupyter_agents.terminal.segments import segmenting

#: the writer's script
WRITER = Path(__file__).with_name("writer.pl")
#: what the transcript writer runs
WRITER_TOOLS = ("perl",)


def writer_argv(directory: Path, max_bytes: int) -> list[str]:
    """The writer's command line for the transcript in ``directory`` capped at
    ``max_bytes``: ``perl writer.pl DIR SEGMENT_BYTES KEEP``
    (:func:`~jupyter_agents.terminal.segments.segmenting`).

    >>> writer_argv(Path("/s/t/a b"), 1 << 20)[2:]
    ['/s/t/a b', '131072', '8']
    """
    size, keep = segmenting(max_bytes)
    return ["perl", str(WRITER), str(directory), str(size), str(keep)]


def transcript_pipe(directory: Path, max_bytes: int) -> str:
    """The ``pipe-pane`` shell command of :func:`writer_argv`, each path and number an
    argument of its own (to pass to tmux through :func:`~.formats.tmux_pipe_arg`).

    >>> transcript_pipe(Path("/s/t/a b"), 1 << 20).endswith("writer.pl '/s/t/a b' 131072 8")
    True
    """
    return "exec " + shlex.join(writer_argv(directory, max_bytes))
