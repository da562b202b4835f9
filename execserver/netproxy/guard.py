"""What no proxy or bridge ever does, whatever the policy says: connect to the
daemon's own listeners, or take the daemon's last file descriptors.

A sandboxed child reaching the daemon's websocket could start an unsandboxed
process (an authenticated-by-loopback or token-less daemon trusts its
clients), so "the domain policy allows localhost" must never make the
daemon's host:port reachable. The server registers every address it listens
on (``protect_listener``); the proxies check each address they are about to
connect to (``is_daemon_endpoint``), after resolution, so no name, alias,
IPv4-mapped form or wildcard address gets around it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import resource
import socket
import threading
from typing import Final

__all__ = [
    "DaemonEndpointRefused",
    "accept_connection",
    "is_daemon_endpoint",
    "names_daemon_listener",
    "protect_listener",
    "release_listener",
]

# A sandboxed child can open connections to its proxy as fast as it likes; each
# costs the daemon one or two fds. Past these, new connections are closed at
# once: per proxy, and whenever fewer than FD_RESERVE descriptors would be left
# for the daemon's other clients (websockets, processes, fs calls).
MAX_CONNECTIONS_PER_PROXY: Final = 256
FD_RESERVE: Final = 128

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_lock = threading.Lock()
_listeners: set[tuple[IPAddress, int]] = set()


def _ip(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def protect_listener(host: str, port: int) -> None:
    address = _ip(host)
    if address is not None:
        with _lock:
            _listeners.add((address, port))


def release_listener(host: str, port: int) -> None:
    address = _ip(host)
    if address is not None:
        with _lock:
            _listeners.discard((address, port))


def names_daemon_listener(host: str, port: int) -> bool:
    """For connections whose name is resolved by someone else (an upstream
    proxy): True when ``host:port`` names this host's loopback or one of the
    daemon's addresses on a port the daemon listens on."""
    with _lock:
        if not any(p == port for _, p in _listeners):
            return False
    name = host.strip().lower().rstrip(".").strip("[]")
    if name in ("localhost", "localhost.localdomain") or name.endswith(".localhost"):
        return True
    return _ip(name) is not None and is_daemon_endpoint(name, port)


def _is_local_interface(address: IPAddress) -> bool:
    """Whether ``address`` belongs to this host (binding to it succeeds)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        probe = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return False
    with contextlib.closing(probe):
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def is_daemon_endpoint(host: str, port: int) -> bool:
    """True when connecting to ``host`` (an IP address), ``port`` could reach a
    listener of this daemon. Unparseable hosts count as the daemon (fail closed)."""
    with _lock:
        listeners = [a for a, p in _listeners if p == port]
    if not listeners:
        return False
    address = _ip(host)
    if address is None:
        return True
    for listening in listeners:
        if address == listening or address.is_unspecified:
            return True
        if address.is_loopback and (listening.is_loopback or listening.is_unspecified):
            return True
        if listening.is_unspecified and _is_local_interface(address):
            return True
    return False


class DaemonEndpointRefused(ConnectionRefusedError):
    """Raised instead of connecting to one of the daemon's own listeners."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(f"{host}:{port} is the exec-server's own listener")


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def accept_connection(live: int) -> bool:
    """Whether a proxy (or bridge) holding ``live`` connections may take one more."""
    if live >= MAX_CONNECTIONS_PER_PROXY:
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return True
    # Two more fds per connection: the upstream side comes next.
    return _open_fds() + 2 + FD_RESERVE <= soft
