"""The aiohttp application that answers plain HTTP requests (server/http_plain.py
loads this module on the first such request, in a worker thread)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from execserver.server.http_plain_heads import BoundedHeads
from execserver.server.http_surface import HttpRequest, HttpResponse, HttpSurface

__all__ = ["UPGRADE_ON_REUSED_CONNECTION", "build_runner"]

# A websocket upgrade that arrives as a later request of a kept-alive connection
# (the listener only upgrades a connection's first request).
UPGRADE_ON_REUSED_CONNECTION = "websocket upgrade must be the first request of a connection"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _bound_heads(request: web.Request, handler: Handler) -> web.StreamResponse:
    transport = request.transport
    bounded = transport.get_protocol() if transport is not None else None
    if not isinstance(bounded, BoundedHeads):
        return await handler(request)
    bounded.head_received()
    try:
        return await handler(request)
    finally:
        bounded.answered()


@web.middleware
async def _refuse_browsers(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Before routing's 404 and 405: no browser learns anything about the daemon.
    if "Origin" in request.headers:
        return web.Response(status=403)
    return await handler(request)


@web.middleware
async def _bare_not_found(request: web.Request, handler: Handler) -> web.StreamResponse:
    # The reference answers unknown paths with an empty 404 (aiohttp's has a text body).
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.Response(status=404)


def _to_aiohttp(response: HttpResponse) -> web.Response:
    return web.Response(status=response.status, body=response.body, headers=response.headers)


def build_runner(surface: HttpSurface, *, metrics: bool) -> web.AppRunner:
    """An application over the routes of ``surface``, without a listening socket
    of its own (``runner.server()`` makes the handler for one connection)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        plain = HttpRequest(request.path, request.headers, request.remote)
        response = surface.answer(plain)
        if response is None:  # an upgrade that passed every check, on a reused connection
            return web.Response(status=400, text=UPGRADE_ON_REUSED_CONNECTION)
        return _to_aiohttp(response)

    app = web.Application(middlewares=[_bound_heads, _refuse_browsers, _bare_not_found])
    # GET (and HEAD, as aiohttp adds it) on the paths the reference serves;
    # any other method on them is aiohttp's 405, an unknown path the empty 404.
    paths = ["/", "/readyz", "/livez"] + (["/metrics"] if metrics else [])
    for path in paths:
        app.router.add_get(path, answer)
    return web.AppRunner(app, handle_signals=False, access_log=None)
