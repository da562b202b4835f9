"""netproxy.peers: from the kernel's socket tables, the owner of a loopback TCP
connection's other end (an IPv4 and an IPv4-mapped IPv6 client) and of a UDP
datagram's sending socket (bound, or bound to the wildcard address on sending)."""

from __future__ import annotations

import os
import socket

from execserver.netproxy.peers import tcp_peer_uid, udp_sender_uid


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


def test_the_owner_of_a_udp_sender_bound_or_autobound_is_found() -> None:
    bound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    bound.bind(("127.0.0.1", 0))
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    # Sending from an unbound socket binds it to the wildcard address.
    autobound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for sender in (bound, autobound):
            sender.sendto(b"x", receiver.getsockname())
            _, source = receiver.recvfrom(16)
            assert tcp_peer_uid(("127.0.0.1", 1), source) is None  # not a TCP socket
            assert udp_sender_uid(source) == os.getuid()
        port = bound.getsockname()[1]
    finally:
        for sock in (bound, receiver, autobound):
            sock.close()
    assert udp_sender_uid(("127.0.0.1", port)) is None  # closed: nobody
