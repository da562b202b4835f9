"""The websocket transport (aiohttp): HTTP surface and one Connection per socket.

HTTP surface as the reference's: upgrade only on ``/``,
``GET /readyz`` 200, any request carrying ``Origin`` refused with 403 so no
browser can drive the daemon; plus ``GET /livez`` for orchestrators.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType, web

from execserver.server.coalesce import coalescing_sender
from execserver.server.connection import Connection, ProtocolViolation
from execserver.server.metrics import CONTENT_TYPE
from execserver.server.runtime import ServerRuntime

__all__ = ["UpgradeCheck", "build_app"]

log = logging.getLogger(__name__)

RUNTIME_KEY = web.AppKey("runtime", ServerRuntime)

# Hook for authentication (returns an error response to refuse the upgrade).
UpgradeCheck = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
UPGRADE_CHECKS_KEY = web.AppKey("upgrade_checks", list[UpgradeCheck])
# Checks /metrics must pass: the websocket's authentication when --ws-auth is on
# (the metrics name methods, sessions and failure reasons of every client).
METRICS_CHECKS_KEY = web.AppKey("metrics_checks", list[UpgradeCheck])


@web.middleware
async def refuse_browsers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if "Origin" in request.headers:
        return web.Response(status=403)
    return await handler(request)


@web.middleware
async def bare_not_found(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    # The reference answers unknown paths with an empty 404 (aiohttp's has a text body).
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.Response(status=404)


async def readyz(request: web.Request) -> web.Response:
    # 503 once a drain or shutdown begins, so a load balancer stops sending new clients here.
    runtime = request.app[RUNTIME_KEY]
    if runtime.shutting_down or runtime.draining:
        return web.Response(status=503)
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format (only with --metrics; the reference answers 404 here).
    Behind the same bearer-token check as the websocket when auth is configured."""
    for check in request.app[METRICS_CHECKS_KEY]:
        refusal = await check(request)
        if refusal is not None:
            return refusal  # type: ignore[return-value]
    body = request.app[RUNTIME_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def livez(request: web.Request) -> web.Response:
    return web.Response(status=200)


def _peer(request: web.Request) -> str:
    transport = request.transport
    peername = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "unknown"


async def websocket_endpoint(request: web.Request) -> web.StreamResponse:
    if "upgrade" not in request.headers.get("Connection", "").lower():
        return web.Response(status=400, text="Connection header did not include 'upgrade'")
    for check in request.app[UPGRADE_CHECKS_KEY]:
        refusal = await check(request)
        if refusal is not None:
            return refusal
    runtime = request.app[RUNTIME_KEY]
    config = runtime.config
    ws = web.WebSocketResponse(
        max_msg_size=config.max_message_bytes, autoping=True, heartbeat=None, compress=False
    )
    await ws.prepare(request)
    peer = _peer(request)

    send_frame = coalescing_sender(ws, request.transport)

    conn = Connection(
        runtime,
        send_frame,
        peer=peer,
        parse_error_prefix=(
            f"failed to parse websocket JSON-RPC message from exec-server websocket {peer}: "
        ),
    )
    runtime.connections.add(conn)
    pinger = asyncio.get_running_loop().create_task(_ping_loop(ws, config.ping_interval_s))
    reader = asyncio.get_running_loop().create_task(_read_loop(ws, conn))
    closer = asyncio.get_running_loop().create_task(conn.wait_closed())
    try:
        await asyncio.wait({reader, closer}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done() and not reader.cancelled() and reader.exception() is not None:
            log.error("connection %s: reader failed", peer, exc_info=reader.exception())
        if conn.close_reason is not None and request.transport is not None:
            # The reference drops the TCP connection without a close frame.
            request.transport.abort()
    finally:
        for task in (pinger, reader, closer):
            task.cancel()
        await asyncio.gather(pinger, reader, closer, return_exceptions=True)
        runtime.connections.discard(conn)
        await conn.aclose()
        if not ws.closed:
            with contextlib.suppress(Exception):
                await ws.close()
    return ws


async def _read_loop(ws: web.WebSocketResponse, conn: Connection) -> None:
    async for msg in ws:
        if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            try:
                await conn.handle_frame(msg.data)
            except ProtocolViolation as exc:
                log.info("connection %s dropped: %s", conn.peer, exc)
                conn.abort(str(exc))
                return
        elif msg.type == WSMsgType.ERROR:
            log.info("connection %s: websocket error %r", conn.peer, ws.exception())
            return


async def _ping_loop(ws: web.WebSocketResponse, interval: float) -> None:
    """Ping every ``interval`` seconds (empty payload), as the reference does, so idle
    connections survive proxies. A missing pong is not fatal, as in the reference."""
    while not ws.closed:
        await asyncio.sleep(interval)
        with contextlib.suppress(Exception):
            await ws.ping(b"")


def build_app(
    runtime: ServerRuntime,
    upgrade_checks: list[UpgradeCheck] | None = None,
    metrics_checks: list[UpgradeCheck] | None = None,
) -> web.Application:
    app = web.Application(middlewares=[refuse_browsers, bare_not_found], client_max_size=1024**2)
    app[RUNTIME_KEY] = runtime
    app[UPGRADE_CHECKS_KEY] = list(upgrade_checks or [])
    app[METRICS_CHECKS_KEY] = list(metrics_checks or [])
    app.router.add_get("/", websocket_endpoint)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/livez", livez)
    if runtime.config.metrics:
        app.router.add_get("/metrics", metrics)
    return app
