r"""The terminal control sequences a replay must know about, in one place for every
replay (the broker's, the restore tail's).

:data:`QUERIES` are the sequences a terminal *answers*: xterm.js (JupyterLab's terminal)
replies through its input to device status and attribute requests, mode and setting
queries, colour and clipboard queries. Replayed into a browser, each would make it type
its answer into the running program, so no replay carries them.

>>> QUERIES.sub(b"", b"a\x1b[6nb\x1b[?2004$pc\x1b[>qd\x1b]11;?\x07e\x1b]4;1;?\x1b\\f\x1b[1mg")
b'abcdef\x1b[1mg'
"""

from __future__ import annotations

import re

QUERIES = re.compile(
    rb"\x1b\[[?>=]?[0-9;]*[nc]"  # device status, cursor position, device attributes
    rb"|\x1b\[[0-9;]*t"  # window ops (some report back)
    rb"|\x1b\[\??[0-9;]*\$p"  # mode queries (DECRQM, ANSI and private)
    rb"|\x1b\[>[0-9;]*q"  # terminal name and version (XTVERSION)
    rb"|\x1b\[\?u"  # keyboard protocol flags (kitty)
    rb"|\x1bP[+$]q[^\x1b]*(?:\x1b\\)?"  # terminfo / setting queries (XTGETTCAP, DECRQSS)
    rb"|\x1b\][0-9]+;(?:[0-9]+;)*\?(?:\x07|\x1b\\)"  # colour queries (OSC 4/10/11/12...;?)
    rb"|\x1b\]52;[^;\x07\x1b]*;\?(?:\x07|\x1b\\)"  # clipboard reads (OSC 52 ;?)
)
