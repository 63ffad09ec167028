"""The tmux backend's quoting and replay pieces, against a real tmux."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_agents.backends.base import SpawnRequest
from jupyter_agents.backends.tmux import TmuxBackend
from jupyter_agents.backends.tmux import backend as tmux_backend
from jupyter_agents.backends.tmux.formats import (
    parse_version,
    tmux_arg,
    tmux_format_arg,
    unescape_output,
)
from jupyter_agents.backends.tmux.history import Geometry, HistoryCache, Kept
from jupyter_agents.backends.tmux.snapshot import PaneState, compose_replay
from jupyter_agents.core.errors import BackendUnavailable, InvalidRequest
from jupyter_agents.core.procs import ProcessIdentity, ended_within, identify
from jupyter_agents.pytest_plugin import detach_tmux_control_clients, poll, tmux_control_clients


@pytest.fixture
def backend(tmp_path):
    b = TmuxBackend(tmp_path / "st")
    b.start()
    yield b
    b.kill_server()


class Listener:
    """A stream's listener that keeps what it is told: its output and its ends."""

    def __init__(self) -> None:
        self.ended: list[int | None] = []
        self.output: list[str] = []
        #: how many times it was told that output was lost
        self.lost = 0

    def on_output(self, data: str) -> None:
        self.output.append(data)

    def on_output_lost(self) -> None:
        self.lost += 1

    def on_exit(self, exit_code: int | None) -> None:
        self.ended.append(exit_code)


def test_escaping_helpers():
    assert tmux_arg("x;") == "x\\;"
    assert tmux_arg("x\\;") == "x\\\\;"
    assert tmux_format_arg("#{a};") == "##{a}\\;"
    assert parse_version("tmux 3.3a") == (3, 3) and parse_version("tmux next-3.5") == (3, 5)
    assert unescape_output(b"a\\033[1mb\\134c\xc3\xa9") == b"a\x1b[1mb\\c\xc3\xa9"


@pytest.mark.parametrize(
    "weird", ["semi;", "hash #{session_name}", "$(touch pwned)", "back\\slash;", "quote\"'"]
)
def test_user_strings_reach_the_process_literally(backend, tmp_path, weird):
    cwd = tmp_path / f"dir {weird}"
    cwd.mkdir()
    out = tmp_path / "out"
    # written whole, then renamed: the redirection makes the file empty before printf
    script = f'printf "%s|%s" "$PWD" "$WEIRD" > {out}.part; mv {out}.part {out}; sleep 30'
    backend.spawn(
        SpawnRequest(
            "s1", ["sh", "-c", script], str(cwd), {"WEIRD": weird, "PATH": os.environ["PATH"]}
        )
    )
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text() == f"{cwd}|{weird}"
    assert not (tmp_path / "pwned").exists()
    assert [s.session_id for s in backend.list_live()] == ["s1"]


def test_invalid_ids_refused(backend):
    with pytest.raises(InvalidRequest):
        backend.spawn(SpawnRequest("a;kill-server", ["true"], "/", {}))


def test_private_socket_and_config(backend):
    backend.spawn(SpawnRequest("s1", ["sleep", "30"], "/", {}))
    assert oct(backend.tmux_dir.stat().st_mode & 0o777) == "0o700"
    transcript = backend.transcript_path("s1")
    assert oct(transcript.stat().st_mode & 0o777) == "0o700"
    poll(lambda: (transcript / "0.log").exists(), 5, "the first segment")
    assert oct((transcript / "0.log").stat().st_mode & 0o777) == "0o600"
    sock = str(backend.socket_path)
    opts = subprocess.run(["tmux", "-S", sock, "show", "-g"], capture_output=True, text=True).stdout
    assert "status off" in opts and "prefix None" in opts
    assert (
        "remain-on-exit on"
        in subprocess.run(
            ["tmux", "-S", sock, "show", "-gw"], capture_output=True, text=True
        ).stdout
    )


