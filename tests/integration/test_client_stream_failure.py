"""A process's event stream that ends without ``Closed`` raises ``ProcessFailed``.

A loop written from the docs (``async for event in proc``, handling Output /
Exited / Closed) must not end quietly with part of the output: when the stream
cannot be completed (the connection is gone for good, the client was closed),
the iteration raises."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from execserver.client import Closed, ExecServerClient, Output, ProcessFailed
from tests.support.servers import RunningServer

SCRIPT = "for i in $(seq 1 400); do echo line $i; sleep 0.01; done"


async def test_iteration_raises_when_the_connection_is_lost_for_good(
    execserver: RunningServer, tmp_path: Path
) -> None:
    client = await ExecServerClient.connect(execserver.url, auto_reconnect=False)
    try:
        proc = await client.start_process(["sh", "-c", SCRIPT], cwd=tmp_path)
        lines = 0
        with pytest.raises(ProcessFailed) as info:
            async for event in proc:
                if isinstance(event, Output):
                    lines += event.data.count(b"\n")
                    if lines >= 5:
                        conn = client.connection
                        assert conn is not None
                        conn.abort("test drops the connection")
        assert 5 <= lines < 400
        assert info.value.process_id == proc.process_id
        assert "transport closed" in str(info.value)
    finally:
        await client.close()


async def test_iteration_raises_when_the_client_is_closed_meanwhile(
    execserver: RunningServer, tmp_path: Path
) -> None:
    client = await ExecServerClient.connect(execserver.url)
    proc = await client.start_process(["sh", "-c", SCRIPT], cwd=tmp_path)
    seen: list[object] = []
    closing: list[asyncio.Task[None]] = []

    async def consume() -> None:
        async for event in proc:
            seen.append(event)
            if len(seen) == 3 and not closing:
                closing.append(asyncio.create_task(client.close()))

    with pytest.raises(ProcessFailed):
        await consume()
    await asyncio.gather(*closing)
    assert not any(isinstance(event, Closed) for event in seen)


async def test_a_complete_stream_still_ends_normally_after_closed(
    execserver: RunningServer, tmp_path: Path
) -> None:
    async with await ExecServerClient.connect(execserver.url) as client:
        proc = await client.start_process(["sh", "-c", "echo one; echo two"], cwd=tmp_path)
        events = [event async for event in proc]
    assert isinstance(events[-1], Closed)
    assert b"".join(e.data for e in events if isinstance(e, Output)) == b"one\ntwo\n"
