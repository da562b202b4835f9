"""SOCKS5 wire constants and the server's reply (RFC 1928 section 6), shared by the
TCP front end (``socks``) and UDP ASSOCIATE (``socks_udp``)."""

from __future__ import annotations

import ipaddress
import struct
from typing import Final

__all__ = [
    "ATYP_DOMAIN",
    "ATYP_IPV4",
    "ATYP_IPV6",
    "REPLY_ADDRESS_NOT_SUPPORTED",
    "REPLY_COMMAND_NOT_SUPPORTED",
    "REPLY_HOST_UNREACHABLE",
    "REPLY_NOT_ALLOWED",
    "REPLY_OK",
    "VERSION",
    "reply",
]

VERSION: Final = 5
ATYP_IPV4, ATYP_DOMAIN, ATYP_IPV6 = 1, 3, 4
REPLY_OK: Final = 0
REPLY_NOT_ALLOWED: Final = 2
REPLY_HOST_UNREACHABLE: Final = 4
REPLY_COMMAND_NOT_SUPPORTED: Final = 7
REPLY_ADDRESS_NOT_SUPPORTED: Final = 8


def reply(code: int, address: str = "0.0.0.0", port: int = 0) -> bytes:
    """A reply with ``code`` and the bound address (all zeros unless one is named)."""
    ip = ipaddress.ip_address(address)
    atyp = ATYP_IPV4 if ip.version == 4 else ATYP_IPV6
    return bytes([VERSION, code, 0, atyp]) + ip.packed + struct.pack("!H", port)
