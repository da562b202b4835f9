"""Memory stays bounded: big output to a client that never reads (then reads
slowly), and many short processes in sequence (no per-process leak)."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.reliability.scale import pick
from tests.support.procinfo import rss_mb
from tests.support.servers import start_server

OUTPUT_MB = pick(ci=128, full=1024)
SHORT_PROCESSES = pick(ci=400, full=10000)
# The daemon may hold its outbound queue, socket buffers and the 1 MiB
# per-process retention; anything proportional to the output is a leak.
RSS_HEADROOM_MB = 100.0


async def _handshake(ws: aiohttp.ClientWebSocketResponse) -> None:
    await ws.send_str(
        json.dumps({"id": 0, "method": "initialize", "params": {"clientName": "mem"}})
    )
    await ws.receive(timeout=10)
    await ws.send_str('{"method":"initialized"}')


async def test_output_to_a_client_that_never_reads_then_reads_slowly_is_bounded() -> None:
    async with start_server("execserver", extra=["--log-level", "warning"]) as server:
        pid = server.process.pid
        baseline = rss_mb(pid)
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(server.url, max_msg_size=0) as ws,
        ):
            await _handshake(ws)
            size = OUTPUT_MB * 1024 * 1024
            await ws.send_str(
                json.dumps(
                    {
                        "id": 1,
                        "method": "process/start",
                        "params": {
                            "processId": "big",
                            "argv": ["head", "-c", str(size), "/dev/zero"],
                            "cwd": "file:///tmp",
                            "env": {"PATH": "/usr/bin:/bin"},
                            "tty": False,
                        },
                    }
                )
            )
            peak = baseline
            # Phase 1: never read for a while.
            for _ in range(30):
                await asyncio.sleep(0.1)
                peak = max(peak, rss_mb(pid))
            # Phase 2: read slowly until the process is closed.
            received = 0
            closed = False
            count = 0
            while not closed:
                msg = await ws.receive(timeout=120)
                data = json.loads(msg.data)
                if data.get("method") == "process/output":
                    received += len(data["params"]["chunk"]) * 3 // 4
                elif data.get("method") == "process/closed":
                    closed = True
                count += 1
                if count % 256 == 0:
                    peak = max(peak, rss_mb(pid))
                    await asyncio.sleep(0.005)
        assert received >= size - 2 * 8192  # base64 padding makes this estimate inexact
        print(f"\nRSS baseline {baseline:.1f} MB, peak {peak:.1f} MB for {OUTPUT_MB} MB of output")
        assert peak - baseline < RSS_HEADROOM_MB, (
            f"peak {peak:.1f} MB over baseline {baseline:.1f} MB"
        )


async def test_many_short_processes_return_rss_to_baseline() -> None:
    extra = ["--log-level", "warning", "--exited-process-retention", "0.2"]
    async with start_server("execserver", extra=extra) as server:
        pid = server.process.pid
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(server.url, max_msg_size=0) as ws,
        ):
            await _handshake(ws)

            async def run(n: int) -> None:
                for i in range(n):
                    await ws.send_str(
                        json.dumps(
                            {
                                "id": i,
                                "method": "process/start",
                                "params": {
                                    "processId": f"p{i}-{n}",
                                    "argv": ["true"],
                                    "cwd": "file:///tmp",
                                    "env": {},
                                    "tty": False,
                                },
                            }
                        )
                    )
                    while True:
                        data = json.loads((await ws.receive(timeout=30)).data)
                        if data.get("method") == "process/closed":
                            break

            await run(100)  # warm up allocators and caches
            await asyncio.sleep(0.5)
            warm = rss_mb(pid)
            await run(SHORT_PROCESSES)
            await asyncio.sleep(1.0)  # let retention expire
            after = rss_mb(pid)
        print(
            f"\nRSS after warm-up {warm:.1f} MB, after {SHORT_PROCESSES} processes {after:.1f} MB"
        )
        assert after - warm < 15.0
