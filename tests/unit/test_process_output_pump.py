"""``OutputPump`` (execserver/processes/output.py) on real pipes, a real pty and a real
loop: chunking and numbering, back-pressure, readers' wake-ups, the fds' ends."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import weakref
from collections.abc import Callable

import pytest

from execserver.processes.output import (
    CHUNKS_PER_READ,
    PAUSE_BACKLOG,
    PIPE_CHUNK,
    RESUME_BACKLOG,
    OutputPump,
)


class _Owner:
    """What a ManagedProcess gives the pump: whether a reader is attached, and a
    record of the fds that ended (each still open when it is reported)."""

    def __init__(self, attached: bool = True) -> None:
        self.attached = attached
        self.ended: list[tuple[int, bool]] = []

    def stream_ended(self, fd: int) -> None:
        self.ended.append((fd, _is_open(fd)))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    return read_end, write_end


def _pump(outputs: dict[int, str], owner: _Owner, *, pty_master: int | None = None) -> OutputPump:
    return OutputPump(
        outputs,
        retained_bytes=1 << 20,
        pty_master=pty_master,
        reader_attached=lambda: owner.attached,
        on_stream_ended=owner.stream_ended,
    )


async def _until(pump: OutputPump, condition: Callable[[], bool], timeout: float = 10) -> None:
    """Until ``condition()`` holds, re-checked at each of the pump's wake-ups."""
    async with asyncio.timeout(timeout):
        while not condition():
            await pump.wait_change(0.05)


def _has_read(pump: OutputPump, total: int) -> bool:
    return pump.output_bytes.get("stdout", 0) >= total


def _paused(pump: OutputPump) -> bool:
    # A call, not the property: mypy would narrow the property across delivered().
    return pump.paused


async def test_output_is_cut_at_the_chunk_size_numbered_in_order_and_the_fd_closed_at_eof() -> None:
    owner = _Owner()
    out_r, out_w = _pipe()
    err_r, err_w = _pipe()
    pump = _pump({out_r: "stdout", err_r: "stderr"}, owner)
    os.write(out_w, b"x" * (PIPE_CHUNK * 2 + 10))
    await _until(pump, lambda: pump.output_bytes.get("stdout") == PIPE_CHUNK * 2 + 10)
    os.write(err_w, b"oops")
    os.close(out_w)
    os.close(err_w)
    await _until(pump, lambda: not pump.streaming)
    chunks = pump.log.since(0)
    assert [c.seq for c in chunks] == [1, 2, 3, 4]
    assert [(c.stream, len(c.data)) for c in chunks] == [
        ("stdout", PIPE_CHUNK),
        ("stdout", PIPE_CHUNK),
        ("stdout", 10),
        ("stderr", 4),
    ]
    assert pump.output_bytes == {"stdout": PIPE_CHUNK * 2 + 10, "stderr": 4}
    # Each end was reported while the fd was still open, then the pump closed it.
    assert sorted(owner.ended) == sorted([(out_r, True), (err_r, True)])
    assert not _is_open(out_r) and not _is_open(err_r)
    assert pump.tail(6) == b"xxoops"


async def test_an_undelivered_backlog_pauses_the_reading_until_delivery_catches_up() -> None:
    owner = _Owner(attached=True)
    read_end, write_end = _pipe()
    pump = _pump({read_end: "stdout"}, owner)
    written = 0
    block = b"y" * PIPE_CHUNK
    try:
        # Fill the pipe again and again while the pump reads, until it pauses.
        async with asyncio.timeout(10):
            while not pump.paused:
                try:
                    written += os.write(write_end, block)
                except BlockingIOError:
                    await asyncio.sleep(0.005)
        backlog = pump.log.last_seq - pump.delivered_seq
        assert PAUSE_BACKLOG < backlog <= PAUSE_BACKLOG + CHUNKS_PER_READ
        await asyncio.sleep(0.1)  # paused: the pipe is no longer read
        assert pump.log.last_seq - pump.delivered_seq == backlog
        # Delivery down to more than RESUME_BACKLOG behind: still paused.
        pump.delivered(pump.log.last_seq - RESUME_BACKLOG - 1)
        assert _paused(pump)
        pump.delivered(pump.log.last_seq - RESUME_BACKLOG)
        assert not _paused(pump)
    finally:
        os.close(write_end)
    # Everything written arrives once delivery keeps up; nothing was evicted.
    async with asyncio.timeout(10):
        while pump.streaming:
            pump.delivered(pump.log.last_seq)
            pump.caught_up()
            await asyncio.sleep(0.005)
    assert pump.output_bytes["stdout"] == written
    assert sum(len(c.data) for c in pump.log.since(0)) == written


