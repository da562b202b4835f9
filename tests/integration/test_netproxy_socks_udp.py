"""SOCKS5 UDP ASSOCIATE under the same policy as TCP: DNS over UDP to a resolver.

The "resolver" is a small DNS responder on 127.0.0.1 that answers every A
query with 10.1.2.3 and records the names it was asked. Differential cases
run on both servers: without ``enableSocks5Udp`` the ASSOCIATE is refused
(reply 7), and a datagram to a destination the policy blocks (a loopback
literal without ``allowLocalBinding``) is dropped and reported as a
``socks5_udp`` denial. execserver-only cases reach the resolver by a made-up
name mapped to 127.0.0.1 (the resolver hook); the reference cannot resolve
those names.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from tests.support.netproxy import (
    SANDBOX_READ_ONLY,
    proxy_params,
    run_on,
    server_with_hosts,
)
from tests.support.rpc import connect
from tests.support.servers import RunningServer

# The child: one UDP association per operation, one DNS query through it.
UDP_CHILD = r"""
import json, os, socket, struct, sys

def proxy():
    host, port = os.environ["ALL_PROXY"].split("://", 1)[1].rsplit(":", 1)
    return host, int(port)

def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data

def query(name):
    q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack("!HH", 1, 1)

def dns(host, port, name, wait):
    s = socket.create_connection(proxy(), timeout=20)
    s.sendall(b"\x05\x01\x00")
    assert recv_exact(s, 2) == b"\x05\x00"
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", 0))
        me = socket.inet_aton("127.0.0.1") + struct.pack("!H", u.getsockname()[1])
    except OSError:  # the sandbox refuses bind without allowLocalBinding
        me = bytes(6)
    u.settimeout(wait)
    s.sendall(b"\x05\x03\x00\x01" + me)
    r = recv_exact(s, 10)
    if r[1] != 0:
        return {"socks_reply": r[1]}
    relay = socket.inet_ntoa(r[4:8])
    relay = "127.0.0.1" if relay == "0.0.0.0" else relay
    relay_port = struct.unpack("!H", r[8:10])[0]
    try:
        head = b"\0\0\0\x01" + socket.inet_aton(host)
    except OSError:
        head = b"\0\0\0\x03" + bytes([len(host)]) + host.encode()
    u.sendto(head + struct.pack("!H", port) + query(name), (relay, relay_port))
    try:
        data, _ = u.recvfrom(65536)
    except socket.timeout:
        return {"udp": "no answer"}
    assert data[:4] == b"\0\0\0\x01", data
    source = socket.inet_ntoa(data[4:8]), struct.unpack("!H", data[8:10])[0]
    return {"answer": socket.inet_ntoa(data[-4:]), "from_port": source[1]}

for op in json.loads(sys.argv[1]):
    try:
        result = globals()[op[0]](*op[1:])
    except Exception as exc:
        result = {"error": repr(exc)}
    print(json.dumps(result), flush=True)
