"""Where a tmux cut falls in a transcript its writer has not landed yet: the pane's
output after the capture (``%output``) against a real transcript on disk, with the
writer held back by the test (a forced interleaving of the race a loaded machine
found: a viewer got 585 lines twice)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jupyter_agents.backends.tmux import cut
from jupyter_agents.terminal.transcripts import Transcript

PROMPT = b"$ i=0; while ...; done\r\n"


def lines(first: int, last: int) -> bytes:
    return b"".join(b"L%d\r\n" % i for i in range(first, last + 1))


class HeldWriter:
    """The transcript of one session, written by the test as ``pipe-pane``'s writer
    would, at the moments the test chooses."""

    def __init__(self, tmp_path: Path) -> None:
        self.directory = tmp_path / "s1"
        self.directory.mkdir()
        self.file = self.directory / "0.log"
        self.file.write_bytes(b"")
        self.transcript = Transcript("s1", self.directory)

    def land(self, data: bytes) -> None:
        with self.file.open("ab") as f:
            f.write(data)


async def place(
    writer: HeldWriter, floor: int, after: bytes, later: list[tuple[float, bytes]]
) -> int | None:
    """The cut :func:`cut.anchor` gives for a pane whose whole output after the capture
    is ``after``, while the writer lands each of ``later`` after its delay."""
    loop = asyncio.get_running_loop()
    for delay, data in later:
        loop.call_later(delay, writer.land, data)
    more = asyncio.Event()
    more.set()
    return await cut.anchor(bytearray(after), more, writer.transcript, floor)


@pytest.mark.parametrize("held", [0.0, 0.1, 0.4])
def test_a_line_end_alone_after_the_capture_is_placed_at_the_capture(tmp_path, held):
    """The pane had printed L1..L600 (the last line's CRLF not yet read) when the
    capture ran; the transcript then held only the prompt (its writer lagged); the
    ``%output`` after the capture is the CRLF alone, then the pane pauses. The writer
    lands the lines, and the CRLF ``held`` seconds later. The cut is after "L600", not
    after "L1", the first CRLF past the cut's floor."""
    writer = HeldWriter(tmp_path)
    writer.land(PROMPT)
    floor = len(PROMPT)
    lag = lines(1, 600)[:-2]  # "L1\r\n ... L600"
    writer.land(lag)
    at = asyncio.run(place(writer, floor, b"\r\n", [(held, b"\r\n")]))
    assert at == floor + len(lag)


def test_a_few_bytes_that_occur_once_past_the_floor_are_placed_there(tmp_path):
    """A spinner's frame after the capture, the same frame also before the cut's floor
    and the writer landing its end late: placed where it occurs past the floor."""
    writer = HeldWriter(tmp_path)
    frame = b"\x1b[2;1H/ working"
    writer.land(PROMPT + frame + b"\x1b[2;1H| working")
    floor = writer.transcript.size()
    writer.land(frame[:10])
    at = asyncio.run(place(writer, floor, frame, [(0.1, frame[10:])]))
    assert at == floor


def test_a_few_bytes_that_never_tell_where_they_are_place_nothing(tmp_path):
    """A CRLF after the capture while the writer never lands it: no place within the
    limit (the stream goes on through control mode), never the first CRLF."""
    writer = HeldWriter(tmp_path)
    writer.land(PROMPT + lines(1, 600)[:-2])
    assert asyncio.run(place(writer, len(PROMPT), b"\r\n", [])) is None


def test_no_output_after_the_capture_is_placed_at_the_quiet_end(tmp_path):
    writer = HeldWriter(tmp_path)
    writer.land(PROMPT + lines(1, 10))
    assert asyncio.run(place(writer, len(PROMPT), b"", [])) == len(PROMPT + lines(1, 10))


def test_a_full_anchor_is_left_to_locate(tmp_path):
    """ANCHOR bytes after the capture: :func:`cut.locate` finds them, past the floor."""
    writer = HeldWriter(tmp_path)
    writer.land(PROMPT + lines(1, 800))
    after = lines(601, 800)
    assert len(after) >= cut.ANCHOR
    assert asyncio.run(place(writer, len(PROMPT), after, [])) is None
    found = asyncio.run(cut.locate(writer.transcript, len(PROMPT), after[: cut.ANCHOR]))
    assert found == len(PROMPT + lines(1, 600))
