"""A websocket's tasks stay bounded however often its peer stops reading.

``_Socket`` (execserver/server/transport_ws.py) hands a frame that must wait
(its answer cannot be written while the socket's send buffer is full) to a
backlog task, and stops reading until that task is done. Each back-pressure
episode starts one; a finished one must leave the websocket's ``TaskSet``, or
the set grows by one per episode until the peer disconnects. Here a real
daemon on 127.0.0.1 answers a raw websocket client that stops reading until
the daemon's writes pause, then reads everything, ten times over.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from execserver.config import ServerConfig
from execserver.server.runner import build_runtime
from execserver.server.transport_ws import WebsocketServer

EPISODES = 10
# Each episode asks for this many reads of the file at once: a few MiB of answers,
# far more than the kernel's and the transport's buffers hold.
READS_PER_EPISODE = 6
FILE_BYTES = 1 << 20


class _RawClient:
    """A websocket client on a plain TCP stream: it reads only when told to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = 0

    @classmethod
    async def connect(cls, port: int) -> _RawClient:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # A small receive window: the daemon's sends back up sooner.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        # A small stream limit: an unread stream stops taking bytes from the socket.
        reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    def send(self, message: dict[str, Any]) -> None:
        self.send_text(json.dumps(message).encode())

    def send_text(self, payload: bytes) -> None:
        mask = os.urandom(4)
        size = len(payload)
        if size < 126:
            header = struct.pack("!BB", 0x81, 0x80 | size)
        elif size < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, size)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._writer.write(header + mask + masked)

    def request(self, method: str, params: dict[str, Any]) -> int:
        self._ids += 1
        self.send({"id": self._ids, "method": method, "params": params})
        return self._ids

    async def next_message(self) -> dict[str, Any]:
        """The next text frame (pings and other control frames skipped)."""
        while True:
            first, second = await self._reader.readexactly(2)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", await self._reader.readexactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", await self._reader.readexactly(8))
            payload = await self._reader.readexactly(size)
            if first & 0x0F == 0x1:
                message: dict[str, Any] = json.loads(payload)
                return message

    async def responses(self, ids: set[int]) -> list[dict[str, Any]]:
        """Read until every one of ``ids`` has been answered (successfully); the
        other messages read meanwhile."""
        waiting = set(ids)
        others: list[dict[str, Any]] = []
        while waiting:
            message = await self.next_message()
            if message.get("id") in waiting:
                assert "result" in message, message
                waiting.discard(message["id"])
            else:
                others.append(message)
        return others

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):  # reset by the daemon: closed all the same
            await self._writer.wait_closed()


@pytest.fixture
async def daemon() -> AsyncIterator[tuple[WebsocketServer, int]]:
    runtime = build_runtime(ServerConfig())
    server = WebsocketServer(runtime)
    [(_, port)] = await server.start("127.0.0.1", 0)
    yield server, port
    for sock in server.live_sockets:
        sock.conn.abort("test over")
    await server.close(5)
    await runtime.aclose()


async def _until(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    """Polls ``condition``: it is the daemon's state, which signals no change."""
    step = 0.01
    for _ in range(int(timeout / step)):
        if condition():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"not within {timeout} s: {what}")


async def test_back_pressure_episodes_do_not_grow_the_tasks_a_websocket_holds(
    daemon: tuple[WebsocketServer, int], tmp_path: Path
) -> None:
    server, port = daemon
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(FILE_BYTES))
    client = await _RawClient.connect(port)
    try:
        init = client.request("initialize", {"clientName": "backpressure-test"})
        await client.responses({init})
        client.send({"method": "initialized", "params": {}})
        await _until(lambda: len(server.live_sockets) == 1, "the websocket is open")
        (sock,) = server.live_sockets
        settled = sock.held_task_count
        held_after: list[int] = []
        for _ in range(EPISODES):
            ids = {
                client.request("fs/readFile", {"path": f"file://{big}"})
                for _ in range(READS_PER_EPISODE)
            }
            # The client reads nothing: the daemon's send buffer fills up.
            await _until(lambda: sock.writing_paused, "the daemon's writes pause")
            # A message arriving now whose answer the daemon writes itself (a parse
            # error, not a request's task): the write must wait, so the frame's
            # handling goes on in the websocket's backlog task and reading stops.
            client.send_text(b"not json")
            await asyncio.sleep(0.05)
            assert sock.writing_paused
            # The episode's backlog task, waiting for the peer to read again.
            assert sock.held_task_count == settled + 1
            others = await client.responses(ids)
            if not any(m.get("error", {}).get("code") == -32600 for m in others):
                # The parse error's answer comes after the reads' (written in order).
                others.append(await client.next_message())
            assert [m["error"]["code"] for m in others] == [-32600], others
            await _until(lambda: not sock.writing_paused, "the daemon writes again")
            await _until(
                lambda: sock.held_task_count <= settled,
                f"the websocket holds no more than its {settled} long-lived tasks",
                timeout=5,
            )
            held_after.append(sock.held_task_count)
        assert held_after == [settled] * EPISODES
    finally:
        await client.close()
