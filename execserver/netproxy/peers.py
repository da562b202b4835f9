"""Whose process is at the other end of a loopback TCP connection to a proxy.

A proxy also listens on the host's 127.0.0.1 (an unsandboxed process reaches it
through its proxy variables), and every account on the host can connect there.
For a tenant's process that would hand the tenant's proxy (its policy, its
decider, its credentials) to any other account, another tenant included. So a
tenant's proxy serves a loopback TCP connection only when the connecting socket
belongs to the tenant's account: the kernel lists each TCP socket of this
network namespace with its owner's uid in ``/proc/net/tcp`` (``tcp6`` for an
IPv6 socket connected to an IPv4 address), and the client's entry is the one
whose local address is the connection's peer and whose remote address is the
proxy's. A SOCKS5 UDP relay asks the same of a datagram's sender
(``/proc/net/udp``): the socket bound to its port, on its address or on the
wildcard one. (A sandboxed process has a network namespace, and a loopback, of its
own: it reaches its proxy through its bridge's unix sockets, which its
account's 0700 directory guards.)
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

__all__ = ["tcp_peer_uid", "udp_sender_uid"]

_TABLES = (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))
_UDP_TABLES = (("/proc/net/udp", socket.AF_INET), ("/proc/net/udp6", socket.AF_INET6))


def _hex(family: int, host: str, port: int) -> str:
    """An address as the kernel prints it in /proc/net/tcp{,6} (each 32-bit word of
    the address in host byte order, the port big-endian)."""
    if family == socket.AF_INET6 and ":" not in host:
        host = "::ffff:" + host  # an IPv6 socket connected to an IPv4 address
    raw = socket.inet_pton(family, host)
    words = "".join(
        f"{int.from_bytes(raw[i : i + 4], 'little'):08X}" for i in range(0, len(raw), 4)
    )
    return f"{words}:{port:04X}"


def tcp_peer_uid(local: Sequence[object], peer: Sequence[object]) -> int | None:
    """The uid owning the TCP socket at ``peer`` connected to ``local`` (an
    accepted connection's sockname and peername, IPv4); None when no such socket
    is listed (its owner closed it meanwhile: treat as a stranger)."""
    local_host, local_port = str(local[0]), int(str(local[1]))
    peer_host, peer_port = str(peer[0]), int(str(peer[1]))
    for table, family in _TABLES:
        theirs = _hex(family, peer_host, peer_port)
        ours = _hex(family, local_host, local_port)
        try:
            with open(table, encoding="ascii") as rows:
                next(rows, None)  # the header
                for row in rows:
                    fields = row.split()
                    if len(fields) > 7 and fields[1] == theirs and fields[2] == ours:
                        return int(fields[7])
        except OSError:
            continue
    return None


def udp_sender_uid(sender: Sequence[object]) -> int | None:
    """The uid owning the UDP socket a datagram came from (``sender``: its source
    address and port, IPv4): the socket bound to that port on that address or on
    the wildcard address. None when none is listed, or when sockets of different
    owners share the port (SO_REUSEPORT): treat as a stranger."""
    host, port = str(sender[0]), int(str(sender[1]))
    owners: set[int] = set()
    for table, family in _UDP_TABLES:
        wildcard = "0.0.0.0" if family == socket.AF_INET else "::"
        accepted = {_hex(family, host, port), _hex(family, wildcard, port)}
        try:
            with open(table, encoding="ascii") as rows:
                next(rows, None)  # the header
                for row in rows:
                    fields = row.split()
                    if len(fields) > 7 and fields[1] in accepted:
                        owners.add(int(fields[7]))
        except OSError:
            continue
    return owners.pop() if len(owners) == 1 else None
