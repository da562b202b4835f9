"""Disconnect storms: clients start processes of every shape (setsid
grandchildren, PTYs, pipe writers) and vanish without closing. Once their
sessions expire, nothing may be left: no descendant process, no leaked fd."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.reliability.scale import pick
from tests.support.procinfo import live_descendants, num_fds, wait_until
from tests.support.servers import start_server

CYCLES = pick(ci=40, full=1000)
SHAPES = [
    {"argv": ["sh", "-c", "setsid sleep 1000 & sleep 1000"], "tty": False},
    {"argv": ["sleep", "1000"], "tty": True},
    {"argv": ["yes"], "tty": False},
    {"argv": ["cat"], "tty": False, "pipeStdin": True},
    {
        "argv": ["sh", "-c", "setsid sh -c 'trap \"\" TERM HUP; sleep 1000' & exec sleep 1000"],
        "tty": True,
    },
]


async def _one_cycle(url: str, cycle: int) -> None:
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(url, max_msg_size=0)
    await ws.send_str(
        json.dumps({"id": 0, "method": "initialize", "params": {"clientName": "storm"}})
    )
    await ws.receive(timeout=10)
    await ws.send_str('{"method":"initialized"}')
    for index, shape in enumerate(SHAPES):
        params = {
            "processId": f"{cycle}-{index}",
            "cwd": "file:///tmp",
            "env": {"PATH": "/usr/bin:/bin"},
        }
        await ws.send_str(
            json.dumps({"id": index + 1, "method": "process/start", "params": {**params, **shape}})
        )
    # Wait for the start answers so the processes exist, but never read the output.
    answered = 0
    while answered < len(SHAPES):
        msg = await ws.receive(timeout=10)
        data = json.loads(msg.data)
        if "id" in data and "method" not in data:
            assert "result" in data, data
            answered += 1
    # Abrupt drop: no close frame, just the TCP connection gone.
    transport = ws._response.connection.transport if ws._response.connection else None
    if transport is not None:
        transport.abort()
    await session.close()


async def test_disconnect_storm_leaves_no_process_and_no_fd() -> None:
    async with start_server(
        "execserver", extra=["--session-ttl", "1", "--log-level", "warning"]
    ) as server:
        pid = server.process.pid
        await asyncio.sleep(0.5)
        baseline_fds = num_fds(pid)
        for cycle in range(CYCLES):
            await _one_cycle(server.url, cycle)
        assert await wait_until(lambda: not live_descendants(pid), timeout=60), [
            " ".join(p.cmdline()) for p in live_descendants(pid)
        ]
        # fds: every pipe, pty and socket of the dead sessions is closed again.
        assert await wait_until(lambda: num_fds(pid) <= baseline_fds + 2, timeout=30), (
            f"fds {num_fds(pid)} vs baseline {baseline_fds}"
        )
        # And the daemon still serves.
        async with aiohttp.ClientSession() as http, http.ws_connect(server.url) as ws:
            await ws.send_str(
                json.dumps({"id": 1, "method": "initialize", "params": {"clientName": "after"}})
            )
            assert "result" in json.loads((await ws.receive(timeout=10)).data)
