"""A re-adopted process is answered for only once its keeper's replay has arrived.

A restarted daemon reconnects to each keeper, which sends back its journal; until
that has arrived the daemon's log of the process is empty and it does not know
whether the process still runs. A resumed client's ``process/read`` from seq 0
once came back empty in that window, for a process that had closed before the
crash (the crash storm, loaded). Here the window is held open for certain: the
keepers are stopped (SIGSTOP) while the daemon restarts, and continued a moment
after the client has asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.rpc import RpcClient, connect, unb64
from tests.support.servers import RunningServer
from tests.support.state_dir import end_keepers, keepers, kill9, read_until_closed, state_daemon

# How long the keepers stay stopped after the resumed client's requests went out.
STOPPED_S = 1.0


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[Path]:
    """The state directory; its keepers continued (a failure may leave them
    stopped) and ended afterwards."""
    yield tmp_path / "state"
    for keeper in keepers(tmp_path / "state"):
        with contextlib.suppress(psutil.NoSuchProcess):
            keeper.resume()
    await end_keepers(tmp_path / "state")


@contextlib.asynccontextmanager
async def _daemon(state: Path) -> AsyncIterator[RunningServer]:
    async with state_daemon(state, ttl=60) as server:
        yield server


async def _read_all_at_once(peer: RpcClient, process_id: str) -> tuple[list[Any], Any]:
    """process/read from seq 0 without waiting, until a read brings nothing new."""
    chunks: list[Any] = []
    after = 0
    while True:
        result = await peer.read(process_id, afterSeq=after, waitMs=0)
        chunks.extend(result["chunks"])
        if not result["chunks"]:
            return chunks, result
        after = result["chunks"][-1]["seq"]


async def test_reads_and_terminates_after_a_restart_wait_for_the_keepers_replay(
    state: Path,
) -> None:
    async with _daemon(state) as first:
        async with connect(first.url, handshake=False) as peer:
            await peer.handshake()
            session_id = peer.session_id
            await peer.start("done", ["sh", "-c", "seq 1 20000; exit 7"])
            await peer.start("ended", ["sh", "-c", "exit 4"])
            before, code = await read_until_closed(peer, "done")
            assert code == 7
            _, ended_code = await read_until_closed(peer, "ended")
            assert ended_code == 4
        await kill9(first)
    held = keepers(state)
    assert len(held) == 2
    for keeper in held:
        keeper.suspend()
    loop = asyncio.get_running_loop()
    async with _daemon(state) as second, connect(second.url, handshake=False) as peer:
        assert (await peer.handshake(resume=session_id)).ok

        def go_on() -> None:
            for keeper in held:
                keeper.resume()

        loop.call_later(STOPPED_S, go_on)
        # A process that had exited is not "running" to a terminate.
        assert await peer.ok("process/terminate", {"processId": "ended"}) == {"running": False}
        again, last = await _read_all_at_once(peer, "done")
        # Not an empty log for a process that closed before the crash: all of it.
        assert [c["seq"] for c in again] == [c["seq"] for c in before]
        assert b"".join(unb64(c["chunk"]) for c in again) == b"".join(
            unb64(c["chunk"]) for c in before
        )
        assert (last["closed"], last["exitCode"]) == (True, 7)
