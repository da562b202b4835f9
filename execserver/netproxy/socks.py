"""The SOCKS5 front end (RFC 1928): TCP CONNECT, and UDP ASSOCIATE with
``enableSocks5Udp`` (netproxy.socks_udp); no authentication.

BIND, and UDP ASSOCIATE without ``enableSocks5Udp``, are answered "command not
supported" (reply 7), as the reference answers them. A blocked destination
gets reply 2, "connection not allowed by ruleset" (what curl reports from the
reference as ``(2)``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct

from execserver.netproxy import decision as d
from execserver.netproxy import socks_udp, upstream
from execserver.netproxy.engine import PolicyEngine
from execserver.netproxy.relay import close, peer_text, relay
from execserver.netproxy.socks_wire import (
    ATYP_DOMAIN,
    ATYP_IPV4,
    ATYP_IPV6,
    REPLY_ADDRESS_NOT_SUPPORTED,
    REPLY_COMMAND_NOT_SUPPORTED,
    REPLY_HOST_UNREACHABLE,
    REPLY_NOT_ALLOWED,
    REPLY_OK,
    VERSION,
    reply,
)

__all__ = ["handle"]

HANDSHAKE_TIMEOUT_S = 30.0
_NO_AUTH = 0
_NO_ACCEPTABLE = 0xFF
_CMD_CONNECT = 1
_CMD_UDP_ASSOCIATE = 3


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[int, str, int] | None:
    version, count = await reader.readexactly(2)
    methods = await reader.readexactly(count)
    if version != VERSION:
        return None
    if _NO_AUTH not in methods:
        writer.write(bytes([VERSION, _NO_ACCEPTABLE]))
        return None
    writer.write(bytes([VERSION, _NO_AUTH]))
    version, command, _reserved, atyp = await reader.readexactly(4)
    if atyp == ATYP_IPV4:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif atyp == ATYP_IPV6:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    elif atyp == ATYP_DOMAIN:
        (length,) = await reader.readexactly(1)
        host = (await reader.readexactly(length)).decode("ascii")  # IDNs arrive as punycode
    else:
        writer.write(reply(REPLY_ADDRESS_NOT_SUPPORTED))
        return None
    (port,) = struct.unpack("!H", await reader.readexactly(2))
    return command, host, port


async def handle(
    engine: PolicyEngine, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                request = await _read_request(reader, writer)
        except (asyncio.IncompleteReadError, TimeoutError, UnicodeError):
            return
        if request is None:
            return
        command, host, port = request
        if command == _CMD_UDP_ASSOCIATE and engine.udp_associate:
            await socks_udp.associate(engine, reader, writer, port)
            return
        if command != _CMD_CONNECT:
            writer.write(reply(REPLY_COMMAND_NOT_SUPPORTED))
            return
        target = d.Target("socks5_tcp", host, port, None, peer_text(writer))
        outcome = await engine.check(target)
        if not outcome.allowed:
            writer.write(reply(REPLY_NOT_ALLOWED))
            return
        try:
            up_reader, up_writer = await upstream.open_stream(engine, outcome, target)
        except OSError:
            writer.write(reply(REPLY_HOST_UNREACHABLE))
            return
        writer.write(reply(REPLY_OK))
        try:
            await relay(reader, writer, up_reader, up_writer)
        finally:
            await close(up_writer)
    except (ConnectionError, OSError, RuntimeError):
        pass  # the child went away, or the proxy closed its transport (RuntimeError)
    finally:
        await close(writer)
