"""SOCKS5 UDP ASSOCIATE (``enableSocks5Udp``), under the same policy as TCP.

The association lives as long as its TCP control connection (RFC 1928 section 7).
Two UDP sockets per association: one facing the child (its address is the
reply's BND.ADDR), one facing the destinations. Keeping them apart means a
reply can never be mistaken for a datagram of the child, even when both sit on
127.0.0.1.

* Only datagrams from the control connection's peer address are relayed; the
  first one fixes the child's port (or the port named in the request, when it
  named one). Fragments (FRAG != 0) are dropped, as most servers do. For a
  tenant's proxy the sending socket must also be its account's (the kernel's
  ``/proc/net/udp``, netproxy.peers; checked once for the child's port): on the
  host's loopback every account sends from 127.0.0.1.
* Each destination (host, port) is decided once per association, exactly as a
  SOCKS TCP connect would be (deny list, local-address block, allow list,
  decider, limited mode), reported as ``socks5_udp``; a denied destination's
  datagrams are dropped (UDP has nothing to answer with).
* Only datagrams from an allowed destination's checked addresses and port are
  relayed back, wrapped in the SOCKS header.
* An upstream proxy (``allowUpstreamProxy``) cannot carry UDP: allowed
  datagrams go straight to the destination.
* A child in the sandbox reaches the proxy through the bridge's unix socket,
  which carries no datagrams: its ASSOCIATE is refused (reply 7) rather than
  answered with a relay address it cannot reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from dataclasses import dataclass, field
from typing import cast

from execserver.aio.tasks import TaskSet
from execserver.netproxy import decision as d
from execserver.netproxy.engine import PolicyEngine
from execserver.netproxy.peers import udp_sender_uid
from execserver.netproxy.relay import peer_text
from execserver.netproxy.socks_wire import (
    ATYP_DOMAIN,
    ATYP_IPV4,
    ATYP_IPV6,
    REPLY_COMMAND_NOT_SUPPORTED,
    REPLY_OK,
    reply,
)

__all__ = ["associate", "parse_datagram", "wrap_datagram"]

log = logging.getLogger(__name__)

MAX_DATAGRAM = 65535


class BadDatagram(ValueError):
    pass


def parse_datagram(data: bytes) -> tuple[str, int, bytes]:
    """(host, port, payload) of a client datagram; raises BadDatagram."""
    if len(data) < 4 or data[0:2] != b"\0\0" or data[2] != 0:
        raise BadDatagram("reserved bytes or a fragment")
    atyp, offset = data[3], 4
    if atyp == ATYP_IPV4:
        host, offset = str(ipaddress.IPv4Address(data[offset : offset + 4])), offset + 4
    elif atyp == ATYP_IPV6:
        host, offset = str(ipaddress.IPv6Address(data[offset : offset + 16])), offset + 16
    elif atyp == ATYP_DOMAIN and len(data) > offset:
        length = data[offset]
        try:
            host = data[offset + 1 : offset + 1 + length].decode("ascii")
        except UnicodeDecodeError:
            raise BadDatagram("non-ASCII name") from None
        offset += 1 + length
    else:
        raise BadDatagram("address type")
    if len(data) < offset + 2 or not host:
        raise BadDatagram("truncated")
    (port,) = struct.unpack("!H", data[offset : offset + 2])
    return host, port, data[offset + 2 :]


def wrap_datagram(address: str, port: int, payload: bytes) -> bytes:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    atyp = ATYP_IPV4 if ip.version == 4 else ATYP_IPV6
    return bytes([0, 0, 0, atyp]) + ip.packed + struct.pack("!H", port) + payload


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[bytes, tuple[str, int]]] = asyncio.Queue(maxsize=1024)
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Datagram transports do not subclass DatagramTransport (selector, uvloop).
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        # Under load, drop rather than buffer without bound (UDP may lose packets).
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait((data, (str(addr[0]), int(str(addr[1])))))


@dataclass
class _Association:
    engine: PolicyEngine
    client_ip: str
    client_port: int | None
    client_text: str | None
    inside: asyncio.DatagramTransport
    outside: asyncio.DatagramTransport
    # (host, port) -> the addresses datagrams may go to (empty: denied).
    verdicts: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    # (address, port) of allowed destinations -> the client may hear from them.
    allowed_peers: set[tuple[str, int]] = field(default_factory=set)
    # The child's port once its socket was found to be the tenant's (udp_owner).
    trusted_port: int | None = None

    async def verdict(self, host: str, port: int) -> tuple[str, ...]:
        key = (host.lower(), port)
        if key not in self.verdicts:
            target = d.Target("socks5_udp", host, port, None, self.client_text)
            outcome = await self.engine.check(target)
            addresses: tuple[str, ...] = ()
            if outcome.allowed:
                with contextlib.suppress(OSError):
                    resolution = await self.engine.resolve_for_connect(outcome, target)
                    # The outside socket is IPv4 (see associate).
                    addresses = tuple(a for a in map(_plain, resolution.addresses) if "." in a)
            self.verdicts[key] = addresses
            self.allowed_peers.update((_plain(a), port) for a in addresses)
        return self.verdicts[key]

    async def from_child(self, inbound: _Endpoint) -> None:
        while True:
            data, (ip, port) = await inbound.queue.get()
            if _plain(ip) != self.client_ip:
                continue
            if self.client_port is not None and port != self.client_port:
                continue
            if not await self._from_owner(ip, port):
                continue
            if self.client_port is None:
                self.client_port = port
            try:
                host, dest_port, payload = parse_datagram(data)
            except (BadDatagram, ValueError):
                continue
            addresses = await self.verdict(host, dest_port)
            if addresses:
                self.outside.sendto(payload, (addresses[0], dest_port))

    async def _from_owner(self, ip: str, port: int) -> bool:
        """Whether a datagram from (ip, port) may be relayed: any for the daemon's
        own proxy; for a tenant's, only from a socket of its account."""
        owner = self.engine.udp_owner
        if owner is None or port == self.trusted_port:
            return True
        if await asyncio.to_thread(udp_sender_uid, (_plain(ip), port)) != owner:
            log.warning("socks udp: dropped a datagram from a socket not the tenant's")
            return False
        self.trusted_port = port
        return True

    async def to_child(self, outbound: _Endpoint) -> None:
        while True:
            data, (ip, port) = await outbound.queue.get()
            if (_plain(ip), port) not in self.allowed_peers or self.client_port is None:
                continue
            self.inside.sendto(wrap_datagram(ip, port, data), (self.client_ip, self.client_port))