def test_missing_tmux_is_a_clear_error(tmp_path):
    b = TmuxBackend(tmp_path / "st", tmux_command="no-such-tmux-binary")
    with pytest.raises(BackendUnavailable, match="not on PATH"):
        b.start()


def test_compose_replay_alternate_screen():
    state = PaneState(
        history_size=2,
        alternate_on=True,
        cursor_x=3,
        cursor_y=1,
        cursor_flag=True,
        scroll_region_lower=4,
        pane_height=5,
        pane_width=80,
    )
    replay = compose_replay(state, ["h1", "h2"], ["alt"] + [""] * 4, ["normal"] + [""] * 4)
    assert replay.startswith("\x1bc\x1b[3Jh1")
    assert replay.index("normal") < replay.index("\x1b[?1049h") < replay.index("alt")
    assert replay.endswith("\x1b[2;4H")


def test_exit_status_of_quick_exits_is_always_known(tmp_path):
    """tmux 3.3a misses the SIGCHLD of about 1 in 4 processes that exit shortly after
    its server starts (dead pane, no status, process an unreaped zombie); list_live
    nudges it, so every status arrives."""
    unknown = []
    for i in range(12):
        backend = TmuxBackend(tmp_path / f"s{i}")
        backend.start()
        try:
            backend.spawn(SpawnRequest("q", ["/bin/sh", "-c", "sleep 0.2; exit 7"], "/", {}))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                (live,) = backend.list_live()
                if live.dead and live.exit_code is not None:
                    break
                time.sleep(0.05)
            if live.exit_code != 7:
                unknown.append(live)
        finally:
            backend.kill_server()
    assert unknown == []


def test_a_server_with_no_session_left_lists_none(backend):
    """Between its last session's end and its own exit, a tmux server has no session,
    and ``list-panes -a`` fails with "no current target"; that is no session, not an
    unavailable backend (a listing then answered 503)."""
    backend.spawn(SpawnRequest("only", ["/bin/sh", "-c", "sleep 60"], "/", {}))
    backend._run("set", "-g", "exit-empty", "off")  # hold that moment still
    backend._run("kill-session", "-t", "only")
    assert backend.list_live() == []


def test_kill_server_ends_a_server_a_stuck_control_client_keeps(backend, tmp_path):
    """After kill-server, tmux 3.3a's server waits for every client to go; a control
    client whose reader died with replies queued for it (a Jupyter server killed just
    before) never goes. kill_server ends that server all the same."""
    backend.spawn(SpawnRequest("s1", ["sleep", "300"], str(tmp_path), {"PATH": os.environ["PATH"]}))
    server = psutil.Process(backend._server_pid())
    reader, writer = os.pipe()
    client = subprocess.Popen(
        backend.tmux.argv("-C", "attach-session", "-t", "=s1"),
        stdin=subprocess.PIPE,
        stdout=writer,
        stderr=subprocess.DEVNULL,
    )
    os.close(writer)
    try:
        assert client.stdin is not None
        client.stdin.write(b"list-keys\n" * 40)  # more replies than the pipe holds
        client.stdin.flush()
        time.sleep(0.5)
        os.close(reader)  # the reader dies; tmux keeps what it could not write
        client.stdin.close()
        time.sleep(0.3)
        assert client.poll() is None  # stuck: tmux waits to write its queue
        backend.kill_server()
        assert client.wait(5) is not None
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
        assert not backend.present()
    finally:
        client.kill()


