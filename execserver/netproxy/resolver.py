"""Name resolution for the proxy, with a static hook for tests.

``Resolver({"upstream.test": "127.0.0.1"})`` maps names to addresses without
DNS. The mapping is given only by code that constructs the server
(``ServerConfig.netproxy_host_overrides``, which no flag or environment
variable sets): it is exclusive, a name it does not list fails to resolve
instead of leaving the machine (tests must never send a DNS query), and the
addresses it gives stand for "the internet": they are exempt from the
local-address block, which is what lets a test's 127.0.0.1 upstream play a
public server.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from execserver.netproxy.policy import LOCAL_NAMES, is_ip_literal, normalize_host

__all__ = ["Resolution", "ResolveError", "Resolver", "parse_hosts"]


@dataclass(frozen=True)
class Resolution:
    addresses: tuple[str, ...]
    from_hook: bool = False


class ResolveError(OSError):
    pass


def parse_hosts(text: str) -> dict[str, str]:
    """``name=addr`` pairs separated by commas or whitespace; malformed pairs are ignored."""
    mapping: dict[str, str] = {}
    for item in text.replace(",", " ").split():
        name, sep, address = item.partition("=")
        if sep and name and is_ip_literal(address):
            mapping[normalize_host(name)] = address
    return mapping


class Resolver:
    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self._overrides = {normalize_host(k): v for k, v in (overrides or {}).items()}
        self._exclusive = overrides is not None

    async def resolve(self, host: str, port: int) -> Resolution:
        host = normalize_host(host)
        if is_ip_literal(host):
            return Resolution((host,))
        mapped = self._overrides.get(host)
        if mapped is not None:
            return Resolution((mapped,), from_hook=True)
        if self._exclusive:
            if host in LOCAL_NAMES:
                return Resolution(("127.0.0.1",))
            raise ResolveError(f"{host} is not listed in the resolver's host overrides")
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ResolveError(str(exc)) from None
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:
            raise ResolveError(f"{host} has no addresses")
        return Resolution(addresses)
