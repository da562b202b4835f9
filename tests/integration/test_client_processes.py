"""``client.processes()``: this client's processes with argv, state and exit
code, kept client-side, against both servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import CommandNotFound, ExecServerClient, ProcessInfo, sync
from execserver.client.errors import SessionAttached
from tests.support.servers import RunningServer


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


def by_id(client: ExecServerClient) -> dict[str, ProcessInfo]:
    return {info.process_id: info for info in client.processes()}


async def test_running_and_finished_processes_are_listed(
    client: ExecServerClient, tmp_path: Path
) -> None:
    assert client.processes() == []
    done = await client.run(["sh", "-c", "exit 3"], cwd=tmp_path, process_id="listed-done")
    assert done.exit_code == 3
    sleeper = await client.start_process(["sleep", "600"], cwd=tmp_path, process_id="listed-sleep")
    listed = by_id(client)
    assert list(listed) == ["listed-done", "listed-sleep"]  # oldest first
    assert listed["listed-done"].argv == ["sh", "-c", "exit 3"]
    assert (listed["listed-done"].state, listed["listed-done"].exit_code) == ("closed", 3)
    assert (listed["listed-sleep"].state, listed["listed-sleep"].exit_code) == ("running", None)
    assert listed["listed-sleep"].argv == ["sleep", "600"]
    await sleeper.terminate()
    await sleeper.wait_closed()
    after = by_id(client)["listed-sleep"]
    assert after.state == "closed"
    assert after.exit_code is not None and after.exit_code != 0


async def test_a_start_that_failed_is_not_listed(client: ExecServerClient, tmp_path: Path) -> None:
    with pytest.raises(CommandNotFound):
        await client.run(["no-such-program-here"], cwd=tmp_path)
    assert client.processes() == []


# Resumes a detached session (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_a_closed_client_lists_its_processes_as_failed(
    any_server: RunningServer, tmp_path: Path
) -> None:
    client = await ExecServerClient.connect(any_server.url)
    await client.start_process(["sleep", "600"], cwd=tmp_path, process_id="cut-off")
    await client.close()  # detached: its stream can no longer be completed here
    [info] = client.processes()
    assert (info.process_id, info.state, info.exit_code) == ("cut-off", "failed", None)
    assert info.failure == "exec-server client closed"
    # The server may not have seen the old connection go yet (the reference, loaded,
    # still holds the session for a moment): resume once it lets go.
    async with asyncio.timeout(30):
        while True:
            try:
                again = await ExecServerClient.connect(
                    any_server.url, resume_session_id=client.session_id, wait=5
                )
                break
            except SessionAttached:
                await asyncio.sleep(0.1)
    async with again:
        await again.call_any("process/terminate", {"processId": "cut-off"})


async def test_the_sync_twin_lists(any_server: RunningServer, tmp_path: Path) -> None:
    def blocking() -> list[tuple[str, str, int | None]]:
        with sync.connect(any_server.url) as c:
            c.run(["true"], cwd=str(tmp_path), process_id="sync-listed")
            return [(i.process_id, i.state, i.exit_code) for i in c.processes()]

    assert await asyncio.to_thread(blocking) == [("sync-listed", "closed", 0)]
