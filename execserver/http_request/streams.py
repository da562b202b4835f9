"""Connection-scoped streamed response bodies (``streamResponse: true``).

Each active stream holds its ``requestId`` until its terminal
``http/request/bodyDelta`` frame is sent; a second streamed request with that
id meanwhile is refused. Deltas carry ``seq`` from 1; the last frame has
``done: true`` and, on a body failure (including the timeout running out),
``error``. Closing the connection cancels the pumps and releases the bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine

import aiohttp

from execserver.wire.errors import RpcError
from execserver.wire.http import HttpRequestBodyDeltaNotification

__all__ = ["BODY_ERROR", "HttpStreams"]

BODY_ERROR = "error decoding response body"

SendDelta = Callable[[HttpRequestBodyDeltaNotification], Coroutine[object, object, None]]


class HttpStreams:
    def __init__(self) -> None:
        self._active: dict[str, asyncio.Task[None] | None] = {}

    def claim(self, request_id: str) -> None:
        if request_id in self._active:
            raise RpcError.invalid_params(
                f"http/request streamResponse requestId `{request_id}` is already active"
            )
        self._active[request_id] = None

    def release(self, request_id: str) -> None:
        self._active.pop(request_id, None)

    def start(
        self,
        request_id: str,
        response: aiohttp.ClientResponse,
        deadline: float | None,
        send: SendDelta,
    ) -> None:
        task = asyncio.get_running_loop().create_task(_pump(request_id, response, deadline, send))
        self._active[request_id] = task
        task.add_done_callback(lambda _t: self.release(request_id))

    async def aclose(self) -> None:
        tasks = [t for t in self._active.values() if t is not None]
        self._active.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _pump(
    request_id: str,
    response: aiohttp.ClientResponse,
    deadline: float | None,
    send: SendDelta,
) -> None:
    seq = 0
    error: str | None = None
    try:
        async with asyncio.timeout_at(deadline):
            async for chunk in response.content.iter_any():
                seq += 1
                await send(HttpRequestBodyDeltaNotification(request_id, seq, chunk, False, None))
    except (TimeoutError, aiohttp.ClientError, OSError):
        error = BODY_ERROR
    finally:
        response.release()
    await send(HttpRequestBodyDeltaNotification(request_id, seq + 1, b"", True, error))