async def test_without_an_attached_reader_the_pump_never_pauses() -> None:
    owner = _Owner(attached=False)
    read_end, write_end = _pipe()
    pump = _pump({read_end: "stdout"}, owner)
    total = (PAUSE_BACKLOG + CHUNKS_PER_READ) * 4 * PIPE_CHUNK
    sent = 0
    block = b"z" * PIPE_CHUNK
    async with asyncio.timeout(20):
        while sent < total:
            try:
                sent += os.write(write_end, block)
            except BlockingIOError:
                await asyncio.sleep(0.001)
            assert not pump.paused
    os.close(write_end)
    await _until(pump, lambda: not pump.streaming)
    assert pump.output_bytes["stdout"] == total
    assert pump.log.last_seq - pump.delivered_seq > PAUSE_BACKLOG + CHUNKS_PER_READ


async def test_output_wakes_a_waiting_reader_and_a_timed_out_wait_leaves_no_waiter() -> None:
    owner = _Owner()
    read_end, write_end = _pipe()
    pump = _pump({read_end: "stdout"}, owner)
    for _ in range(50):
        await pump.wait_change(0.001)
    assert len(pump.waiters) == 0
    waiting = asyncio.create_task(pump.wait_change())
    await asyncio.sleep(0.01)
    assert len(pump.waiters) == 1
    os.write(write_end, b"hello")
    await asyncio.wait_for(waiting, 10)
    assert pump.log.since(0)[0].data == b"hello"
    os.close(write_end)
    pump.close_all()


async def test_a_pty_master_is_held_open_after_its_eof_until_released() -> None:
    owner = _Owner()
    master, slave = os.openpty()
    os.set_blocking(master, False)
    pump = _pump({master: "pty"}, owner, pty_master=master)
    os.write(slave, b"bye\n")
    await _until(pump, lambda: pump.output_bytes.get("pty", 0) > 0)
    os.close(slave)  # the last slave fd: the master reads EIO
    await _until(pump, lambda: not pump.streaming)
    assert owner.ended == [(master, True)]
    # Still open: closing it would hang up a child not yet reaped.
    assert _is_open(master)
    pump.release_pty_master()
    assert not _is_open(master)


async def test_once_released_a_pty_master_closes_at_its_eof() -> None:
    owner = _Owner()
    master, slave = os.openpty()
    os.set_blocking(master, False)
    pump = _pump({master: "pty"}, owner, pty_master=master)
    pump.release_pty_master()
    os.close(slave)
    await _until(pump, lambda: not pump.streaming)
    assert not _is_open(master)


@pytest.mark.parametrize("max_bytes", [1, 3, 100])
async def test_tail_is_the_last_bytes_across_chunks(max_bytes: int) -> None:
    owner = _Owner()
    read_end, write_end = _pipe()
    pump = _pump({read_end: "stdout"}, owner)
    for total, part in ((2, b"ab"), (4, b"cd"), (6, b"ef")):  # one chunk each
        os.write(write_end, part)
        await _until(pump, functools.partial(_has_read, pump, total))
    os.close(write_end)
    await _until(pump, lambda: not pump.streaming)
    assert pump.tail(max_bytes) == b"abcdef"[-max_bytes:]


async def test_once_every_fd_ended_the_pump_keeps_no_reference_to_its_owner() -> None:
    # The owner holds the pump and the pump the owner's callbacks: a cycle only a
    # full collection frees, with up to the retained bytes of output in it.
    owner = _Owner()
    read_end, write_end = _pipe()
    pump = _pump({read_end: "stdout"}, owner)
    owner_ref = weakref.ref(owner)
    os.write(write_end, b"data")
    os.close(write_end)
    await _until(pump, lambda: not pump.streaming)
    collecting = gc.isenabled()
    gc.disable()
    try:
        del owner
        assert owner_ref() is None  # freed by reference counting alone
    finally:
        if collecting:
            gc.enable()
    assert pump.tail(4) == b"data"
