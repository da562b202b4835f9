"""Plain HTTP requests (health probes, ``/metrics``, refused upgrades) through aiohttp.

The websocket listener (server/transport_ws.py) hands every connection whose
first request is not a websocket upgrade to the aiohttp request handler built
here, so those requests get a full HTTP/1.x server: other methods answered
405 as the reference does, ``HEAD`` and HTTP/1.0 served, keep-alive kept.
What each path answers is still decided in one place, server/http_surface.py.

aiohttp puts no time limit on reading a request head, so a client could hold a
connection (and its fd) for ever by sending a head a byte at a time (measured:
a 17 KiB head, one more line every 5 s, was still open after 75 s; the reference
behaves the same). Every head here must be complete within ``HEAD_TIMEOUT_S``:
the first one counted from the connection's start, each later one from the
previous answer (so an idle kept-alive connection closes after as long).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from execserver.server.http_surface import HttpRequest, HttpResponse, HttpSurface

__all__ = ["UPGRADE_ON_REUSED_CONNECTION", "PlainHttp"]

# How long a client has to send a complete request head (the websocket listener
# gives a connection's first request head as long in all).
HEAD_TIMEOUT_S = 30.0

# A websocket upgrade that arrives as a later request of a kept-alive connection
# (the listener only upgrades a connection's first request).
UPGRADE_ON_REUSED_CONNECTION = "websocket upgrade must be the first request of a connection"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _BoundedHeads(asyncio.Protocol):
    """aiohttp's handler for one connection, closed when a request head takes longer
    than allowed (see the module's docstring). ``_bound_heads`` reports each request's
    start and end."""

    def __init__(self, inner: asyncio.Protocol, first_head_s: float, head_timeout_s: float) -> None:
        self._inner = inner
        self._first_head_s = first_head_s
        self._head_timeout_s = head_timeout_s
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)
        self._arm(self._first_head_s)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def head_received(self) -> None:
        self._disarm()

    def answered(self) -> None:
        self._arm(self._head_timeout_s)

    def _arm(self, delay: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._transport.close()


@web.middleware
async def _bound_heads(request: web.Request, handler: Handler) -> web.StreamResponse:
    transport = request.transport
    bounded = transport.get_protocol() if transport is not None else None
    if not isinstance(bounded, _BoundedHeads):
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


class PlainHttp:
    """An aiohttp application over the routes of ``surface``, without a listening
    socket of its own: ``protocol()`` makes the handler for one connection."""

    def __init__(self, surface: HttpSurface, *, metrics: bool) -> None:
        self._surface = surface
        app = web.Application(middlewares=[_bound_heads, _refuse_browsers, _bare_not_found])
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

    def protocol(self, first_head_s: float) -> asyncio.Protocol:
        """The protocol for one connection; its first request head must be complete
        within ``first_head_s`` (what is left of the listener's deadline)."""
        server = self._runner.server
        assert server is not None, "PlainHttp.start() was not awaited"
        return _BoundedHeads(server(), first_head_s, HEAD_TIMEOUT_S)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        plain = HttpRequest(request.path, request.headers, request.remote)
        response = self._surface.answer(plain)
        if response is None:  # an upgrade that passed every check, on a reused connection
            return web.Response(status=400, text=UPGRADE_ON_REUSED_CONNECTION)
        return _to_aiohttp(response)
