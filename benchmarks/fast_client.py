"""A lean client for the round-trip figures (``process/read`` polling, pipelined
``fs/getMetadata``), so that they compare servers rather than Python clients.

The aiohttp client (benchmarks/client.py) costs tens of microseconds of
Python per message on each side: a reader task woken per frame, a future per
call, a send coroutine. Here the whole loop runs in picows' frame callback
(Cython websocket): each answer is decoded with msgspec and the next request
is sent from inside the callback, with no task, future or coroutine per
call. The figures' shapes are unchanged: polling keeps one request
outstanding, the pipeline keeps ``in_flight`` outstanding. ``stream_throughput``
reads a process's output the same way (benchmarks/keeper.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import msgspec
from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class _Reply(msgspec.Struct):
    id: int | None = None
    result: Any = None
    error: Any = None


_decode_reply = msgspec.json.Decoder(_Reply).decode


class _Driver(WSListener):
    """Sends what ``on_reply`` asks for after each answer; ``done`` resolves when
    ``on_reply`` returns None with nothing outstanding."""

    def __init__(self) -> None:
        self.transport: WSTransport | None = None
        self.on_reply: Callable[[_Reply], list[bytes] | None] = lambda reply: None
        self.outstanding = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def send(self, frames: list[bytes]) -> None:
        assert self.transport is not None
        for frame in frames:
            self.outstanding += 1
            self.transport.send(WSMsgType.TEXT, frame)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type != WSMsgType.TEXT:
            return
        reply = _decode_reply(frame.get_payload_as_bytes())
        if reply.id is None:  # a notification (process/output, ...)
            return
        self.outstanding -= 1
        if reply.error is not None:
            self._finish(RuntimeError(f"request {reply.id} failed: {reply.error}"))
            return
        try:
            more = self.on_reply(reply)
        except Exception as exc:  # a wrong answer ends the figure, reported by its caller
            self._finish(exc)
            return
        if more:
            self.send(more)
        elif more is None and self.outstanding == 0:
            self._finish(None)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._finish(ConnectionError("disconnected"))

    def _finish(self, error: BaseException | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)


class FastClient:
    """One websocket, initialized; ``run`` drives a callback-only request loop."""

    def __init__(self, transport: WSTransport, driver: _Driver) -> None:
        self._transport = transport
        self._driver = driver
        self._ids = 0

    @classmethod
    async def connect(cls, url: str) -> FastClient:
        transport, driver = await ws_connect(_Driver, url, max_frame_size=64 * 1024 * 1024)
        client = cls(transport, cast(_Driver, driver))
        await client.run([client.request("initialize", {"clientName": "bench"})], lambda r: None)
        transport.send(WSMsgType.TEXT, _encode({"method": "initialized", "params": {}}))
        return client

    def request(self, method: str, params: Any) -> bytes:
        self._ids += 1
        return _encode({"id": self._ids, "method": method, "params": params})

    async def run(
        self, first: list[bytes], on_reply: Callable[[_Reply], list[bytes] | None]
    ) -> None:
        """Send ``first``; after each answer send what ``on_reply`` returns ([] for
        nothing now); finish when it returns None and no request is outstanding."""
        driver = self._driver
        driver.done = asyncio.get_running_loop().create_future()
        driver.on_reply = on_reply
        driver.send(first)
        await driver.done

    async def call(self, method: str, params: Any) -> Any:
        answer: list[Any] = []

        def keep(reply: _Reply) -> None:
            answer.append(reply.result)

        await self.run([self.request(method, params)], keep)
        return answer[0]

    async def close(self) -> None:
        # Our own disconnect is no failure: the callback is replaced, not overridden.
        self._driver.on_ws_disconnected = lambda transport: None  # type: ignore[method-assign]
        self._transport.disconnect()
        await self._transport.wait_disconnected()


async def read_polling(client: FastClient, process_id: str, reads: int) -> None:
    """``reads`` cursor reads, one outstanding, as figures.read_polling does."""
    left = reads
    cursor = 0

    def next_read(reply: _Reply) -> list[bytes] | None:
        nonlocal left, cursor
        result = reply.result
        cursor = result["nextSeq"] - 1
        if result["closed"] and not result["chunks"]:
            cursor = 0
        left -= 1
        if left == 0:
            return None
        return [read(cursor)]

    def read(after: int) -> bytes:
        params = {"processId": process_id, "afterSeq": after, "maxBytes": 64}
        return client.request("process/read", params)

    await client.run([read(0)], next_read)


async def pipelined(
    client: FastClient, method: str, params: Any, total: int, in_flight: int
) -> None:
    """``total`` calls with ``in_flight`` outstanding at any time."""
    sent = min(in_flight, total)

    def refill(reply: _Reply) -> list[bytes] | None:
        nonlocal sent
        if sent < total:
            sent += 1
            return [client.request(method, params)]
        return None

    await client.run([client.request(method, params) for _ in range(sent)], refill)


class _Stream(WSListener):
    """Answers by id; counts ``process/output`` bytes; resolves at ``process/closed``."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.answers: dict[int, asyncio.Future[Any]] = {}
        self.closed: asyncio.Future[None] = loop.create_future()
        self.output_bytes = 0
        self.transport: WSTransport | None = None

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type not in (WSMsgType.TEXT, WSMsgType.BINARY):
            return
        message = _decode(frame.get_payload_as_bytes())
        method = message.get("method")
        if method == "process/output":
            # The chunk's byte count from its base64 length: CPython's base64
            # decoder takes ~15 µs per 8 KiB chunk, five times all the rest.
            chunk = message["params"]["chunk"]
            self.output_bytes += len(chunk) // 4 * 3 - chunk[-2:].count("=")
        elif method == "process/closed":
            if not self.closed.done():
                self.closed.set_result(None)
        elif "id" in message:
            future = self.answers.pop(message["id"], None)
            if future is not None and not future.done():
                if "error" in message:
                    future.set_exception(RuntimeError(message["error"]["message"]))
                else:
                    future.set_result(message.get("result"))

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if not self.closed.done():
            self.closed.set_exception(ConnectionError("the server hung up"))

    def call(self, ident: int, method: str, params: Any) -> asyncio.Future[Any]:
        assert self.transport is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[ident] = future
        body = {"id": ident, "method": method, "params": params}
        self.transport.send(WSMsgType.TEXT, _encode(body))
        return future

    def notify(self, method: str, params: Any) -> None:
        assert self.transport is not None
        self.transport.send(WSMsgType.TEXT, _encode({"method": method, "params": params}))


