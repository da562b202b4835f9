"""The stdio transport: newline-delimited JSON on the daemon's own stdin/stdout."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from execserver.server.connection import Connection, ProtocolViolation
from execserver.server.runtime import ServerRuntime

__all__ = ["serve_stdio"]

log = logging.getLogger(__name__)

PARSE_ERROR_PREFIX = "failed to parse JSON-RPC message from exec-server stdio: "


async def serve_stdio(runtime: ServerRuntime) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=runtime.config.max_message_bytes + 2)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    write_transport, write_protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)

    async def send_frame(frame: bytes) -> None:
        writer.write(frame + b"\n")
        await writer.drain()

    conn = Connection(runtime, send_frame, peer="stdio", parse_error_prefix=PARSE_ERROR_PREFIX)
    runtime.connections.add(conn)
    try:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial
                if not line.strip():
                    break
            except asyncio.LimitOverrunError:
                log.error("stdio message larger than %d bytes", runtime.config.max_message_bytes)
                break
            stripped = line.strip(b"\r\n")
            if not stripped.strip():
                continue
            try:
                await conn.handle_frame(stripped)
            except ProtocolViolation as exc:
                log.info("stdio peer violated the protocol: %s", exc)
                break
        await conn.finish(timeout=5.0)
    finally:
        runtime.connections.discard(conn)
        await conn.aclose()
        writer.close()
    return 0
