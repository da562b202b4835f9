"""aiohttp is loaded by the first request that needs it, not at start-up: a daemon
serving only websockets never maps it (~13 MB of resident memory), and the first
plain HTTP request or http/request loads it and is answered as before."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.rpc import connect
from tests.support.servers import RunningServer, start_server

# aiohttp's HTTP parser extension: mapped once `aiohttp` is imported.
AIOHTTP_EXTENSION = "/aiohttp/_http_parser"


def _maps_aiohttp(server: RunningServer) -> bool:
    return AIOHTTP_EXTENSION in Path(f"/proc/{server.process.pid}/maps").read_text()


async def _plain_get(server: RunningServer, path: str) -> bytes:
    address = urlsplit(server.url)
    assert address.hostname is not None and address.port is not None
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def _session_work(server: RunningServer, tmp_path: Path) -> None:
    async with connect(server.url) as rpc:
        written = base64.b64encode(b"x").decode()
        await rpc.ok("fs/writeFile", {"path": (tmp_path / "f").as_uri(), "dataBase64": written})
        await rpc.ok("process/start", {
            "processId": "p", "argv": ["true"], "cwd": tmp_path.as_uri(), "env": {}, "tty": False,
        })  # fmt: skip


async def test_websocket_sessions_never_load_aiohttp_and_a_health_probe_does(
    tmp_path: Path,
) -> None:
    async with start_server("execserver", ["--metrics"]) as server:
        await _session_work(server, tmp_path)
        assert not _maps_aiohttp(server)
        # Several probes at once while aiohttp loads: each one is held, then answered.
        answers = await asyncio.gather(*(_plain_get(server, "/readyz") for _ in range(5)))
        assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers), answers
        assert _maps_aiohttp(server)
        metrics = await _plain_get(server, "/metrics")
        assert metrics.startswith(b"HTTP/1.1 200") and b"execserver" in metrics


async def test_the_first_http_request_loads_aiohttp_and_is_answered(tmp_path: Path) -> None:
    body = b"hello from the dev server"

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    try:
        async with start_server("execserver") as server:
            await _session_work(server, tmp_path)
            assert not _maps_aiohttp(server)
            async with connect(server.url) as rpc:
                answer = await rpc.ok(
                    "http/request",
                    {"requestId": "r", "method": "GET", "url": f"http://127.0.0.1:{port}/"},
                )
            assert answer["status"] == 200, answer
            assert base64.b64decode(answer["bodyBase64"]) == body
            assert _maps_aiohttp(server)
    finally:
        upstream.close()
        await upstream.wait_closed()