async def stream_throughput(url: str, start: dict[str, Any], size: int) -> dict[str, float]:
    """``process/start`` with ``start`` (its processId's output must be ``size``
    bytes); MB/s from the start's send to ``process/closed``.

    The aiohttp client of figures.output_throughput takes a whole CPU at ~225 MB/s
    on this 2-CPU machine (~35 us per 8 KiB chunk, CPython's base64 decoder half
    of it), and both servers' messages are byte for byte alike: through it every
    server measures the same. Here picows parses the frames in C in the socket's
    read callback, msgspec decodes each message, and a chunk's bytes are counted
    from its base64 length: a third of a CPU at 500 MB/s."""
    transport, listener = await ws_connect(_Stream, url, max_frame_size=64 * 1024 * 1024)
    reader = cast(_Stream, listener)
    try:
        await asyncio.wait_for(reader.call(0, "initialize", {"clientName": "bench"}), 30)
        reader.notify("initialized", {})
        cpu0 = time.process_time()
        began = time.perf_counter()
        await asyncio.wait_for(reader.call(1, "process/start", start), 30)
        await asyncio.wait_for(reader.closed, 600)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu0
    finally:
        transport.disconnect()
    if reader.output_bytes != size:
        raise RuntimeError(f"received {reader.output_bytes} of {size} bytes")
    return {"MB_per_s": size / elapsed / 1e6, "client_cpu_share": cpu / elapsed}
