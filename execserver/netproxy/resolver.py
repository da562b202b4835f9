"""Name resolution for the proxy, with a static hook for tests and offline hosts.

``EXECSERVER_NETPROXY_HOSTS="upstream.test=127.0.0.1,other.test=127.0.0.1"`` in the
daemon's environment maps names to addresses without DNS. When the hook is set
it is exclusive: a name it does not list fails to resolve instead of leaving
the machine (tests must never send a DNS query). Addresses coming from the hook
stand for "the internet": they are exempt from the local-address block, which
is what lets a test's 127.0.0.1 upstream play a public server.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from execserver.netproxy.policy import LOCAL_NAMES, is_ip_literal, normalize_host

__all__ = ["Resolution", "ResolveError", "Resolver", "parse_hosts"]

HOSTS_ENV = "EXECSERVER_NETPROXY_HOSTS"


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

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Resolver:
        text = (os.environ if environ is None else environ).get(HOSTS_ENV)
        return cls(parse_hosts(text) if text is not None else None)

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
            raise ResolveError(f"{host} is not listed in {HOSTS_ENV}")
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ResolveError(str(exc)) from None
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:
            raise ResolveError(f"{host} has no addresses")
        return Resolution(addresses)