def test_one_control_client_serves_every_viewed_terminal(agents_server):
    """Viewed terminals share one tmux control client (output comes from transcripts):
    three terminals with two viewers each make one client, input and exits still work;
    when the last viewer leaves the client stays a while, serves the next viewer (a
    page reload), and detaches once that one has left too."""
    server = agents_server()
    names = [server.request("POST", "/api/terminals", {})[1]["name"] for _ in range(3)]
    clients = [server.ws(name) for name in names for _ in range(2)]
    for i, client in enumerate(clients):
        client.wait_for(lambda c: len(c.messages) >= 2)
        client.stdin(f"echo viewer-$((100+{i}))\r")
        client.wait_for(f"viewer-{100 + i}")
    control = tmux_control_clients(server.state_dir)
    assert len(control) == 1
    clients[0].stdin("exit 7\r")
    clients[1].wait_for(lambda c: ["disconnect", 1] in c.messages)
    _, sessions = server.request("GET", "/api/agents/sessions")
    assert sorted((s["status"], s["exit_code"]) for s in sessions) == [
        ("exited", 7),
        ("running", None),
        ("running", None),
    ]
    for client in clients:
        client.close()
    time.sleep(1)
    again = server.ws(names[1])
    again.wait_for(lambda c: len(c.messages) >= 2)
    again.stdin("echo back-$((6*7))\r")
    again.wait_for("back-42")
    assert tmux_control_clients(server.state_dir) == control  # the same client
    again.close()
    poll(lambda: not tmux_control_clients(server.state_dir), 15, "the control client to detach")


