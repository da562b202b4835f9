"""``allowUpstreamProxy``: allowed connections leave through the executor's own proxy.

Corporate networks often only reach the internet through a proxy named in the
environment. With ``allowUpstreamProxy`` the per-process proxy keeps deciding
every request itself (policy, decider, reports), and only *how* an allowed
connection is opened changes: instead of connecting to the destination it
asks the upstream proxy named by the executor's (the daemon's) environment:

* CONNECT tunnels and SOCKS5 TCP: ``HTTPS_PROXY``, else ``HTTP_PROXY``, else
  ``ALL_PROXY`` (upper case first, then lower case), chained with
  ``CONNECT host:port``;
* plain HTTP: ``HTTP_PROXY``, else ``ALL_PROXY``, sent the request in absolute
  form (``GET http://host/path``), as a proxy expects it.

Only ``http://`` upstream proxies are used (as the reference: other schemes
are ignored, so the connection goes direct). ``NO_PROXY`` (or ``no_proxy``)
lists destinations that bypass the upstream: ``*``, host names (matching the
name and its subdomains; a leading ``.`` or ``*.`` is allowed), IP addresses
and CIDR ranges, each optionally with ``:port``. The destination's *name* is
handed to the upstream proxy (it resolves it, as corporate proxies must when
the inside network has no public DNS). ``user:password@`` in the proxy URL
becomes a ``Proxy-Authorization: Basic`` header.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from execserver.netproxy.guard import DaemonEndpointRefused, names_daemon_listener
from execserver.netproxy.policy import normalize_host
from execserver.netproxy.relay import BUFFER, CONNECT_TIMEOUT_S, open_upstream

if TYPE_CHECKING:
    from execserver.netproxy.decision import Outcome, Target
    from execserver.netproxy.resolver import Resolution

__all__ = [
    "AllowedConnections",
    "UpstreamError",
    "UpstreamProxies",
    "UpstreamProxy",
    "open_http",
    "open_stream",
]

MAX_RESPONSE_HEAD = 16 * 1024


class UpstreamError(OSError):
    """The upstream proxy could not be reached or refused the tunnel."""


@dataclass(frozen=True)
class UpstreamProxy:
    host: str
    port: int
    authorization: str | None = None  # the Proxy-Authorization value, if any

    @classmethod
    def parse(cls, text: str) -> UpstreamProxy | None:
        text = text.strip()
        if not text:
            return None
        if "://" not in text:
            text = "http://" + text  # "proxy:3128" is common shorthand
        parts = urlsplit(text)
        if parts.scheme.lower() != "http" or not parts.hostname:
            return None
        try:
            port = parts.port or 80
        except ValueError:
            return None
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(parts.hostname, port, authorization)

    def proxy_headers(self) -> str:
        if self.authorization is None:
            return ""
        return f"Proxy-Authorization: {self.authorization}\r\n"

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                return await asyncio.open_connection(self.host, self.port, limit=BUFFER)
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"upstream proxy {self.host}:{self.port}: {exc}") from None

    async def tunnel(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A byte stream to ``host:port`` through ``CONNECT``."""
        reader, writer = await self.open()
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        writer.write(
            (
                f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{self.proxy_headers()}\r\n"
            ).encode("latin-1")
        )
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, TimeoutError):
            writer.close()
            raise UpstreamError("upstream proxy closed the CONNECT") from None
        status = head.split(b"\r\n", 1)[0].split(b" ")
        if len(status) < 2 or status[1] != b"200":
            writer.close()
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            raise UpstreamError(f"upstream proxy refused CONNECT {authority}: {line}")
        return reader, writer


