"""1. Output throughput: a file ``cat`` in a terminal, timed from the command being sent
until a websocket client has received all of it (an end marker printed after it).
Two payloads: base64 text (long lines: bytes per second dominate) and the output of
``seq`` (short lines: per-line costs dominate, e.g. a scroll of tmux's screen per line).
Compared with a bare pty read loop, the physical limit here."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from jupyter_agents.backends.base import SpawnRequest
from jupyter_agents.backends.tmux import TmuxBackend

from .harness import BenchServer, read_until
from .report import Row

#: printed after the payload; ``_`` and ``:`` never occur in base64, and the typed
#: command line shows ``$((6*7))``, not the marker
MARKER = "_42_:"
COMMAND = "cat {path}; echo _$((6*7))_:\r"


def make_seq_file(path: Path, lines: int) -> Path:
    """The output of ``seq 1 lines``, made once per run."""
    if not path.exists():
        with open(path, "wb") as out:
            subprocess.run(["seq", "1", str(lines)], stdout=out, check=True)
    return path


def expected_chars(path: Path) -> int:
    """Characters a client must receive for ``path`` (UTF-8): the pty turns each ``\\n``
    into ``\\r\\n``."""
    text = path.read_bytes().decode("utf-8")  # not read_text: it turns \r into \n
    return len(text) + text.count("\n")


def ws_seconds(srv: BenchServer, name: str, path: Path, timeout: float = 600) -> tuple[float, int]:
    """Seconds for ``path`` (up to the end marker after it) to reach a websocket client
    of terminal ``name``, and the characters received (output a stack drops shows up
    as fewer than :func:`expected_chars`; reported, not an error)."""
    client = srv.ready_shell(name)
    try:
        t0 = time.perf_counter()
        client.stdin(COMMAND.format(path=path))
        received = read_until(client, MARKER, timeout)
        return time.perf_counter() - t0, received
    finally:
        client.close()


def bare_pty_seconds(path: Path) -> float:
    """Seconds for ``cat path`` on a fresh pty, read by a plain ``os.read`` loop."""
    master, slave = os.openpty()
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            ["cat", str(path)], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        slave = -1
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the other side closed
                break
        proc.wait()
        return time.perf_counter() - t0
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def _tmux_session(state_dir: Path, argv: list[str]) -> tuple[TmuxBackend, str]:
    backend = TmuxBackend(state_dir)
    backend.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    backend.spawn(SpawnRequest("ref", argv, str(state_dir), env, rows=40, cols=120))
    return backend, "ref"


def tmux_pane_seconds(state_dir: Path, path: Path) -> float:
    """Reference: ``cat path`` in a pane of our tmux setup (``pipe-pane`` transcript
    included) with no client at all; timed until ``cat`` is done."""
    t0 = time.perf_counter()
    backend, _ = _tmux_session(
        state_dir, ["/bin/sh", "-c", f"cat {path}; tmux wait-for -S ref-done"]
    )
    try:
        subprocess.run(["tmux", "-S", str(backend.socket_path), "wait-for", "ref-done"], check=True)
        return time.perf_counter() - t0
    finally:
        backend.kill_server()


def tmux_control_seconds(state_dir: Path, path: Path) -> float:
    """Reference: as :func:`tmux_pane_seconds`, plus one control-mode client whose
    ``%output`` lines are read by a plain ``os.read`` loop (no parsing): what tmux alone
    costs on our data path, before the Jupyter server does anything."""
    marker = MARKER.encode()
    backend, sid = _tmux_session(
        state_dir, ["/bin/sh", "-c", f"read x; cat {path}; echo _$((6*7))_:; sleep 5"]
    )
    argv = ["tmux", "-S", str(backend.socket_path), "-C", "attach-session", "-f", "ignore-size"]
    client = subprocess.Popen(
        [*argv, "-t", f"={sid}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        fd = client.stdout.fileno()
        seen = b""
        while b"%session-changed" not in seen:
            seen += os.read(fd, 65536)
        t0 = time.perf_counter()
        client.stdin.write(f"send-keys -t ={sid}: Enter\n".encode())
        client.stdin.flush()
        tail = b""
        while marker not in tail:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise RuntimeError("tmux control client ended early")
            tail = (tail + chunk)[-64:]
        return time.perf_counter() - t0
    finally:
        client.kill()
        client.wait()
        backend.kill_server()


#: the reference that is tmux's own ceiling on our data path
PANE_REFERENCE = "tmux pane + pipe-pane, no client"
#: where the tmux flavor's time goes: the same payload through tmux without our server
TMUX_REFERENCES = {
    PANE_REFERENCE: tmux_pane_seconds,
    "tmux + one control client read raw": tmux_control_seconds,
}


def rows(
    mb_per_s: dict[str, list[float]],
    payload: str,
    ours: list[str],
    reference: dict[str, list[float]] | None = None,
    delivered: dict[str, list[float]] | None = None,
) -> list[Row]:
    """``mb_per_s`` maps ``bare``/``stock``/our flavors to per-run MB/s of ``payload``
    (what was printed, for the row's label); ``reference`` maps a description to per-run
    MB/s of a tmux-only reference (shown as extra rows)."""
    from .harness import median

    values: dict[str, float | None] = {k: median(v) for k, v in mb_per_s.items()}
    stock = values.get("stock")
    verdict = {f: bool(stock and (values[f] or 0) >= stock) for f in ours if f in values}
    floor = {f: bool(stock and (values[f] or 0) >= 0.8 * stock) for f in ours if f in values}
    bare = values.get("bare")
    note = ", ".join(
        f"{k} {v / bare:.2f}x bare" for k, v in values.items() if k != "bare" and v and bare
    )
    if any(not v for v in floor.values()):
        note += "; BELOW the 0.8x floor"
    out = [
        Row(
            "1",
            f"throughput, {payload} to a websocket client",
            "MB/s",
            values,
            target=">= 1.0x stock (never < 0.8x)",
            verdict=verdict,
            note=note + f" (median of {len(next(iter(mb_per_s.values())))})",
        )
    ]
    if delivered:
        low = {f: min(v) for f, v in delivered.items()}
        out.append(
            Row("1", "  output delivered to the client (worst run)", "%", dict(low),
                target=">= 100 %", verdict={f: low[f] >= 100 for f in ours if f in low},
                ratio=False, note="received characters / characters the pty produces; "
                "under 100 % means output was dropped")
        )  # fmt: skip
    for label, runs in (reference or {}).items():
        ref = median(runs)
        out.append(
            Row("1", f"  reference: {label}", "MB/s", {"bare": bare, "stock": stock, "tmux": ref},
                note=f"{ref / bare:.2f}x bare" if bare else "")
        )  # fmt: skip
    return out
