"""The request-head deadline of a plain HTTP connection (server/http_plain.py).

aiohttp puts no time limit on reading a request head, so a client could hold a
connection (and its fd) for ever by sending a head a byte at a time (measured:
a 17 KiB head, one more line every 5 s, was still open after 75 s; the reference
behaves the same). Every head must be complete within ``--http-head-timeout``
(30 s by default, ``ServerConfig.http_head_timeout_s``): the first one counted
from the connection's start, each later one from the previous answer (so an idle
kept-alive connection closes after as long).

This module does not import aiohttp: the bound is armed the moment a connection
is handed over, also while aiohttp itself is still being loaded.
"""

from __future__ import annotations

import asyncio

__all__ = ["BoundedHeads"]


class BoundedHeads(asyncio.Protocol):
    """aiohttp's handler for one connection, closed when a request head takes longer
    than allowed. The application's middleware reports each request's start
    (``head_received``) and end (``answered``)."""

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