"""


@dataclass
class Resolver(asyncio.DatagramProtocol):
    port: int = 0
    asked: list[str] = field(default_factory=list)
    transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Datagram transports do not subclass DatagramTransport (selector, uvloop).
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        labels, i = [], 12
        while data[i]:
            labels.append(data[i + 1 : i + 1 + data[i]].decode())
            i += 1 + data[i]
        question = data[12 : i + 5]
        self.asked.append(".".join(labels))
        answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([10, 1, 2, 3])
        header = data[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0)
        assert self.transport is not None
        self.transport.sendto(header + question + answer, addr)


@asynccontextmanager
async def resolver() -> AsyncIterator[Resolver]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(Resolver, local_addr=("127.0.0.1", 0))
    protocol.port = int(transport.get_extra_info("sockname")[1])
    try:
        yield protocol
    finally:
        transport.close()


async def run_udp(url: str, ops: list[list[Any]], **proxy: Any) -> Any:
    params = proxy_params(enableSocks5=True, **proxy)
    async with connect(url, handshake=False) as peer:
        await peer.handshake()
        run = await run_on(
            peer,
            [],
            network_proxy=params,
            answer=lambda _: {"type": "allow"},
            extra={"argv": [sys.executable, "-c", UDP_CHILD, json.dumps(ops)]},
        )
    return run


async def test_udp_associate_is_refused_without_enable_socks5_udp(
    any_server: RunningServer,
) -> None:
    async with resolver() as dns:
        run = await run_udp(
            any_server.url,
            [["dns", "127.0.0.1", dns.port, "svc.internal", 2]],
            domains={"localhost": "allow"},
            enableSocks5Udp=False,
        )
    assert run.results == [{"socks_reply": 7}]
    assert dns.asked == []


async def test_udp_to_a_blocked_destination_is_dropped_and_reported(
    any_server: RunningServer,
) -> None:
    async with resolver() as dns:
        run = await run_udp(
            any_server.url,
            [["dns", "127.0.0.1", dns.port, "svc.internal", 2]],
            domains={"localhost": "allow"},
            enableSocks5Udp=True,
        )
    assert run.results == [{"udp": "no answer"}]
    assert dns.asked == []
    [decision] = run.decisions
    assert {k: decision[k] for k in ("decision", "source", "reason", "protocol", "host")} == {
        "decision": "deny",
        "source": "baseline_policy",
        "reason": "not_allowed_local",
        "protocol": "socks5_udp",
        "host": "127.0.0.1",
    }
    assert decision["port"] == dns.port
    assert run.requests == []


async def test_dns_over_udp_reaches_an_allowed_resolver() -> None:
    async with resolver() as dns, server_with_hosts("execserver") as server:
        run = await run_udp(
            server.url,
            [
                ["dns", "upstream.test", dns.port, "svc.internal", 10],
                ["dns", "upstream.test", dns.port, "db.internal", 10],
                ["dns", "blocked.test", dns.port, "leak.internal", 2],
            ],
            domains={"upstream.test": "allow", "blocked.test": "deny"},
            enableSocks5Udp=True,
        )
    assert run.results == [
        {"answer": "10.1.2.3", "from_port": dns.port},
        {"answer": "10.1.2.3", "from_port": dns.port},
        {"udp": "no answer"},
    ]
    assert dns.asked == ["svc.internal", "db.internal"]
    assert [(d["protocol"], d["host"], d["decision"]) for d in run.decisions] == [
        ("socks5_udp", "upstream.test", "allow"),
        ("socks5_udp", "upstream.test", "allow"),
        ("socks5_udp", "blocked.test", "deny"),
    ]


async def test_undecided_udp_destination_is_put_to_the_decider() -> None:
    async with resolver() as dns, server_with_hosts("execserver") as server:
        run = await run_udp(
            server.url,
            [["dns", "other.test", dns.port, "svc.internal", 10]],
            domains={"upstream.test": "allow"},
            enableSocks5Udp=True,
        )
    assert run.results == [{"answer": "10.1.2.3", "from_port": dns.port}]
    [request] = run.requests
    assert request["params"]["request"] == {
        "protocol": "socks5_udp",
        "host": "other.test",
        "port": dns.port,
    }


async def test_limited_mode_refuses_udp_like_socks_tcp() -> None:
    async with resolver() as dns, server_with_hosts("execserver") as server:
        run = await run_udp(
            server.url,
            [["dns", "upstream.test", dns.port, "svc.internal", 2]],
            domains={"upstream.test": "allow"},
            enableSocks5Udp=True,
            mode="limited",
        )
    assert run.results == [{"udp": "no answer"}]
    assert dns.asked == []
    assert [(d["protocol"], d["reason"]) for d in run.decisions] == [
        ("socks5_udp", "method_not_allowed")
    ]


async def test_a_sandboxed_child_udp_associate_is_refused(any_server: RunningServer) -> None:
    """Inside the sandbox the proxy is reached through the bridge's unix
    socket, which carries no datagrams: execserver hands out no relay address."""
    async with resolver() as dns:
        params = proxy_params(enableSocks5=True, enableSocks5Udp=True, domains={"*": "allow"})
        async with connect(any_server.url, handshake=False) as peer:
            await peer.handshake()
            run = await run_on(
                peer,
                [],
                network_proxy=params,
                extra={
                    "argv": [
                        sys.executable,
                        "-c",
                        UDP_CHILD,
                        json.dumps([["dns", "127.0.0.1", dns.port, "svc.internal", 2]]),
                    ],
                    "sandbox": SANDBOX_READ_ONLY,
                    "enforceManagedNetwork": True,
                },
            )
    assert run.start["result"]["sandboxType"] == "linuxSeccomp"
    # Nothing leaves on either server; the reference accepts the ASSOCIATE and
    # then drops the datagrams, execserver says so up front.
    expected = {"execserver": {"socks_reply": 7}, "reference": {"udp": "no answer"}}
    assert run.results == [expected[any_server.kind]]
    assert dns.asked == []
