"""Reconnect and resume against real servers, with a TCP proxy cutting the connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from execserver.client import (
    ClientState,
    Closed,
    ExecServerClient,
    Exited,
    Output,
    RemoteProcess,
    SessionAttached,
)
from tests.support.client_peers import TcpProxy
from tests.support.servers import RunningServer

# Every test resumes a detached session: a daemon of its own, with the default session TTL.
pytestmark = pytest.mark.fresh_daemon


async def wait_for_file(path: Path) -> None:
    # The process signals through the shared tmp dir; poll it (stat is cheap).
    while not await asyncio.to_thread(path.exists):  # noqa: ASYNC110
        await asyncio.sleep(0.02)


async def resumed(client: ExecServerClient) -> int:
    """The client's reconnect count once its recovery has finished.

    Catch-up delivers the missed events (``Closed`` included) before the client
    counts the resume, so a test that saw ``Closed`` waits for the count.
    """
    async with asyncio.timeout(10):
        # The client offers no event for "recovered"; its state is cheap to read.
        while client.state is not ClientState.CONNECTED or client.reconnects == 0:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    return client.reconnects


class Lines:
    """Output split into lines, and the non-output events, in arrival order."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.others: list[object] = []
        self._partial = b""

    async def until(self, proc: RemoteProcess, last: bytes | None = None) -> None:
        """Consume events until the line ``last`` was seen, or to the end."""
        async for event in proc:
            if isinstance(event, Output):
                *complete, self._partial = (self._partial + event.data).split(b"\n")
                self.lines += complete
                if last is not None and last in complete:
                    return
            else:
                self.others.append(event)
        assert last is None, f"stream ended before {last!r}"


async def test_output_produced_while_disconnected_is_recovered_exactly_once(
    any_server: RunningServer, tmp_path: Path
) -> None:
    script = (
        "for i in $(seq 1 200); do echo $i; done; "
        "while [ ! -e go ]; do sleep 0.02; done; "
        "for i in $(seq 201 400); do echo $i; done; touch done"
    )
    async with TcpProxy(any_server.url) as proxy:
        async with await ExecServerClient.connect(proxy.url) as client:
            session = client.session_id
            proc = await client.start_process(["bash", "-c", script], cwd=tmp_path)
            out = Lines()
            await out.until(proc, b"200")
            proxy.refusing = True
            proxy.drop()
            (tmp_path / "go").touch()
            await wait_for_file(tmp_path / "done")  # all of it happened while detached
            proxy.refusing = False
            await out.until(proc)
            assert client.session_id == session
            assert await resumed(client) == 1
    assert out.lines == [str(i).encode() for i in range(1, 401)]
    assert [type(e) for e in out.others] == [Exited, Closed]
    assert (await proc.wait()).exit_code == 0


async def test_drop_in_the_middle_of_a_fast_stream_loses_and_duplicates_nothing(
    any_server: RunningServer, tmp_path: Path
) -> None:
    async with TcpProxy(any_server.url) as proxy:
        async with await ExecServerClient.connect(proxy.url) as client:
            # The second half waits for a gate file, so it is produced only after the
            # drop: on a quiet machine the whole output could otherwise arrive before it.
            script = "seq 1 1000; while [ ! -e gate ]; do sleep 0.01; done; seq 1001 30000"
            proc = await client.start_process(["sh", "-c", script], cwd=tmp_path)
            out = Lines()
            await out.until(proc, b"1000")
            proxy.drop()
            (tmp_path / "gate").touch()
            await out.until(proc)
            assert await resumed(client) == 1
    assert out.lines == [str(i).encode() for i in range(1, 30001)]
    assert [type(e) for e in out.others] == [Exited, Closed]


async def test_live_process_keeps_running_across_the_drop(
    any_server: RunningServer, tmp_path: Path
) -> None:
    async with TcpProxy(any_server.url) as proxy:
        async with await ExecServerClient.connect(proxy.url) as client:
            proc = await client.start_process(["cat"], cwd=tmp_path, pipe_stdin=True)
            assert await proc.write(b"before\n") == "accepted"
            out = Lines()
            await out.until(proc, b"before")
            proxy.drop()
            conn = client.connection
            assert conn is not None
            await conn.wait_reader()  # a call sent before the loss is seen would fail
            # The next call waits for the resume and runs on the new connection.
            assert await proc.write(b"after\n") == "accepted"
            await out.until(proc, b"after")
            assert await proc.terminate() is True
            assert (await proc.wait()).exit_code == 137
    assert out.lines == [b"before", b"after"]


async def test_a_start_made_after_the_socket_closed_but_before_the_loss_was_seen_runs_once(
    any_server: RunningServer, tmp_path: Path
) -> None:
    # The websocket ends (as under a server's 1012, which a take-over sends) and a
    # start is made before the client's reader has run: nothing of it was sent, so it
    # runs on the resumed session instead of failing (a take-over under load lost a
    # `run` this way and its caller stopped).
    async with await ExecServerClient.connect(any_server.url) as client:
        conn = client.connection
        assert conn is not None
        conn.transport.abort()
        done = await client.run(["sh", "-c", "echo ran >> runs; cat runs"], cwd=tmp_path)
        assert (done.exit_code, done.stdout) == (0, b"ran\n")
        assert await resumed(client) == 1


async def test_second_client_resumes_a_detached_session(
    any_server: RunningServer, tmp_path: Path
) -> None:
    # on_exit="detach": leaving the block leaves the session's processes running.
    async with await ExecServerClient.connect(any_server.url, on_exit="detach") as first:
        proc = await first.start_process(
            ["bash", "-c", "while [ ! -e go ]; do sleep 0.02; done; echo resumed"], cwd=tmp_path
        )
        session, pid = first.session_id, proc.process_id
    (tmp_path / "go").touch()
    second = await _resume_when_detached(any_server.url, session)
    async with second:
        assert second.session_id == session
        result = await second.read(pid, after_seq=0, wait_ms=10_000)
        while not result.closed:
            result = await second.read(pid, after_seq=0, wait_ms=10_000)
    assert b"".join(c.chunk for c in result.chunks) == b"resumed\n"
    assert result.exit_code == 0


async def _resume_when_detached(url: str, session: str | None) -> ExecServerClient:
    """The server notices the first client's close asynchronously; until then the
    session is still attached (-32010), so a resume right after close may wait."""
    for _ in range(50):
        try:
            return await ExecServerClient.connect(url, resume_session_id=session)
        except SessionAttached:
            await asyncio.sleep(0.1)
    return await ExecServerClient.connect(url, resume_session_id=session)


async def test_resume_of_an_attached_session_is_refused(any_server: RunningServer) -> None:
    async with await ExecServerClient.connect(any_server.url) as first:
        with pytest.raises(SessionAttached, match="already attached"):
            await ExecServerClient.connect(any_server.url, resume_session_id=first.session_id)
