"""netproxy.peers: the owner of a loopback TCP connection's other end, from the
kernel's socket tables (an IPv4 and an IPv4-mapped IPv6 client)."""

from __future__ import annotations

import os
import socket

from execserver.netproxy.peers import tcp_peer_uid


def _accepted(family: int) -> tuple[socket.socket, socket.socket, socket.socket]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    client = socket.socket(family, socket.SOCK_STREAM)
    client.connect(("127.0.0.1" if family == socket.AF_INET else "::ffff:127.0.0.1", port))
    conn, _ = listener.accept()
    return listener, client, conn


def test_the_owner_of_an_ipv4_or_mapped_ipv6_client_is_found() -> None:
    for family in (socket.AF_INET, socket.AF_INET6):
        listener, client, conn = _accepted(family)
        try:
            assert tcp_peer_uid(conn.getsockname(), conn.getpeername()) == os.getuid()
        finally:
            for sock in (listener, client, conn):
                sock.close()


def test_a_peer_that_is_not_listed_is_nobody() -> None:
    listener, client, conn = _accepted(socket.AF_INET)
    try:
        local, peer = conn.getsockname(), conn.getpeername()
        # Another port than the client's: no socket is connected from there.
        assert tcp_peer_uid(local, (peer[0], peer[1] ^ 1)) is None
    finally:
        for sock in (listener, client, conn):
            sock.close()
