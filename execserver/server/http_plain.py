"""Plain HTTP requests (health probes, ``/metrics``, refused upgrades) through aiohttp.

The websocket listener (server/transport_ws.py) hands every connection whose
first request is not a websocket upgrade to the aiohttp request handler built
here, so those requests get a full HTTP/1.x server: other methods answered
405 as the reference does, ``HEAD`` and HTTP/1.0 served, keep-alive kept.
What each path answers is still decided in one place, server/http_surface.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from execserver.server.http_surface import HttpRequest, HttpResponse, HttpSurface

__all__ = ["UPGRADE_ON_REUSED_CONNECTION", "PlainHttp"]

# A websocket upgrade that arrives as a later request of a kept-alive connection
# (the listener only upgrades a connection's first request).
UPGRADE_ON_REUSED_CONNECTION = "websocket upgrade must be the first request of a connection"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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


class PlainHttp:
    """An aiohttp application over the routes of ``surface``, without a listening
    socket of its own: ``protocol()`` makes the handler for one connection."""

    def __init__(self, surface: HttpSurface, *, metrics: bool) -> None:
        self._surface = surface
        app = web.Application(middlewares=[_refuse_browsers, _bare_not_found])
        # GET (and HEAD, as aiohttp adds it) on the paths the reference serves;
        # any other method on them is aiohttp's 405, an unknown path the empty 404.
        paths = ["/", "/readyz", "/livez"] + (["/metrics"] if metrics else [])
        for path in paths:
            app.router.add_get(path, self._answer)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()

    async def close(self) -> None:
        await self._runner.cleanup()

    def protocol(self) -> asyncio.Protocol:
        server = self._runner.server
        assert server is not None, "PlainHttp.start() was not awaited"
        return server()

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        plain = HttpRequest(request.path, request.headers, request.remote)
        response = self._surface.answer(plain)
        if response is None:  # an upgrade that passed every check, on a reused connection
            return web.Response(status=400, text=UPGRADE_ON_REUSED_CONNECTION)
        return _to_aiohttp(response)
