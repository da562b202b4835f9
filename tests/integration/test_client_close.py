"""What closing a client does to the processes it started.

``close(terminate=True)`` and leaving ``async with`` end every process this
client started before the connection closes; a plain ``close()`` detaches, so
the session (and its processes) can be resumed for a while. A harness that
restarts quickly must not find its previous run's processes still running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from execserver.client import ExecServerClient, sync
from tests.support.procinfo import gone, processes_with, sleep_marker
from tests.support.servers import RunningServer


async def test_close_terminate_ends_every_process_the_client_started(
    any_server: RunningServer, tmp_path: Path
) -> None:
    client = await ExecServerClient.connect(any_server.url)
    marks = [sleep_marker() for _ in range(3)]
    for mark in marks:
        await client.start_process(["sleep", mark], cwd=tmp_path)
    await client.run(["true"], cwd=tmp_path)
    assert all(processes_with(mark) for mark in marks)
    await client.close(terminate=True)
    for mark in marks:
        assert await gone(mark), f"sleep {mark} still runs after close(terminate=True)"


async def test_leaving_async_with_terminates_the_processes_of_the_block(
    any_server: RunningServer, tmp_path: Path
) -> None:
    mark = sleep_marker()
    async with await ExecServerClient.connect(any_server.url) as client:
        await client.start_process(["sleep", mark], cwd=tmp_path)
        assert processes_with(mark)
    assert await gone(mark), "the block's process outlived the block"


# Resumes a detached session (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_plain_close_detaches_and_the_session_can_be_resumed(
    execserver: RunningServer, tmp_path: Path
) -> None:
    mark = sleep_marker()
    client = await ExecServerClient.connect(execserver.url)
    proc = await client.start_process(["sleep", mark], cwd=tmp_path)
    await client.close()
    assert processes_with(mark)
    resumed = await ExecServerClient.connect(
        execserver.url, resume_session_id=client.session_id, wait=5
    )
    try:
        assert (await resumed.read(proc.process_id, wait_ms=0)).exited is False
        again = resumed.process(proc.process_id)
        assert again is None  # not started by this client: close(terminate=True) leaves it
        await resumed.call_any("process/terminate", {"processId": proc.process_id})
    finally:
        await resumed.close()
    assert await gone(mark)


# Resumes a detached session (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_an_explicit_detach_on_exit_keeps_the_block_s_processes(
    execserver: RunningServer, tmp_path: Path
) -> None:
    mark = sleep_marker()
    async with await ExecServerClient.connect(execserver.url, on_exit="detach") as client:
        proc = await client.start_process(["sleep", mark], cwd=tmp_path)
    assert processes_with(mark)
    async with await ExecServerClient.connect(
        execserver.url, resume_session_id=client.session_id, wait=5
    ) as resumed:
        await resumed.call_any("process/terminate", {"processId": proc.process_id})
    assert await gone(mark)


async def test_the_sync_client_terminates_on_exit_too(
    execserver: RunningServer, tmp_path: Path
) -> None:
    mark = sleep_marker()

    def block() -> None:
        with sync.connect(execserver.url) as client:
            client.start_process(["sleep", mark], cwd=str(tmp_path))
            assert processes_with(mark)

    await asyncio.to_thread(block)
    assert await gone(mark)
