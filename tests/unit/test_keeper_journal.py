"""A keeper journals each read of its child's output as one frame (moved by the
kernel with splice where the file system takes it), and the frame stands for the
reference's chunks of that read, a seq each; the daemon's side cuts it back into
those chunks. Real pipes, real segment files, a real socketpair."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from execserver.keeper.program import (
    CHUNK_BYTES,
    FRAME,
    KIND_EXIT,
    KIND_PTY,
    KIND_STDOUT,
    SEGMENT_BYTES,
    Journal,
    pieces,
)
from execserver.processes.kept import KeeperOutput


def test_an_output_frame_stands_for_the_references_chunks_of_its_read() -> None:
    assert pieces(KIND_STDOUT, 1) == 1
    assert pieces(KIND_STDOUT, CHUNK_BYTES[KIND_STDOUT]) == 1
    assert pieces(KIND_STDOUT, CHUNK_BYTES[KIND_STDOUT] + 1) == 2
    assert pieces(KIND_PTY, 3 * 4095) == 3
    assert pieces(KIND_EXIT, 100_000) == 1


def test_a_spliced_read_is_one_whole_frame_numbered_by_its_chunks(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "journal"))
    read_end, write_end = os.pipe2(os.O_NONBLOCK)
    try:
        data = os.urandom(20_000)
        os.write(write_end, data)
        count = journal.splice_from(read_end, 1 << 18, KIND_STDOUT, 7)
        assert count == len(data)
        with pytest.raises(BlockingIOError):  # the pipe is empty now
            journal.splice_from(read_end, 1 << 18, KIND_STDOUT, 10)
        first, last, fd, size = journal.segments[0]
        assert (first, last, size) == (7, 9, FRAME.size + len(data))  # 8192 + 8192 + 3616
        raw = os.pread(fd, size + 100, 0)
        assert FRAME.unpack_from(raw) == (7, KIND_STDOUT, len(data))
        assert raw[FRAME.size :] == data
        journal.append([FRAME.pack(10, KIND_EXIT, 2), b"{}"], 10, 10)
        # A re-adopting daemon's resume from a seq inside the frame starts at the frame.
        assert journal.position_of(8) == (0, 0)
        assert journal.position_of(10) == (0, FRAME.size + len(data))
    finally:
        os.close(read_end)
        os.close(write_end)


async def test_the_daemon_cuts_a_frame_into_chunks_and_skips_what_it_holds() -> None:
    mine, keepers = socket.socketpair()
    exits: list[int] = []
    output = KeeperOutput(
        mine,
        retained_bytes=1 << 20,
        reader_attached=lambda: False,
        on_exit=lambda seq, info: exits.append(seq),
        on_closed=lambda seq: None,
        on_gone=lambda: None,
    )
    try:
        data = os.urandom(20_000)
        frame = FRAME.pack(1, KIND_STDOUT, len(data)) + data
        # The same frame twice (a replay after a re-adoption), then the exit.
        keepers.sendall(frame + frame + FRAME.pack(4, KIND_EXIT, 2) + b"{}")
        while not exits:
            await output.wait_change(5)
        chunks = output.log.since(0)
        assert [(c.seq, len(c.data)) for c in chunks] == [(1, 8192), (2, 8192), (3, 3616)]
        assert b"".join(c.data for c in chunks) == data
        assert exits == [4]
    finally:
        output.close()
        keepers.close()
        await asyncio.sleep(0)


def test_an_acknowledged_segment_is_written_again_and_its_old_bytes_never_read(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "journal"
    journal = Journal(str(directory))
    big = os.urandom(SEGMENT_BYTES)  # one frame fills a segment
    journal.append([FRAME.pack(1, KIND_EXIT, len(big)), big], 1, 1)
    journal.append([FRAME.pack(2, KIND_EXIT, 1), b"x"], 2, 2)  # the second segment
    first_inode = os.stat(directory / f"{1:020d}.seg").st_ino
    journal.ack(1)  # the first segment is done with: kept as a spare, not deleted
    assert [p.name for p in directory.iterdir() if p.name.startswith("spare-")] != []
    assert not (directory / f"{1:020d}.seg").exists()
    journal.append([FRAME.pack(3, KIND_EXIT, len(big)), big], 3, 3)  # fills the second
    journal.append([FRAME.pack(4, KIND_EXIT, 2), b"{}"], 4, 4)  # a third: the spare
    reused = directory / f"{4:020d}.seg"
    assert os.stat(reused).st_ino == first_inode
    first, last, fd, size = journal.segments[-1]
    assert (first, last, size) == (4, 4, FRAME.size + 2)
    # Past its size the file still holds the old frame's bytes: nothing reads them.
    assert os.stat(reused).st_size > size
    assert journal.position_of(4) == (len(journal.segments) - 1, 0)
    assert os.pread(fd, size, 0) == FRAME.pack(4, KIND_EXIT, 2) + b"{}"
