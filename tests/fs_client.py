"""A tiny JSON-RPC websocket client for the fs/http/discovery tests.

Deliberately independent of ``execserver.client`` (built concurrently): it
speaks the raw wire so the tests see exactly what each server sends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp


def b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def uri(path: object) -> str:
    return "file://" + str(path)


@dataclass
class Reply:
    """One response: ``result`` or ``error`` (``code``/``message``)."""

    raw: dict[str, Any]

    @property
    def ok(self) -> bool:
        return "result" in self.raw

    @property
    def result(self) -> Any:
        assert "result" in self.raw, f"expected a result, got {self.raw}"
        return self.raw["result"]

    @property
    def error(self) -> tuple[int, str]:
        assert "error" in self.raw, f"expected an error, got {self.raw}"
        err = self.raw["error"]
        return err["code"], err["message"]


@dataclass
class RpcClient:
    ws: aiohttp.ClientWebSocketResponse
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _pending: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    notifications: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    _reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            obj = json.loads(msg.data)
            if "method" in obj and "id" not in obj:
                await self.notifications.put(obj)
                continue
            fut = self._pending.pop(obj.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(obj)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("websocket closed"))

    async def call(self, method: str, params: Any, timeout: float = 60) -> Reply:
        request_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = fut
        await self.ws.send_str(json.dumps({"id": request_id, "method": method, "params": params}))
        return Reply(await asyncio.wait_for(fut, timeout))

    async def ok(self, method: str, params: Any, timeout: float = 60) -> Any:
        return (await self.call(method, params, timeout)).result

    async def err(self, method: str, params: Any, timeout: float = 60) -> tuple[int, str]:
        return (await self.call(method, params, timeout)).error

    async def next_notification(self, method: str, timeout: float = 10) -> dict[str, Any]:
        """The params of the next notification named ``method`` (others are dropped)."""
        async with asyncio.timeout(timeout):
            while True:
                note = await self.notifications.get()
                if note["method"] == method:
                    params: dict[str, Any] = note["params"]
                    return params

    async def handshake(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.ok("initialize", {"clientName": "fs-tests"})
        await self.ws.send_str(json.dumps({"method": "initialized", "params": {}}))
        return result

    async def aclose(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


@contextlib.asynccontextmanager
async def connect(url: str, *, handshake: bool = True) -> AsyncIterator[RpcClient]:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(url, max_msg_size=0, autoping=True) as ws,
    ):
        client = RpcClient(ws)
        client.start()
        try:
            if handshake:
                await client.handshake()
            yield client
        finally:
            await client.aclose()


def normalize(value: Any, root: str) -> Any:
    """Replace the scratch directory with ``<D>`` and epoch milliseconds with ``<MS>``."""
    if isinstance(value, str):
        return value.replace(root, "<D>")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and value > 10**12:
        return "<MS>"
    if isinstance(value, list):
        return [normalize(v, root) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v, root) for k, v in value.items()}
    return value


def outcome(reply: Reply, root: str) -> Any:
    """``{"result": ...}`` or ``{"error": [code, message]}``, normalised."""
    if reply.ok:
        return {"result": normalize(reply.result, root)}
    code, message = reply.error
    return {"error": [code, normalize(message, root)]}


async def check_cases(
    client: RpcClient, root: str, cases: list[tuple[str, str, dict[str, Any], Any]]
) -> None:
    """Run ``(label, method, params, expected outcome)`` in order; report every mismatch."""
    mismatches = []
    for label, method, params, expected in cases:
        got = outcome(await client.call(method, params), root)
        if got != expected:
            mismatches.append(f"{label}:\n   expected {expected}\n   got      {got}")
    assert not mismatches, "\n".join(mismatches)
