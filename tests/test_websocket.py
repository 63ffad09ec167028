"""The terminado protocol under bad input, byte-exact stdin, and the replay/stream cut."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from xterm_probe import render

from jupyter_agents.pytest_plugin import ServerProcess, TermClient, poll
from jupyter_agents.terminal.transcripts import Transcript

pytestmark = pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)


def open_terminal(server: ServerProcess) -> TermClient:
    status, model = server.request("POST", "/api/terminals", {})
    assert status == 200
    client = server.ws(model["name"])
    client.wait_for(lambda c: len(c.messages) >= 2)
    return client


def test_malformed_frames_are_ignored(agents_server):
    server = agents_server()
    c = open_terminal(server)
    for frame in [
        "not json",
        "{}",
        "[]",
        "[1, 2]",
        '["stdin"]',
        '["stdin", 5]',
        '["set_size", 1e9, 80]',
        '["set_size", 100000000, 100000000, 0, 0]',
        '["set_size", 0, 80]',
        '["set_size", -5, -5]',
        '["set_size", "24", "80"]',
        '["set_size", true, true]',
        '["unknown", 1]',
        '["stdin", "' + "x" * 0 + '"]',
    ]:
        c.ws.send(frame)
    c.ws.send_binary(b"\x00\x01binary")
    c.stdin("echo STILL-$((5*5))\r")
    c.wait_for("STILL-25")
    status, sessions = server.request("GET", "/api/agents/sessions")
    assert status == 200 and sessions[0]["rows"] == 24 and sessions[0]["cols"] == 80
    c.close()


def test_stdin_bytes_arrive_unchanged(agents_server):
    server = agents_server()
    c = open_terminal(server)
    payload = 'a;\\#{"}$(x)`\x01\x02\x1b[A\x7f\té漢字\x1bOA;'
    size = len(payload.encode())
    c.stdin(
        f"stty raw -echo; head -c {size} | od -An -tx1 -v | tr -d ' \\n'; "
        "echo; echo ODDONE; stty sane\r"
    )
    c.wait_for("stty sane")
    c.drain(0.3)
    c.stdin(payload)
    c.wait_for("ODDONE\n")
    hexes = re.findall(r"([0-9a-f]{40,})", c.text)
    assert hexes[-1] == payload.encode().hex()
    c.close()


def test_the_client_that_typed_last_sets_the_size(agents_server):
    """Two clients of one session (a desktop and a phone): the one that typed last sets
    the pty size, as ``stty size`` in the session shows; the other resizing without
    typing changes nothing; once the typist leaves, the remaining client's size
    applies. (Before: the smallest client's size, so a phone opening a session shrank
    the desktop's terminal to 27 columns.)"""
    server = agents_server()
    desk = open_terminal(server)
    name = server.request("GET", "/api/terminals")[1][0]["name"]
    desk.send("set_size", 43, 148, 800, 1400)

    def size(client: TermClient, tag: str) -> str:
        client.stdin(f"echo {tag}=$(stty size | tr ' ' x)\r")
        client.wait_for(lambda c: re.search(tag + r"=\d+x\d+", c.text) is not None)
        return re.findall(tag + r"=(\d+x\d+)", desk.text + client.text)[-1]

    def told(client: TermClient) -> list[object]:
        """The ``agents_size`` messages ``client`` got, in order."""
        return [m[1] for m in client.messages if m[0] == "agents_size"]

    assert size(desk, "DESK") == "43x148"
    assert told(desk) == []  # a lone client hears nothing beyond the stock protocol
    phone = server.ws(name)
    phone.wait_for(lambda c: len(c.messages) >= 2)
    phone.send("set_size", 34, 27, 700, 360)  # opened to look, not to type
    phone.drain(0.5)
    assert size(desk, "STILL") == "43x148"  # the desktop typed last
    # the phone is told the terminal's size (its client shows it so), the desk nothing
    phone.wait_for(lambda c: told(c) == [{"rows": 43, "cols": 148}])
    assert told(desk) == []
    assert size(phone, "PHONE") == "34x27"  # now the phone did
    phone.wait_for(lambda c: told(c) == [{"rows": 43, "cols": 148}, None])  # its own now
    desk.wait_for(lambda c: told(c) == [{"rows": 34, "cols": 27}])  # the desk is told

    def redraws(client: TermClient) -> int:
        """The replays ``client`` got (each starts with a reset)."""
        return sum(1 for m in client.messages if m[0] == "stdout" and "\x1bc" in m[1])

    desk.wait_for(lambda c: redraws(c) == 2)  # on connect, and at the size it was told
    # the desktop is dragged to a new size, without typing: a set_size a frame (60/s)
    for cols in range(91, 121):
        desk.send("set_size", 40, cols, 800, cols * 10)
        time.sleep(1 / 60)
    desk.wait_for(lambda c: redraws(c) == 3)
    assert size(phone, "AGAIN") == "34x27"
    # told again once, and redrawn once, when the drag settled (not thirty times)
    assert told(desk) == [{"rows": 34, "cols": 27}] * 2 and redraws(desk) == 3
    phone.close()
    desk.drain(0.5)
    assert size(desk, "AFTER") == "40x120"
    # told again after its resize (its client redrew at its own size), then freed
    desk.wait_for(lambda c: told(c) == [{"rows": 34, "cols": 27}] * 2 + [None])
    desk.close()


def rendered(texts: list[str], rows: int = 24, cols: int = 80) -> list[list[str]]:
    """What a terminal tab shows after each of ``texts`` (a viewer's output), rendered by
    @xterm/headless (JupyterLab's engine) in one run: its history and screen, each line
    without trailing blanks."""
    states = render([[t.encode()] for t in texts], cols, rows, scrollback=200_000, styles=False)
    return [[line.rstrip() for line in state["lines"]] for state in states]


def rendered_lines(text: str) -> list[str]:
    """:func:`rendered` for one viewer."""
    return rendered([text])[0]


def test_second_viewer_joins_mid_stream_without_loss_or_duplication(agents_server):
    server = agents_server()
    first = open_terminal(server)
    name = server.request("GET", "/api/terminals")[1][0]["name"]
    first.stdin(
        "for i in $(seq 1 4000); do echo N$i; [ $((i % 100)) = 0 ] && sleep 0.05; "
        "done; echo LOOP-DONE\r"
    )
    first.wait_for("N500\r\n")
    second = server.ws(name)  # joins while the loop is printing
    second.wait_for("LOOP-DONE", timeout=60)
    second.drain(0.5)
    assert "N3999" not in second.messages[1][1]  # it did join mid-stream
    assert second.messages[0] == ["setup", {}]
    lines = rendered_lines(second.text)
    numbers = [int(m.group(1)) for line in lines if (m := re.fullmatch(r"N(\d+)", line))]
    assert numbers == list(range(1, 4001))
    first.close()
    second.close()


def test_a_viewer_joining_an_idle_terminal_gets_each_line_once(agents_server):
    """A viewer opens a terminal nobody views that printed and then was idle for longer
    than tmux's ``window_activity`` can blur (whole seconds), so the tmux cut takes the
    transcript's size before the capture with no quiet period: the lines printed before
    are in its replay once, and the lines printed after reach it once."""
    server = agents_server()
    first = open_terminal(server)
    name = server.request("GET", "/api/terminals")[1][0]["name"]
    first.stdin("seq -f B%g 1 300; echo IDLE-$((6*7))\r")
    first.wait_for("IDLE-42")
    first.close()  # its stream ends: the next viewer's cut is a first one
    time.sleep(2.5)
    second = server.ws(name)
    second.wait_for(lambda c: len(c.messages) >= 2)
    assert "B300" in second.messages[1][1]  # in the replay
    second.stdin("seq -f A%g 1 300; echo MORE-$((6*7))\r")
    second.wait_for("MORE-42")
    second.drain(0.3)
    lines = rendered_lines(second.text)
    for prefix in ("B", "A"):
        numbers = [int(m.group(1)) for x in lines if (m := re.fullmatch(prefix + r"(\d+)", x))]
        assert numbers == list(range(1, 301)), f"{prefix} lines lost or doubled at the cut"
    assert sum(x.endswith("seq -f A%g 1 300; echo MORE-$((6*7))") for x in lines) == 1
    second.close()


def test_every_byte_exactly_once_across_many_joins_while_printing(agents_server):
    """A producer prints without pause while eight viewers join one after another: each
    sees every line after its replay exactly once, in order, with nothing missing at
    its cut; and the transcript holds exactly what the program printed."""
    server = agents_server()
    first = open_terminal(server)
    name = server.request("GET", "/api/terminals")[1][0]["name"]
    first.stdin("i=0; while [ $i -lt 60000 ]; do i=$((i+1)); echo L$i; done; echo LOOP-$((6*7))\r")

    def printed(marker: str) -> Callable[[TermClient], bool]:
        def seen(c: TermClient) -> bool:  # in what the last frame added (the text is long)
            last = c.messages[-1] if c.messages else []
            return marker in c.text[-len(str(last[1:])) - len(marker) :]

        return seen

    joined = []
    for k in range(8):
        first.wait_for(printed(f"L{(k + 1) * 5000}\r\n"), timeout=60)
        joined.append(server.ws(name))
    for viewer in [first, *joined]:
        viewer.wait_for(printed("LOOP-42"), timeout=60)
        viewer.drain(0.3)
    for lines in rendered([viewer.text for viewer in joined]):
        numbers = [int(m.group(1)) for line in lines if (m := re.fullmatch(r"L(\d+)", line))]
        # the replay starts within tmux's history / the broker's kept bytes; from there
        # on, every number once, in order, up to the last
        assert numbers and numbers[-1] == 60000
        assert numbers == list(range(numbers[0], 60001)), "a line lost or doubled at a cut"
    status, sessions = server.request("GET", "/api/agents/sessions")
    assert status == 200
    sid = sessions[0]["id"]
    log = server.request("GET", f"/api/agents/sessions/{sid}/log")[1].decode()
    printed = "".join(f"L{i}\r\n" for i in range(1, 60001))
    assert printed + "LOOP-42" in log
    for viewer in [first, *joined]:
        viewer.close()


def test_a_viewer_gets_every_byte_once_across_new_segments(agents_server):
    """Output that fills five transcript segments while a viewer watches reaches it
    whole, each byte once and in order, as the program printed it: reads that end where
    a segment ends go on in the next one. (The cap keeps all of it: a stream that falls
    further behind than the cap skips what was dropped, which a smaller one shows under
    load.)"""
    server = agents_server(args=["--AgentsApp.transcript_max_bytes=2097152"])  # 256 KiB each
    client = open_terminal(server)
    client.stdin("seq -f 'S%06g' 1 130000; echo SEQ-$((6*7))\r")  # 1.17 MB
    client.wait_for("SEQ-42\r\n", timeout=120)
    numbers = [int(n) for n in re.findall(r"S(\d{6})\r\n", client.text)]
    wrong = next((i for i, n in enumerate(numbers) if n != i + 1), len(numbers))
    assert numbers == list(range(1, 130001)), (
        f"{len(numbers)} lines; line {wrong + 1} is {numbers[wrong : wrong + 3]}; "
        f"{[len(m[1]) for m in client.messages[-5:] if len(m) > 1]} last frames; "
        f"{client.text[-300:]!r}"
    )
    first = client.text.index("S000001\r\n")
    assert client.text[first:].startswith("".join(f"S{i:06d}\r\n" for i in range(1, 130001)))
    client.close()


def test_exit_sends_disconnect_and_records_exit_code(agents_server):
    server = agents_server()
    c = open_terminal(server)
    c.stdin("exit 7\r")
    c.wait_for(lambda c: ["disconnect", 1] in c.messages, timeout=20)
    _, sessions = server.request("GET", "/api/agents/sessions")
    assert sessions[0]["status"] == "exited" and sessions[0]["exit_code"] == 7
    assert server.request("GET", "/api/terminals") == (200, [])


def test_a_viewer_that_reads_nothing_is_caught_up_not_buffered(agents_server):
    """One slow browser never makes the server hold a flood, nor slows the others: past
    its bound of unsent bytes it gets no live output; once it reads again it gets a fresh
    replay (screen and history), then live output."""
    import json

    import psutil

    def read_until(client: TermClient, marker: str) -> int:
        """Read as a browser does, without keeping it all; the text bytes received."""
        tail, received = "", 0
        client.ws.settimeout(60)
        while marker not in tail:
            msg = json.loads(client.ws.recv())
            if msg[0] == "stdout":
                received += len(msg[1])
                tail = (tail + msg[1])[-200:]
        return received

    server = agents_server()
    fast = open_terminal(server)
    name = server.request("GET", "/api/terminals")[1][0]["name"]
    slow = server.ws(name)  # reads nothing until the flood is over
    slow.wait_for(lambda c: len(c.messages) >= 2)
    assert server.proc is not None
    server_process = psutil.Process(server.proc.pid)
    before = server_process.memory_info().rss
    fast.stdin("head -c 45000000 /dev/zero | base64 -w 100; echo FLOOD-$((40+2))\r")
    assert read_until(fast, "FLOOD-42") > 1_000_000
    grown = server_process.memory_info().rss - before
    assert grown < 45_000_000, grown  # not the 60 MB the slow viewer missed
    assert read_until(slow, "FLOOD-42") > 0  # once it reads: the current screen
    slow.stdin("echo after-$((6*7))\r")
    assert read_until(slow, "after-42") > 0  # and live output again


def test_output_for_a_viewer_that_pauses_is_held_and_sent_together(agents_server):
    """While a viewer's socket is full, its output is held and then sent as one message:
    a few writes in flight, not one per chunk of output (thousands of pending writes,
    each a future and a task, made the garbage collector stop the server for 50-120 ms
    under a flood). It arrives whole, once, in order."""
    server = agents_server()
    client = open_terminal(server)
    sid = server.request("GET", "/api/agents/sessions")[1][0]["id"]
    start = len(client.messages)
    client.stdin("seq 1 600000; echo END-$((6*7))\r")  # 4.5 MB, under the lag bound

    transcript = Transcript(sid, server.state_dir / "transcripts" / sid)

    def printed() -> bool:  # read nothing until the session has printed it all
        return b"END-42" in transcript.tail(100)

    poll(printed, timeout=60, what="the output in the transcript")
    client.wait_for("END-42", timeout=60)
    sizes = [len(m[1]) for m in client.messages[start:] if m[0] == "stdout"]
    assert max(sizes) > 256 * 1024, sizes  # more than a stream ever delivers at once
    printed = client.text[client.text.rindex("$((6*7))") :]  # after the command line
    numbers = re.findall(r"(?<![\d-])(\d+)\r\n", printed)  # not END-42
    assert numbers == [str(i) for i in range(1, 600001)]