def test_a_viewer_left_without_its_screen_is_logged_with_where_its_stream_stands(
    agents_server,
):
    """A tab whose screen never comes shows nothing and says nothing (the ledger's blank
    tab of a reopened agent: the agent had printed, the tab got none of it, and the log
    had only the websocket's open). A viewer that waits :data:`SCREEN_LATE` seconds is
    logged with where its stream stands. The wait is made real: the tmux server is
    stopped (SIGSTOP) while the viewer connects, and the screen comes once it goes on."""
    from jupyter_agents.server.streams import SCREEN_LATE

    server = agents_server()
    name = server.request("POST", "/api/terminals", {})[1]["name"]
    socket_path = str(server.state_dir / "tmux" / "socket")
    tmux_pid = int(
        subprocess.run(
            ["tmux", "-S", socket_path, "display-message", "-p", "#{pid}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    said = "has had no screen for"
    os.kill(tmux_pid, signal.SIGSTOP)
    try:
        client = server.ws(name)
        poll(lambda: said in server.log_path.read_text(), SCREEN_LATE + 20, "the wait logged")
    finally:
        os.kill(tmux_pid, signal.SIGCONT)
    client.wait_for(lambda c: len(c.messages) >= 2)  # its screen, once tmux goes on
    (line,) = [line for line in server.log_path.read_text().splitlines() if said in line]
    assert f"terminal {name} " in line, line
    # where it stands: the pane not found, the shared control client not attached yet
    assert "TmuxStream; its pane not found yet; no snapshot placed yet" in line, line
    assert "shared control client starting, 1 replies awaited, 1 lines unsent" in line, line
    client.close()


def test_viewers_outlive_their_control_client_being_detached(agents_server):
    """tmux may detach the shared control client at any moment (a user attaching with
    ``attach -d``, ``detach-client``), with a new viewer's lookup and cut and another
    viewer's keys in flight: the next client carries on. Viewers keep their terminals
    (no ``disconnect``, no dropped socket), each new viewer gets its replay, every key
    arrives once, and both sessions still run."""
    server = agents_server()
    first, second = (server.request("POST", "/api/terminals", {})[1]["name"] for _ in range(2))
    keeper = server.ws(first)
    keeper.wait_for(lambda c: len(c.messages) >= 2)
    for i in range(25):
        viewer = server.ws(second)
        keeper.stdin(f"echo kept-$((1000+{i}))\r")
        time.sleep(0.002 * (i % 10))
        detach_tmux_control_clients(server.state_dir)
        viewer.wait_for(lambda c: len(c.messages) >= 2)
        assert viewer.messages[1][0] == "stdout", (viewer.messages[:2], viewer.log_tail())
        viewer.stdin(f"echo seen-$((2000+{i}))\r")
        viewer.wait_for(f"seen-{2000 + i}")
        viewer.close()
        keeper.wait_for(f"kept-{1000 + i}")
    assert not [m for m in keeper.messages if m[0] == "disconnect"]
    assert [int(n) for n in re.findall(r"kept-(\d+)", keeper.text)] == list(range(1000, 1025))
    _, sessions = server.request("GET", "/api/agents/sessions")
    assert [s["status"] for s in sessions] == ["running", "running"]
    keeper.close()


def test_history_cache_is_bounded_and_gives_way_to_any_change():
    """The older history of a replay is found only at the transcript offset it was
    captured at, never for a stuck transcript, merged only with its own geometry (a
    mismatch drops it), and the oldest entries go past the bound."""
    cache = HistoryCache(max_chars=10)
    at = Geometry(offset=5, history_size=100, width=80, height=24)
    cache.put("a", at, "0123")
    assert cache.get("a", 5, lambda: False) == (at, "0123")
    assert cache.get("a", 6, lambda: False) is None and cache.get("a", 5, lambda: True) is None
    assert cache.merge("a", Kept(at, "0123"), at, None) == "0123"
    resized = Geometry(offset=5, history_size=100, width=60, height=24)
    assert cache.merge("a", Kept(at, "0123"), resized, None) is None
    assert cache.get("a", 5, lambda: False) is None
    assert cache.merge("b", None, at, "456789") == "456789"
    cache.put("c", at, "abcdef")  # 12 chars with b's: b goes
    assert cache.get("b", 5, lambda: False) is None and cache.get("c", 5, lambda: False)
    cache.put("d", at, "x" * 11)  # over the bound alone: not kept
    assert cache.get("d", 5, lambda: False) is None and cache.get("c", 5, lambda: False)


def test_replays_reuse_older_history_only_while_nothing_changed(agents_server):
    """A replay's older history is kept for the next viewer while the terminal prints
    nothing: the replays of an unchanged terminal are the same, and what changed with
    no output at all (a resize reflowing tmux's history, tmux's ``clear-history``) or
    what the terminal printed since shows in the next one."""
    server = agents_server(args=["--TmuxBackend.replay_color_lines=5"])
    name = server.request("POST", "/api/terminals", {})[1]["name"]
    _, [session] = server.request("GET", "/api/agents/sessions")
    tmux = ["tmux", "-S", str(server.state_dir / "tmux" / "socket")]
    target = f"={session['id']}:"

    def run(keys: str, marker: str | Callable[[Any], bool], cols: int = 150) -> None:
        viewer = server.ws(name)
        viewer.wait_for(lambda c: len(c.messages) >= 2)
        viewer.send("set_size", 24, cols)
        width = [*tmux, "display-message", "-p", "-t", target, "#{pane_width}"]
        poll(lambda: subprocess.run(width, capture_output=True, text=True).stdout == f"{cols}\n")
        viewer.stdin(keys)
        viewer.wait_for(marker)
        viewer.close()

    def numbers(prefix: str, text: str) -> list[int]:
        return [int(n) for n in re.findall(prefix + r"-(\d+)-", text)]

    def replay() -> str:
        viewer = server.ws(name)
        viewer.wait_for(lambda c: len(c.messages) >= 2)
        viewer.close()
        return str(viewer.messages[1][1])

    # 100-column lines, then cat: it prints nothing when the window is resized
    run("seq -f old-%g-" + "x" * 90 + " 1 300; cat\r", "old-300-x")
    first, second = replay(), replay()
    assert numbers("old", first) == list(range(1, 301))
    assert second == first
    run("", "", cols=60)  # every history line wraps now: tmux's history doubles
    assert numbers("old", replay()) == list(range(1, 301))
    subprocess.run([*tmux, "clear-history", "-t", target], check=True)
    cleared = numbers("old", replay())
    assert cleared and min(cleared) > 280, cleared  # only what the screen shows
    # bash's prompt after the ^C, not only the ^C: a line typed while bash is still
    # taking cat's end is read by nobody (bash drops input typed ahead of its prompt)
    run("\x03", lambda c: "^C" in c.text and c.text.endswith("# "))
    run("seq -f new-%g- 1 100; echo done-$((7*7))\r", "done-49")
    again = replay()
    assert numbers("new", again) == list(range(1, 101))
    assert numbers("old", again) == cleared


@contextlib.contextmanager
def killed_server_kept_by_a_stopped_client(
    backend: TmuxBackend, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], ProcessIdentity]]:
    """A session "old", a control client attached to it and then stopped (SIGSTOP),
    and ``kill-server``: the server now exits only once that client has gone. Yields the
    client and the server's identity; ends the client afterwards."""
    env = {"PATH": os.environ["PATH"]}
    backend.spawn(SpawnRequest("old", ["sleep", "30"], str(tmp_path), env))
    client = subprocess.Popen(
        ["tmux", "-S", str(backend.socket_path), "-C", "attach", "-t", "old"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        poll(lambda: backend._run("list-clients").stdout.strip(), what="the client")
        pid = backend._server_pid()
        server = identify(pid) if pid is not None else None
        assert server is not None
        client.send_signal(signal.SIGSTOP)
        backend._run("kill-server")
        yield client, server
    finally:
        client.kill()
        client.wait()
        assert client.stdin is not None
        client.stdin.close()


def test_a_spawn_waits_for_a_killed_server_that_a_client_keeps(backend, tmp_path):
    """After ``kill-server`` tmux waits for its clients to leave before it exits, and
    until then every new command fails ("server exited unexpectedly"). A spawn then
    (a server starting right after a pod restart's kill, with an old control client
    slow to go) waits for that server to be gone and starts a new one; here a stopped
    client holds it 1 s."""
    with killed_server_kept_by_a_stopped_client(backend, tmp_path) as (client, _):
        refused = subprocess.run(
            ["tmux", "-S", str(backend.socket_path), "list-sessions"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert "server exited unexpectedly" in refused.stderr  # exiting, held by the client
        threading.Timer(1.0, client.kill).start()
        env = {"PATH": os.environ["PATH"]}
        backend.spawn(SpawnRequest("new", ["sleep", "30"], str(tmp_path), env))
        assert client.poll() is not None  # made only once the client had gone
        assert [s.session_id for s in backend.list_live()] == ["new"]


def test_a_spawn_ends_a_killed_server_that_a_client_keeps_for_good(backend, tmp_path, monkeypatch):
    """A client that never leaves (stopped here; in tmux 3.3a also a control client
    whose reader died with output queued) keeps a killed server exiting for good, and
    every start of a session there would fail ("server exited unexpectedly": a restore
    after a pod restart's kill failed so). Past the wait, the spawn ends that server,
    found by its socket, and starts a new one; the stopped client is left alone."""
    monkeypatch.setattr(tmux_backend, "EXITING_WAIT", 0.5)
    with killed_server_kept_by_a_stopped_client(backend, tmp_path) as (client, old_server):
        env = {"PATH": os.environ["PATH"]}
        backend.spawn(SpawnRequest("new", ["sleep", "30"], str(tmp_path), env))
        assert [s.session_id for s in backend.list_live()] == ["new"]
        assert ended_within(old_server, 0)  # gone (or a zombie nobody reaped yet)
        assert client.poll() is None  # not ours to end


def test_a_spawn_while_the_last_session_is_removed_starts(backend, tmp_path):
    """tmux exits once its last session ends (exit-empty); a session made while another
    thread removes the last one reached the exiting server and failed ("server exited
    unexpectedly": a 503 to the user, 8 of 149 rounds here before the retry). Each
    round removes the only session and spawns the next at once, from two threads."""
    env = {"PATH": os.environ["PATH"]}
    rng = random.Random(3)
    backend.spawn(SpawnRequest("s0", ["sleep", "30"], str(tmp_path), env))
    for n in range(1, 101):
        remover = threading.Thread(target=backend.remove, args=(f"s{n - 1}",))
        remover.start()
        time.sleep(rng.uniform(0, 0.004))
        try:
            backend.spawn(SpawnRequest(f"s{n}", ["sleep", "30"], str(tmp_path), env))
        finally:
            remover.join()
        assert [s.session_id for s in backend.list_live()] == [f"s{n}"]


def test_a_stream_closed_before_its_pane_is_found_leaves_the_control_client_working(backend):
    """A viewer that leaves at once (a page closed as it opened a tab): its stream is
    closed while its first snapshot waits for the pane to be found. The reply that then
    arrives must not fail in the control client's reader (it set a result on the
    snapshot's cancelled future: ``InvalidStateError``, which ended the reader), and a
    viewer that comes next, on the same control client, gets its screen."""
    backend.spawn(SpawnRequest("gone", ["sh", "-c", "echo GONE-$((6*7)); exec sleep 60"], "/", {}))
    backend.spawn(SpawnRequest("next", ["sh", "-c", "echo NEXT-$((6*8)); exec sleep 60"], "/", {}))

    async def scenario() -> tuple[list[object], str]:
        loop = asyncio.get_running_loop()
        errors: list[object] = []
        loop.set_exception_handler(lambda _, context: errors.append(context.get("exception")))
        first = backend.attach("gone", Listener())
        first.snapshot(lambda _: None)
        await asyncio.sleep(0)  # its snapshot waits for the pane now (no reply yet:
        first.close()  # the client is still starting); closed, that wait is cancelled
        await asyncio.sleep(0.5)  # the pane's reply comes, to a closed stream
        screen: asyncio.Future[str] = loop.create_future()
        second = backend.attach("next", Listener())
        second.snapshot(lambda text: screen.done() or screen.set_result(text))
        try:
            return errors, await asyncio.wait_for(screen, 20)
        finally:
            second.close()
            await backend.detach_streams()

    errors, screen = asyncio.run(scenario())
    assert errors == [], errors
    assert "NEXT-48" in screen


def test_a_stream_that_joins_while_the_control_client_fails_to_attach_gets_its_screen(backend):
    """The shared control client tries to attach to a tmux server that is gone (the
    last session of the old one just ended: a stream of it asked for its status), and
    a viewer of a session of the server started meanwhile joins before that try has
    failed. The try's failure was everyone's: the new stream was told the control
    client was lost and that its session was not found, and never got its screen (a
    tab that stays blank, or is dropped to reconnect). A command sent during a failed
    try is tried on a new client (at most ``ATTACH_TRIES`` times). The order is forced:
    the failed try is held until the new stream has joined."""

    async def scenario() -> tuple[str, list[int | None]]:
        loop = asyncio.get_running_loop()
        control = backend.control()
        real_attach = control._attach
        failed, joined = asyncio.Event(), asyncio.Event()

        async def attach() -> bool:
            attached = await real_attach()
            if not attached and not failed.is_set():
                failed.set()  # no server: this try failed; the new stream joins now
                await joined.wait()
            return attached

        control._attach = attach  # type: ignore[method-assign]
        control.command("display-message -p old")  # an old stream's question: no server
        await asyncio.wait_for(failed.wait(), 20)
        await asyncio.to_thread(
            backend.spawn,
            SpawnRequest("new", ["sh", "-c", "echo NEW-$((6*9)); exec sleep 60"], "/", {}),
        )
        listener = Listener()
        screen: asyncio.Future[str] = loop.create_future()
        stream = backend.attach("new", listener)
        stream.snapshot(lambda text: screen.done() or screen.set_result(text))
        await asyncio.sleep(0)
        joined.set()
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(screen), 10)
            for _ in range(100):  # what it printed: in its screen, or right after it
                shown = (screen.result() if screen.done() else "") + "".join(listener.output)
                if "NEW-54" in shown or not screen.done():
                    break
                await asyncio.sleep(0.1)
            return shown, listener.ended
        finally:
            stream.close()
            await backend.detach_streams()

    screen, ended = asyncio.run(scenario())
    assert ended == [], ended  # its session runs: no end to report
    assert "NEW-54" in screen, screen


def test_a_live_stream_whose_client_was_detached_is_told_what_it_missed(backend):
    """A session without a transcript writer (made outside jupyter_agents, adopted) is
    streamed through ``%output`` of a control client of its own. When tmux detaches
    that client (a user's ``attach -d``), what the pane prints until the client is back
    reaches no one: the listener must be told output was lost (it redraws its viewers
    from a snapshot), or the viewers never see it (``.ci/hunt`` of 56d3d3a: the output
    of a command typed then never came). The order is forced: the client's next attach
    is held until the pane has printed."""
    backend.spawn(SpawnRequest("keeper", ["sleep", "60"], "/", {}))
    echo = "import sys\nfor line in sys.stdin: print('GOT-' + line.strip(), flush=True)"
    tmux = ["tmux", "-S", str(backend.socket_path)]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "ext", sys.executable, "-c", echo], check=True
    )

    def printed(text: str) -> bool:
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "=ext:"], capture_output=True, text=True
        ).stdout
        return text in screen

    async def scenario() -> tuple[Listener, bool, str]:
        loop = asyncio.get_running_loop()
        listener = Listener()
        stream = backend.attach("ext", listener)
        screen: asyncio.Future[str] = loop.create_future()
        stream.snapshot(lambda text: screen.done() or screen.set_result(text))
        try:
            await asyncio.wait_for(screen, 20)
            live = stream._live  # type: ignore[attr-defined]
            assert live is not None  # the premise: streamed through a client of its own
            real_attach = live._attach
            held, release = asyncio.Event(), asyncio.Event()

            async def attach() -> bool:
                held.set()
                await release.wait()
                return await real_attach()

            live._attach = attach
            await asyncio.to_thread(subprocess.run, [*tmux, "detach-client", "-s", "ext"])
            await asyncio.wait_for(held.wait(), 20)  # gone, and not back until released
            await asyncio.to_thread(
                subprocess.run, [*tmux, "send-keys", "-t", "=ext:", "GAP", "Enter"]
            )
            await asyncio.to_thread(poll, lambda: printed("GOT-GAP"), 10, "the pane's output")
            missed = "GOT-GAP" not in "".join(listener.output)
            release.set()
            for _ in range(200):
                if listener.lost:
                    break
                await asyncio.sleep(0.05)
            stream.write("AFTER\r")  # and the output after it comes through that client
            for _ in range(200):
                if "GOT-AFTER" in "".join(listener.output):
                    break
                await asyncio.sleep(0.05)
            return listener, missed, "".join(listener.output)
        finally:
            # aclose: its own control client's process is waited for; only closed, the
            # loop could end before that process's exit was handled, leaving its transport
            # unclosed, which a later test's garbage collection reported
            await stream.aclose()
            await backend.detach_streams()

    listener, missed, output = asyncio.run(scenario())
    assert missed  # the premise: the output came while no client of ours was attached
    assert listener.lost == 1
    assert "GOT-AFTER" in output, output
    assert listener.ended == []


def test_a_snapshot_that_raises_is_logged_and_its_stream_reported_lost(
    backend, monkeypatch, caplog
):
    """Any error while a first snapshot is taken (here inotify refusing a watch: the
    user's 128 inotify instances in use, say) ended its task, said nothing until the
    task was collected, and left the viewer with no screen and no output for good: a
    blank tab. It is logged, and the stream reported lost (its viewers reconnect)."""
    from jupyter_agents.backends.tmux import tail

    backend.spawn(SpawnRequest("s", ["sh", "-c", "echo S-$((6*7)); exec sleep 60"], "/", {}))

    def refuse(path: Path, callback: Callable[[set[str]], None]) -> Callable[[], None]:
        raise OSError(24, "inotify_init1 failed")

    monkeypatch.setattr(tail, "subscribe", refuse)
    listener = Listener()
    ended = listener.ended

    async def scenario() -> None:
        stream = backend.attach("s", listener)
        stream.snapshot(lambda _: None)
        for _ in range(100):
            if ended:
                break
            await asyncio.sleep(0.05)
        stream.close()
        await backend.detach_streams()

    asyncio.run(scenario())
    assert ended == [None]
    assert "the stream of tmux session s failed" in caplog.text
