"""Look at a broker session from a terminal (the broker's ``tmux attach``)::

    python -m jupyter_agents.backends.broker.attach --state-dir DIR SESSION_ID

Draws the session's replay, then its live output, on the terminal's alternate screen;
every key goes to the session except Ctrl-] (0x1d), which detaches. Leaving, it puts
back the terminal's modes and its main screen, with what was there before (the hint
that says how to leave) and a line that says why it left, as ``tmux attach`` does. The
session keeps running and keeps the size its Jupyter viewers gave it (this client never
resizes it, so a terminal of another size shows it wrapped or clipped). POSIX only.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import termios
import tty
from pathlib import Path

from jupyter_agents.backends.base import DETACH_KEY as DETACH
from jupyter_agents.backends.broker.protocol import (
    NotOurs,
    broker_paths,
    connect_checked,
    encode,
    read_frame_sync,
)
from jupyter_agents.backends.broker.replay import RESET

#: taking the terminal: the alternate screen, cleared (a replay's own reset, RIS,
#: would leave it and wipe the main screen and its scrollback)
ENTER = b"\x1b[?1049h\x1b[H\x1b[2J"
#: giving it back: the modes a session's program may have set (mouse, bracketed paste,
#: focus, application keys, hidden cursor, scroll region, attributes), then the main
#: screen
LEAVE = (
    b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1004l\x1b[?2004l"
    b"\x1b[?1l\x1b>\x1b[?25h\x1b[r\x1b[0m\x1b[?1049l"
)


def attach(state_dir: Path, session_id: str) -> int:
    """Run the attach client on this process's terminal; the exit status."""
    try:
        sock = connect_checked(broker_paths(state_dir)[0])
    except NotOurs as e:
        print(f"not attaching: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"no pty broker for {state_dir}: {e}", file=sys.stderr)
        return 1
    sock.sendall(encode({"op": "attach", "sid": session_id}))
    sock.sendall(encode({"op": "snapshot", "sid": session_id}))
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    if saved is not None:
        tty.setraw(stdin, termios.TCSANOW)  # keep keys typed ahead
    status = 0
    said = "detached (from session " + session_id + ")"
    os.write(stdout, ENTER)
    try:
        while True:
            ready, _, _ = select.select([sock, stdin], [], [])
            if stdin in ready:
                keys = os.read(stdin, 4096)
                if not keys or DETACH in keys:
                    keys = keys.split(DETACH)[0]
                    if keys:
                        sock.sendall(encode({"op": "write", "sid": session_id}, keys))
                    break
                sock.sendall(encode({"op": "write", "sid": session_id}, keys))
            if sock in ready:
                header, payload = read_frame_sync(sock)
                if header["op"] == "error":
                    status, said = 1, str(header.get("error"))
                    break
                if header["op"] == "exit":
                    said = f"exited: {header.get('exit_code')}"
                    break
                if payload.startswith(RESET):  # a snapshot or resync: on our screen
                    payload = b"\x1b[H\x1b[2J" + payload[len(RESET) :]
                os.write(stdout, payload)  # output, resync, snapshot reply
    except ConnectionError:
        status, said = 1, "the pty broker went away"
    finally:
        os.write(stdout, LEAVE + f"[{said}]\r\n".encode())
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        sock.close()
    return status


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_agents.backends.broker.attach",
        description="Attach this terminal to a pty broker session (Ctrl-] detaches).",
    )
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("session_id")
    args = parser.parse_args(argv)
    sys.exit(attach(args.state_dir.expanduser().absolute(), args.session_id))


if __name__ == "__main__":
    main()
