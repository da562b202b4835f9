"""Byte plumbing shared by the HTTP and SOCKS front ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from execserver.netproxy.guard import DaemonEndpointRefused, is_daemon_endpoint
from execserver.netproxy.resolver import Resolution

__all__ = ["BUFFER", "CONNECT_TIMEOUT_S", "close", "open_upstream", "peer_text", "pipe", "relay"]

CONNECT_TIMEOUT_S = 10.0
BUFFER = 65536


async def open_upstream(
    resolution: Resolution, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the first address that answers (the ones we checked: no second
    lookup). The daemon's own listeners are never connected to, whatever allowed
    the request."""
    addresses = [a for a in resolution.addresses if not is_daemon_endpoint(a, port)]
    if resolution.addresses and not addresses:
        raise DaemonEndpointRefused(resolution.addresses[0], port)
    return await _first_reachable(addresses, port)


async def _first_reachable(
    addresses: Sequence[str], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    error: OSError = OSError("no address to connect to")
    for address in addresses:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                return await asyncio.open_connection(address, port, limit=BUFFER)
        except (OSError, TimeoutError) as exc:
            error = exc if isinstance(exc, OSError) else OSError(str(exc))
    raise error


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close ``dst`` so the peer sees the end as well."""
    try:
        while data := await src.read(BUFFER):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof() and not dst.is_closing():
                dst.write_eof()


async def relay(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(pipe(a_reader, b_writer), pipe(b_reader, a_writer))


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def peer_text(writer: asyncio.StreamWriter) -> str | None:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return None
