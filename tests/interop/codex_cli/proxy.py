"""A websocket proxy on 127.0.0.1 that records every JSON-RPC message.

The CLI connects to the proxy (``CODEX_EXEC_SERVER_URL``); each of its
connections gets its own upstream connection to the real exec-server, and
messages are forwarded unchanged in both directions. ``authorizing_proxy`` does
the same for a server that authenticates, with the CLI's own credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from tests.interop.codex_cli.frames import CLIENT, SERVER, FrameLog

UPGRADED = 101  # the status of an accepted websocket upgrade


@dataclass(frozen=True)
class Handshake:
    """One websocket upgrade of the CLI, as ``authorizing_proxy`` saw it."""

    authorization: str | None  # the CLI's Authorization header, None when it sent none
    status: int  # the server's answer: UPGRADED, or its refusal (401, ...)


async def _relay(
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
    # The server's close code reaches the CLI (1012 at a take-over); one that may
    # not be sent in a close frame (1006: the server vanished) becomes 1000.
    code = src.close_code
    sendable = code is not None and (1000 <= code <= 1003 or 1007 <= code <= 1014 or code >= 3000)
    await dst.close(code=code if sendable and code is not None else 1000)


@contextlib.asynccontextmanager
async def _proxy(
    upstream: str, handshakes: list[Handshake] | None
) -> AsyncIterator[tuple[str, FrameLog]]:
    """The one proxy: each CLI connection gets its own upstream connection, opened
    before the CLI's upgrade is accepted. With ``handshakes``, the CLI's
    Authorization header goes upstream too, a refusal comes back to the CLI as the
    same HTTP status, and every upgrade is recorded there."""
    log = FrameLog()
    counter = itertools.count()
    session = aiohttp.ClientSession()

    async def handle(request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        headers = (
            {} if handshakes is None or authorization is None else {"Authorization": authorization}
        )
        try:
            up = await session.ws_connect(upstream, headers=headers, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as refused:
            if handshakes is None:
                raise
            handshakes.append(Handshake(authorization, refused.status))
            return web.Response(status=refused.status, text=refused.message)
        if handshakes is not None:
            handshakes.append(Handshake(authorization, UPGRADED))
        conn = next(counter)
        # No size limit: fs/readFile answers can be far larger than aiohttp's 4 MiB default.
        downstream = web.WebSocketResponse(max_msg_size=0)
        async with up:
            await downstream.prepare(request)
            await asyncio.gather(
                _relay(downstream, up, log, conn, CLIENT),
                _relay(up, downstream, log, conn, SERVER),
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


@contextlib.asynccontextmanager
async def logging_proxy(upstream: str) -> AsyncIterator[tuple[str, FrameLog]]:
    """Yield (ws:// URL of the proxy, the log it fills)."""
    async with _proxy(upstream, None) as (url, log):
        yield url, log


@contextlib.asynccontextmanager
async def authorizing_proxy(
    upstream: str,
) -> AsyncIterator[tuple[str, FrameLog, list[Handshake]]]:
    """``logging_proxy`` for an authenticating server: each upgrade goes upstream
    with the CLI's own Authorization header, before the CLI's is accepted, so a
    server's refusal reaches the CLI as the same HTTP status. Yield (ws:// URL,
    the frame log, every upgrade with its status)."""
    handshakes: list[Handshake] = []
    async with _proxy(upstream, handshakes) as (url, log):
        yield url, log, handshakes
