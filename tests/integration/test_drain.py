"""SIGTERM with --drain-timeout: the rolling-update drain.

While draining, the executor refuses new sessions with a clear error, still
resumes existing ones, answers /readyz with 503, lets running processes finish
(their output still arrives), and exits by itself once none is left -- or when
the timeout runs out, or at a second SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

from execserver.client import ExecServerClient, Output
from execserver.wire.errors import DRAINING_MESSAGE, EXECUTOR_DRAINING, SESSION_ALREADY_ATTACHED
from tests.support.http import http_get
from tests.support.rpc import connect
from tests.support.servers import start_server


async def initialize(url: str, resume: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"clientName": "drain-test"}
    if resume is not None:
        params["resumeSessionId"] = resume
    async with connect(url, handshake=False) as rpc:
        return await rpc.call("initialize", params)


async def resume_when_detached(url: str, session_id: str) -> dict[str, Any]:
    """The server notices a client's close asynchronously: wait out -32010."""
    async with asyncio.timeout(30):
        while True:
            reply = await initialize(url, session_id)
            if reply.get("error", {}).get("code") != SESSION_ALREADY_ATTACHED:
                return reply
            await asyncio.sleep(0.05)


async def wait_status(url: str, path: str, status: int) -> None:
    async with asyncio.timeout(30):
        while True:
            if (await http_get(url, path))[0] == status:
                return
            await asyncio.sleep(0.05)


async def test_sigterm_drains_then_exits_once_processes_are_done(tmp_path: Path) -> None:
    async with start_server("execserver", ["--drain-timeout", "120"]) as server:
        detached = (await initialize(server.url))["result"]["sessionId"]
        async with await ExecServerClient.connect(server.url) as client:
            proc = await client.start_process(
                ["sh", "-c", "read line; echo finished $line"], cwd=tmp_path, pipe_stdin=True
            )
            server.process.send_signal(signal.SIGTERM)
            await wait_status(server.url, "/readyz", 503)

            refused = await initialize(server.url)
            assert refused["error"] == {"code": EXECUTOR_DRAINING, "message": DRAINING_MESSAGE}
            resumed = await resume_when_detached(server.url, detached)
            assert resumed["result"]["sessionId"] == detached
            assert server.process.returncode is None  # a process still runs

            await proc.write(b"ok\n")
            output = b""
            async for event in proc:
                if isinstance(event, Output):
                    output += event.data
            assert output == b"finished ok\n"
            assert (await proc.wait()).exit_code == 0
        # Nothing runs any more: the daemon exits on its own, cleanly.
        assert await asyncio.wait_for(server.process.wait(), 60) == 0


async def test_drain_timeout_bounds_the_wait(tmp_path: Path) -> None:
    async with start_server("execserver", ["--drain-timeout", "1"]) as server:
        async with await ExecServerClient.connect(server.url, auto_reconnect=False) as client:
            await client.start_process(["sleep", "600"], cwd=tmp_path)
            server.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.process.wait(), 60) == 0


async def test_a_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    async with start_server("execserver", ["--drain-timeout", "600"]) as server:
        async with await ExecServerClient.connect(server.url, auto_reconnect=False) as client:
            await client.start_process(["sleep", "600"], cwd=tmp_path)
            server.process.send_signal(signal.SIGTERM)
            await wait_status(server.url, "/readyz", 503)
            server.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.process.wait(), 60) == 0


async def test_without_drain_timeout_sigterm_stops_at_once(tmp_path: Path) -> None:
    async with start_server("execserver") as server:
        async with await ExecServerClient.connect(server.url, auto_reconnect=False) as client:
            await client.start_process(["sleep", "600"], cwd=tmp_path)
            server.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.process.wait(), 60) == 0
