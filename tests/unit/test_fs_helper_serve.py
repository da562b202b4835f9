"""The persistent fs helper's request loop (``program.serve``) on real pipes,
real threads and real files, outside any sandbox: pipelining, a stuck operation,
and how the loop ends."""

from __future__ import annotations

import _thread
import os
import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from execserver.fs.sandboxed.frames import Request, Response, frame, response_decoder
from execserver.fs.sandboxed.msgpack_lite import DecodeError
from execserver.fs.sandboxed.program import serve
from execserver.fs.sandboxed.protocol import HEADER, OK, READY_ID

TIMEOUT_S = 10.0


class RunningHelper:
    """``serve`` on a thread, fed through one pipe and answering through another."""

    def __init__(self) -> None:
        self.request_read, self.request_write = os.pipe()
        self.response_read, self.response_write = os.pipe()
        self.raised: list[BaseException] = []
        self.threads_before = _thread._count()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        ready = self.receive()
        assert (ready.id, ready.kind, ready.value) == (READY_ID, OK, None)

    def _serve(self) -> None:
        try:
            serve(self.request_read, self.response_write)
        except BaseException as exc:
            self.raised.append(exc)

    def send(self, request: Request) -> None:
        os.write(self.request_write, frame(request))

    def receive(self) -> Response:
        header = self._read_exactly(HEADER.size)
        (size,) = HEADER.unpack(header)
        return response_decoder.decode(self._read_exactly(size))

    def _read_exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            ready, _, _ = select.select([self.response_read], [], [], TIMEOUT_S)
            assert ready, f"no answer within {TIMEOUT_S} s"
            chunk = os.read(self.response_read, size - len(data))
            assert chunk, "the helper closed its output"
            data += chunk
        return data

    def close_requests(self) -> None:
        os.close(self.request_write)
        self.request_write = -1

    def close(self) -> None:
        if self.request_write >= 0:
            os.close(self.request_write)
        self.thread.join(TIMEOUT_S)
        for fd in (self.request_read, self.response_read, self.response_write):
            os.close(fd)


@pytest.fixture
def helper() -> Iterator[RunningHelper]:
    running = RunningHelper()
    try:
        yield running
    finally:
        running.close()


def test_the_first_frame_says_ready_before_a_request_is_read() -> None:
    request_read, request_write = os.pipe()
    response_read, response_write = os.pipe()
    # Nothing is ever written to the request pipe: the frame cannot be an answer.
    thread = threading.Thread(target=serve, args=(request_read, response_write), daemon=True)
    thread.start()
    try:
        ready, _, _ = select.select([response_read], [], [], TIMEOUT_S)
        assert ready, "no ready frame"
        data = os.read(response_read, 64)
        (size,) = HEADER.unpack(data[: HEADER.size])
        first = response_decoder.decode(data[HEADER.size : HEADER.size + size])
        assert (first.id, first.kind, first.value, first.message) == (READY_ID, OK, None, "")
        assert len(data) == HEADER.size + size  # and nothing after it
    finally:
        os.close(request_write)
        thread.join(TIMEOUT_S)
        for fd in (request_read, response_read, response_write):
            os.close(fd)
    assert not thread.is_alive()


def test_pipelined_requests_are_all_answered_by_id(tmp_path: Path, helper: RunningHelper) -> None:
    for n in range(20):
        (tmp_path / f"f{n}").write_bytes(b"x" * n)
    for n in range(20):
        helper.send(Request(n, "read_file", {"path": str(tmp_path / f"f{n}")}))
    answers = {answer.id: answer for answer in (helper.receive() for _ in range(20))}
    assert sorted(answers) == list(range(20))
    assert all(answers[n].kind == OK and answers[n].value == b"x" * n for n in range(20))


def test_a_stuck_operation_holds_up_only_itself(tmp_path: Path, helper: RunningHelper) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "plain").write_bytes(b"plain")
    # Opening a fifo for writing waits for a reader: this call is stuck until we open it.
    helper.send(Request(1, "write_file", {"path": str(fifo), "data": b"through the fifo"}))
    for n in range(2, 6):
        helper.send(Request(n, "read_file", {"path": str(tmp_path / "plain")}))
    assert sorted(helper.receive().id for _ in range(4)) == [2, 3, 4, 5]
    with open(fifo, "rb") as reader:  # the stuck call goes on
        stuck = helper.receive()
        assert reader.read() == b"through the fifo"
    assert (stuck.id, stuck.kind) == (1, OK)


def test_closing_the_pipe_ends_the_loop_after_the_answers(
    tmp_path: Path, helper: RunningHelper
) -> None:
    (tmp_path / "f").write_bytes(b"last")
    helper.send(Request(9, "read_file", {"path": str(tmp_path / "f")}))
    helper.close_requests()
    answer = helper.receive()
    assert (answer.id, answer.value) == (9, b"last")
    helper.thread.join(TIMEOUT_S)
    assert not helper.thread.is_alive() and helper.raised == []
    # serve's own threads (started with _thread: no threading in the helper) end too.
    deadline = time.monotonic() + TIMEOUT_S
    while _thread._count() > helper.threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _thread._count() == helper.threads_before


def test_an_undecodable_frame_ends_the_loop_with_its_error(
    tmp_path: Path, helper: RunningHelper
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    helper.send(Request(1, "write_file", {"path": str(fifo), "data": b"late"}))
    os.write(helper.request_write, HEADER.pack(3) + b"\xc1\xc1\xc1")  # not msgpack
    helper.send(Request(2, "get_metadata", {"path": str(tmp_path)}))  # never read
    with open(fifo, "rb") as reader:  # the operation already running still answers
        answer = helper.receive()
        assert reader.read() == b"late"
    assert (answer.id, answer.kind) == (1, OK)
    helper.thread.join(TIMEOUT_S)
    assert not helper.thread.is_alive()
    assert len(helper.raised) == 1 and isinstance(helper.raised[0], DecodeError)
