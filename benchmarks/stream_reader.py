"""Output throughput read by a client that outpaces both servers.

``figures.output_throughput`` reads with ``BenchClient`` (aiohttp): about 35 µs
of its CPU per message, so on this 2-CPU machine it takes a whole CPU at
~225 MB/s and every server measured through it looks the same (both servers'
messages are byte-identical, 8 KiB chunks, one per frame). Here picows (the
websocket of execserver's own client library) parses the frames in C in the
socket's read callback, msgspec decodes each message, and a chunk's bytes are
counted from its base64 length: the client's cost per MB is a small fraction of
that, so the figure is the server's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import msgspec
import picows

__all__ = ["stream_throughput"]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_quiet = logging.getLogger("benchmarks.picows")
_quiet.setLevel(logging.WARNING)


class _Reader(picows.WSListener):
    """Answers by id; counts ``process/output`` bytes; resolves at ``process/closed``."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.answers: dict[int, asyncio.Future[Any]] = {}
        self.closed: asyncio.Future[None] = loop.create_future()
        self.output_bytes = 0
        self.transport: picows.WSTransport | None = None

    def on_ws_connected(self, transport: picows.WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: picows.WSTransport, frame: picows.WSFrame) -> None:
        if frame.msg_type not in (picows.WSMsgType.TEXT, picows.WSMsgType.BINARY):
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

    def on_ws_disconnected(self, transport: picows.WSTransport) -> None:
        if not self.closed.done():
            self.closed.set_exception(ConnectionError("the server hung up"))

    def call(self, ident: int, method: str, params: Any) -> asyncio.Future[Any]:
        assert self.transport is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[ident] = future
        body = {"id": ident, "method": method, "params": params}
        self.transport.send(picows.WSMsgType.TEXT, _encode(body))
        return future

    def notify(self, method: str, params: Any) -> None:
        assert self.transport is not None
        self.transport.send(picows.WSMsgType.TEXT, _encode({"method": method, "params": params}))


async def stream_throughput(url: str, start: dict[str, Any], size: int) -> dict[str, float]:
    """``process/start`` with ``start`` (its processId's output must be ``size``
    bytes); MB/s from the start's send to ``process/closed``."""
    transport, listener = await picows.ws_connect(
        _Reader,
        url,
        max_frame_size=sys.maxsize,
        enable_auto_pong=True,
        logger_name=_quiet,
    )
    assert isinstance(listener, _Reader)  # picows types it as its base class
    reader = listener
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