@dataclass(frozen=True)
class _Bypass:
    """One ``NO_PROXY`` entry."""

    host: str | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    port: int | None = None

    @classmethod
    def parse(cls, entry: str) -> _Bypass | None:
        entry = entry.strip().lower()
        if not entry:
            return None
        port: int | None = None
        if entry.startswith("["):  # [v6]:port
            address, _, rest = entry[1:].partition("]")
            entry = address
            if rest.startswith(":") and rest[1:].isdigit():
                port = int(rest[1:])
        elif entry.count(":") == 1:
            name, _, text = entry.partition(":")
            if text.isdigit():
                entry, port = name, int(text)
        try:
            return cls(network=ipaddress.ip_network(entry, strict=False), port=port)
        except ValueError:
            pass
        name = entry.removeprefix("*").lstrip(".")
        return cls(host=normalize_host(name), port=port) if name else None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            try:
                return ipaddress.ip_address(host) in self.network
            except ValueError:
                return False
        assert self.host is not None
        return host == self.host or host.endswith("." + self.host)


def _first(environ: Mapping[str, str], *names: str) -> UpstreamProxy | None:
    for name in names:
        for spelling in (name, name.lower()):
            proxy = UpstreamProxy.parse(environ.get(spelling, ""))
            if proxy is not None:
                return proxy
    return None


@dataclass(frozen=True)
class UpstreamProxies:
    """The upstream proxies of the executor's environment, read once per proxy."""

    for_tunnels: UpstreamProxy | None = None
    for_http: UpstreamProxy | None = None
    bypass_all: bool = False
    bypass: tuple[_Bypass, ...] = ()

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> UpstreamProxies:
        no_proxy = env.get("NO_PROXY", env.get("no_proxy", ""))
        entries = [e.strip() for e in no_proxy.split(",") if e.strip()]
        return cls(
            for_tunnels=_first(env, "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"),
            for_http=_first(env, "HTTP_PROXY", "ALL_PROXY"),
            bypass_all="*" in entries,
            bypass=tuple(b for e in entries if (b := _Bypass.parse(e)) is not None),
        )

    def _bypassed(self, host: str, port: int) -> bool:
        host = normalize_host(host)
        return self.bypass_all or any(b.matches(host, port) for b in self.bypass)

    def tunnel_proxy(self, host: str, port: int) -> UpstreamProxy | None:
        """Where a CONNECT / SOCKS stream to ``host:port`` goes; None: direct."""
        if self.for_tunnels is None or self._bypassed(host, port):
            return None
        return self.for_tunnels

    def http_proxy(self, host: str, port: int) -> UpstreamProxy | None:
        """Where a plain HTTP request to ``host:port`` goes; None: direct."""
        if self.for_http is None or self._bypassed(host, port):
            return None
        return self.for_http


class AllowedConnections(Protocol):
    """What opening an allowed connection needs of the policy engine (which holds the
    upstream proxies, so it is not imported here: a Protocol keeps the two acyclic)."""

    upstream: UpstreamProxies | None

    async def resolve_for_connect(self, outcome: Outcome, target: Target) -> Resolution: ...


async def open_stream(
    engine: AllowedConnections, outcome: Outcome, target: Target
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An allowed CONNECT / SOCKS stream: through the upstream proxy when one
    applies, else straight to the checked addresses."""
    proxies = engine.upstream
    proxy = proxies.tunnel_proxy(target.host, target.port) if proxies is not None else None
    if proxy is not None:
        if names_daemon_listener(target.host, target.port):
            raise DaemonEndpointRefused(target.host, target.port)
        return await proxy.tunnel(target.host, target.port)
    return await open_upstream(await engine.resolve_for_connect(outcome, target), target.port)


async def open_http(
    engine: AllowedConnections, outcome: Outcome, target: Target
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, UpstreamProxy | None]:
    """An allowed plain HTTP request's connection, and the upstream proxy it
    goes to (the request is then written in absolute form), if any."""
    proxies = engine.upstream
    proxy = proxies.http_proxy(target.host, target.port) if proxies is not None else None
    if proxy is not None:
        if names_daemon_listener(target.host, target.port):
            raise DaemonEndpointRefused(target.host, target.port)
        reader, writer = await proxy.open()
        return reader, writer, proxy
    resolution = await engine.resolve_for_connect(outcome, target)
    reader, writer = await open_upstream(resolution, target.port)
    return reader, writer, None