def _plain(address: str) -> str:
    with contextlib.suppress(ValueError):
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ip)
    return address


async def associate(
    engine: PolicyEngine,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    requested_port: int,
) -> None:
    """Serve one UDP ASSOCIATE until the control connection closes."""
    local = writer.get_extra_info("sockname")
    peer = writer.get_extra_info("peername")
    if not (isinstance(local, tuple) and isinstance(peer, tuple)):
        # Through the sandbox bridge: no datagram path.
        writer.write(reply(REPLY_COMMAND_NOT_SUPPORTED))
        return
    loop = asyncio.get_running_loop()
    inbound, outbound = _Endpoint(), _Endpoint()
    inside, _ = await loop.create_datagram_endpoint(lambda: inbound, local_addr=(local[0], 0))
    try:
        # IPv4 egress only: the proxy's listeners and the tests' resolvers are
        # IPv4; an IPv6-only destination's datagrams are dropped.
        outside, _ = await loop.create_datagram_endpoint(
            lambda: outbound, family=socket.AF_INET, local_addr=("0.0.0.0", 0)
        )
    except OSError:
        inside.close()
        raise
    association = _Association(
        engine,
        client_ip=_plain(str(peer[0])),
        client_port=requested_port or None,
        client_text=peer_text(writer),
        inside=inside,
        outside=outside,
    )
    bound = inside.get_extra_info("sockname")
    writer.write(reply(REPLY_OK, str(bound[0]), int(bound[1])))
    relaying = TaskSet(f"socks udp {association.client_text}", logger=log)
    relaying.spawn(association.from_child(inbound), name="from child")
    relaying.spawn(association.to_child(outbound), name="to child")
    try:
        # The control connection carries nothing more; its end ends the association.
        while await reader.read(4096):
            pass
    finally:
        await relaying.aclose()
        inside.close()
        outside.close()
