"""A minimal raw websocket JSON-RPC peer for transport-level tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp


class RawPeer:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._next_id = 100

    async def send(self, message: Any) -> None:
        await self.ws.send_str(message if isinstance(message, str) else json.dumps(message))

    async def recv(self, timeout: float = 10.0) -> Any:
        msg = await self.ws.receive(timeout=timeout)
        if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            raise ConnectionError(f"connection closed: {msg.type!r} {msg.data!r}")
        return json.loads(msg.data)

    async def call(self, method: str, params: Any = None, timeout: float = 10.0) -> Any:
        """Send a request and return its response (notifications in between are skipped)."""
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        while True:
            reply = await self.recv(timeout)
            if reply.get("id") == ident and "method" not in reply:
                return reply

    async def handshake(self, name: str = "test") -> Any:
        reply = await self.call("initialize", {"clientName": name})
        await self.send({"method": "initialized"})
        return reply


@asynccontextmanager
async def connect(url: str, **kwargs: Any) -> AsyncIterator[RawPeer]:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, max_msg_size=0, **kwargs) as ws,
    ):
        yield RawPeer(ws)
