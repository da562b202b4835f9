"""A websocket proxy on 127.0.0.1 that records every JSON-RPC message.

The CLI connects to the proxy (``CODEX_EXEC_SERVER_URL``); each of its
connections gets its own upstream connection to the real exec-server, and
messages are forwarded unchanged in both directions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from tests.interop.codex_cli.frames import CLIENT, SERVER, FrameLog


async def _forward(
    src: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    dst: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    log: FrameLog,
    conn: int,
    direction: str,
) -> None:
    async for msg in src:
        if msg.type == aiohttp.WSMsgType.TEXT:
            log.add(conn, direction, msg.data)
            await dst.send_str(msg.data)
        elif msg.type == aiohttp.WSMsgType.BINARY:
            log.add(conn, direction, msg.data.decode("utf-8", "replace"))
            await dst.send_bytes(msg.data)
        else:
            break
    await dst.close()


@contextlib.asynccontextmanager
async def logging_proxy(upstream: str) -> AsyncIterator[tuple[str, FrameLog]]:
    """Yield (ws:// URL of the proxy, the log it fills)."""
    log = FrameLog()
    counter = itertools.count()
    session = aiohttp.ClientSession()

    async def handle(request: web.Request) -> web.WebSocketResponse:
        conn = next(counter)
        # No size limit: fs/readFile answers can be far larger than aiohttp's 4 MiB default.
        downstream = web.WebSocketResponse(max_msg_size=0)
        await downstream.prepare(request)
        async with session.ws_connect(upstream, max_msg_size=0) as up:
            await asyncio.gather(
                _forward(downstream, up, log, conn, CLIENT),
                _forward(up, downstream, log, conn, SERVER),
            )
        return downstream

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"ws://127.0.0.1:{port}", log
    finally:
        await runner.cleanup()
        await session.close()
