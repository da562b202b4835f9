"""A lean benchmark client: one websocket, msgspec codec, responses matched by
id, notifications handed to a callback. Kept separate from the library client
so the figures measure the servers, not our client's features."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()

Notification = Callable[[str, dict[str, Any]], None]


class RpcFailure(Exception):
    pass


class BenchClient:
    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse):
        self._session = session
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.on_notification: Notification = lambda method, params: None
        # A slow consumer: pause this long after every `pause_every` messages.
        self.pause_every = 0
        self.pause_s = 0.0
        self._sends: set[asyncio.Future[None]] = set()
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url: str) -> BenchClient:
        session = aiohttp.ClientSession()
        ws = await session.ws_connect(url, max_msg_size=0, compress=0)
        client = cls(session, ws)
        await client.call("initialize", {"clientName": "bench"})
        await client.notify("initialized", {})
        return client

    async def _read(self) -> None:
        received = 0
        try:
            async for msg in self._ws:
                received += 1
                if self.pause_every and received % self.pause_every == 0:
                    await asyncio.sleep(self.pause_s)
                if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    break
                data = _decoder.decode(msg.data)
                ident = data.get("id")
                if "method" in data:
                    self.on_notification(data["method"], data.get("params") or {})
                elif ident in self._pending:
                    future = self._pending.pop(ident)
                    if not future.done():
                        if "error" in data:
                            future.set_exception(RpcFailure(data["error"]["message"]))
                        else:
                            future.set_result(data["result"])
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("closed"))

    async def notify(self, method: str, params: Any) -> None:
        await self._ws.send_bytes(_encoder.encode({"method": method, "params": params}))

    def send_call(self, method: str, params: Any) -> asyncio.Future[Any]:
        """Send without waiting (pipelining); await the returned future for the result."""
        ident = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        frame = _encoder.encode({"id": ident, "method": method, "params": params})
        sending = asyncio.ensure_future(self._ws.send_str(frame.decode()))
        self._sends.add(sending)
        sending.add_done_callback(self._sends.discard)
        return future

    async def call(self, method: str, params: Any) -> Any:
        ident = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self._ws.send_str(
            _encoder.encode({"id": ident, "method": method, "params": params}).decode()
        )
        return await future

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self._session.close()
