"""Plain HTTP requests (health probes, ``/metrics``, refused upgrades) through aiohttp.

The websocket listener (server/transport_ws.py) hands every connection whose
first request is not a websocket upgrade to the aiohttp request handler built
here, so those requests get a full HTTP/1.x server: other methods answered
405 as the reference does, ``HEAD`` and HTTP/1.0 served, keep-alive kept.
What each path answers is still decided in one place, server/http_surface.py;
every request head is bounded in time (server/http_plain_heads.py).

aiohttp is loaded by the first plain request, not at start-up: it is about
13 MB of the daemon's resident memory and 130 ms of its start (measured on a
2-vCPU VM: RSS and ``-X importtime`` of ``aiohttp.web`` over a process that had
already imported the rest of the daemon), and a daemon that serves only
websockets never needs it. The load runs in a worker thread, so the loop goes
on serving; the connections that arrive meanwhile wait for it, their head
deadline running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, cast

from execserver.aio.tasks import TaskSet
from execserver.server.http_plain_heads import BoundedHeads
from execserver.server.http_surface import HttpSurface

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["PlainHttp"]

# What one waiting connection may send before aiohttp is there to read it: more
# pauses its reading (a request head is far smaller).
_PENDING_LIMIT = 64 * 1024


def _import_app() -> ModuleType:
    from execserver.server import http_plain_app

    return http_plain_app


class PlainHttp:
    """The plain-HTTP side of the listener: ``protocol()`` makes the handler for
    one connection (aiohttp's, once it is loaded)."""

    def __init__(self, surface: HttpSurface, *, metrics: bool, head_timeout_s: float) -> None:
        self._surface = surface
        self._metrics = metrics
        self._head_timeout_s = head_timeout_s
        self._runner: web.AppRunner | None = None
        self._handler: Callable[[], asyncio.Protocol] | None = None
        self._waiting: list[_Pending] = []
        self._loading = TaskSet("plain-http")

    async def start(self) -> None:
        """Nothing to start: the first plain request loads aiohttp (see the module)."""

    async def close(self) -> None:
        await self._loading.aclose()
        self._abort_waiting()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def protocol(self, first_head_s: float) -> asyncio.Protocol:
        """The protocol for one connection; its first request head must be complete
        within ``first_head_s`` (what is left of the listener's deadline), each later
        one within ``head_timeout_s`` of the previous answer."""
        if self._handler is not None:
            return BoundedHeads(self._handler(), first_head_s, self._head_timeout_s)
        pending = _Pending()
        self._waiting.append(pending)
        if not self._loading and not self._loading.closed:
            self._loading.spawn(self._load(), name="load-aiohttp")
        return BoundedHeads(pending, first_head_s, self._head_timeout_s)

    async def _load(self) -> None:
        try:
            app = await asyncio.to_thread(_import_app)
            runner = app.build_runner(self._surface, metrics=self._metrics)
            await runner.setup()
        except BaseException:
            # Logged by the task set; the next plain connection tries again.
            self._abort_waiting()
            raise
        handler = runner.server
        assert handler is not None  # set by setup()
        self._runner, self._handler = runner, handler
        waiting, self._waiting = self._waiting, []
        for pending in waiting:
            pending.attach(handler())

    def _abort_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        for pending in waiting:
            pending.abort()


class _Pending(asyncio.Protocol):
    """One connection that came before aiohttp was loaded: holds what it sends,
    then hands the connection and those bytes to aiohttp's handler."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._inner: asyncio.Protocol | None = None
        self._held = bytearray()
        self._eof = False
        self._lost = False
        self._paused_reading = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, though they are one.)
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)
            return
        self._held += data
        if len(self._held) > _PENDING_LIMIT and self._transport is not None:
            self._transport.pause_reading()
            self._paused_reading = True

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            return self._inner.eof_received()
        self._eof = True
        return True  # stay open: the request may still be answered

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def attach(self, inner: asyncio.Protocol) -> None:
        transport = self._transport
        if self._lost or transport is None:
            return
        self._inner = inner
        inner.connection_made(transport)
        if self._held:
            held = bytes(self._held)
            self._held.clear()
            inner.data_received(held)
        if self._eof and not inner.eof_received():
            transport.close()
        if self._paused_reading:
            self._paused_reading = False
            transport.resume_reading()

    def abort(self) -> None:
        if self._transport is not None and not self._lost:
            self._transport.abort()
