"""Typing into a session from outside, without attaching (``jupyter agents send``).

The text goes to the session's program as a person's keys would, through the backend's
own input path (tmux ``send-keys -H``, the broker's ``write``): as a bracketed paste
(``ESC [200~ ... ESC [201~``) when the program asked for one (mode 2004 in force, as
followed from its output: :mod:`jupyter_agents.terminal.state`), so that an agent's
prompt takes several lines as one message, then Enter (``\\r``) unless told not to.
"""

from __future__ import annotations

import asyncio
import re

from jupyter_agents.backends.base import StreamListener
from jupyter_agents.core.errors import Conflict, InvalidRequest
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
#: bracketed paste's mode number (``CSI ? 2004 h``)
BRACKETED_PASTE = 2004
#: what text to send may hold: printable characters, newlines and tabs
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: seconds to wait for the backend to take the keys
TIMEOUT = 10.0


def keys(text: str, bracketed: bool, enter: bool) -> str:
    """The input that types ``text``: a bracketed paste if ``bracketed``, newlines as
    Enter otherwise; then Enter if ``enter``. :class:`InvalidRequest` for control
    characters other than newline and tab (they are keys, not text).

    >>> keys("two\\nlines", True, True)
    '\\x1b[200~two\\nlines\\x1b[201~\\r'
    >>> keys("ls", False, True)
    'ls\\r'
    """
    if _CONTROL.search(text):
        raise InvalidRequest("the text to send has control characters (only newline and tab)")
    if bracketed:
        typed = PASTE_START + text + PASTE_END
    else:
        typed = text.replace("\r\n", "\n").replace("\n", "\r")
    return typed + ("\r" if enter else "")


def wants_paste(service: SessionService, session: Session) -> bool:
    """Whether ``session``'s program has bracketed paste on now (from its output)."""
    followed = service.refresh.modes_at(session.id, service.transcript(session.id).size())
    return bool(followed.modes.private.get(BRACKETED_PASTE))


class _Quiet(StreamListener):
    """A listener that only notices the end of the stream."""

    def __init__(self, ended: asyncio.Event) -> None:
        self.ended = ended

    def on_output(self, data: str) -> None:
        pass

    def on_output_lost(self) -> None:
        pass

    def on_exit(self, exit_code: int | None) -> None:
        self.ended.set()


async def _deliver(service: SessionService, session: Session, data: str) -> None:
    backend = service.backends.get(session.backend)
    taken, ended = asyncio.Event(), asyncio.Event()
    stream = backend.attach(session.id, _Quiet(ended))
    try:
        stream.write(data)
        # a snapshot's reply comes after everything written before it was handled
        stream.snapshot(lambda _replay: taken.set(), screen_rows=1)
        waits = [asyncio.ensure_future(e.wait()) for e in (taken, ended)]
        await asyncio.wait(waits, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        if not taken.is_set():
            raise Conflict(f"session {session.id} did not take the input (it may have ended)")
    finally:
        await stream.aclose()
        await backend.detach_streams()


def send(service: SessionService, session: Session, text: str, enter: bool = True) -> bool:
    """Type ``text`` into running ``session`` (module docstring); whether it went as a
    bracketed paste. :class:`Conflict` if it does not run. Blocking."""
    if session.status != "running":
        raise Conflict(f"session {session.id} is {session.status}; nothing to type into")
    bracketed = wants_paste(service, session)
    asyncio.run(_deliver(service, session, keys(text, bracketed, enter)))
    return bracketed
