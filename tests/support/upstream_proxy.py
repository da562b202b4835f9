"""A corporate-style upstream proxy on 127.0.0.1 for the allowUpstreamProxy tests.

It understands ``CONNECT host:port`` and absolute-form plain HTTP, records
each request line it is sent, and connects every destination on 127.0.0.1
(whatever the name: it stands for the proxy that reaches the internet).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class UpstreamProxy:
    port: int
    # Request lines as received: "CONNECT host:port HTTP/1.1", "GET http://... HTTP/1.1".
    seen: list[str] = field(default_factory=list)
    # The whole request head of each, for header checks.
    heads: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(OSError, RuntimeError):
        if dst.can_write_eof():
            dst.write_eof()


@asynccontextmanager
async def upstream_proxy() -> AsyncIterator[UpstreamProxy]:
    proxy = UpstreamProxy(0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, _, rest = head.partition(b"\r\n")
            text = line.decode("latin-1")
            proxy.seen.append(text)
            proxy.heads.append(head.decode("latin-1"))
            method, target, version = text.split(" ")
            if method == "CONNECT":
                port = int(target.rsplit(":", 1)[1])
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", parts.port or 80)
                origin = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                up_writer.write(f"{method} {origin} {version}\r\n".encode() + rest)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            up_writer.close()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    proxy.port = int(server.sockets[0].getsockname()[1])
    try:
        yield proxy
    finally:
        server.close()
        await server.wait_closed()
