"""Connection-scoped streamed response bodies (``streamResponse: true``).

Each active stream holds its ``requestId`` until its terminal
``http/request/bodyDelta`` frame is sent; a second streamed request with that
id meanwhile is refused. Deltas carry ``seq`` from 1; the last frame has
``done: true`` and, on a body failure (including the timeout running out),
``error``. Closing the connection cancels the pumps and releases the bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

import aiohttp

from execserver.aio.tasks import TaskSet
from execserver.wire.errors import RpcError
from execserver.wire.http import HttpRequestBodyDeltaNotification

__all__ = ["BODY_ERROR", "HttpStreams"]

BODY_ERROR = "error decoding response body"

SendDelta = Callable[[HttpRequestBodyDeltaNotification], Coroutine[object, object, None]]


class HttpStreams:
    def __init__(self) -> None:
        # requestId -> its pump once started (None while the response is awaited)
        self._active: dict[str, asyncio.Task[None] | None] = {}
        self._pumps = TaskSet("http-streams")

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
        try:
            task = self._pumps.spawn(
                _pump(request_id, response, deadline, send), name=f"body-{request_id}"
            )
        except RuntimeError:  # the connection is closing: nobody to stream to
            response.release()
            self.release(request_id)
            raise
        self._active[request_id] = task
        task.add_done_callback(lambda _t: self.release(request_id))

    async def aclose(self) -> None:
        self._active.clear()
        await self._pumps.aclose()


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
