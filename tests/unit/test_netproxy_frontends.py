"""The proxy's HTTP and SOCKS front ends, in process, against a local upstream."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from execserver.netproxy.loopback import LoopbackBridge
from execserver.netproxy.proxy import ProcessNetworkProxy
from execserver.netproxy.resolver import Resolver
from execserver.sandbox import bridge, seccomp
from execserver.sandbox.plan import LAUNCHER
from execserver.wire.network import NetworkPolicyDecisionNotification
from execserver.wire.process import RemoteNetworkProxyLaunchConfig
from tests.unit.test_netproxy_policy import config


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(text=f"{request.method} {request.path_qs} body={body.decode()}")


@pytest.fixture
async def upstream() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield int(runner.addresses[0][1])
    await runner.cleanup()


@pytest.fixture
async def unix_upstream(tmp_path: Path) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    path = str(tmp_path / "docker.sock")
    await web.UnixSite(runner, path).start()
    yield path
    await runner.cleanup()


async def started(
    notes: list[NetworkPolicyDecisionNotification], **proxy: Any
) -> ProcessNetworkProxy:
    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        notes.append(note)

    launch = RemoteNetworkProxyLaunchConfig(proxy=config(**proxy))
    p = ProcessNetworkProxy(
        launch,
        process_id="p",
        notify=notify,
        ask=None,
        resolver=Resolver({"up.test": "127.0.0.1"}),
        upstream_environ={},
    )
    await p.start()
    return p


async def exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


async def test_chunked_post_is_forwarded_once_and_the_connection_ends(upstream: int) -> None:
    notes: list[NetworkPolicyDecisionNotification] = []
    proxy = await started(notes, domains={"up.test": "allow"})
    try:
        request = (
            f"POST http://up.test:{upstream}/p?q=1 HTTP/1.1\r\nHost: up.test\r\n"
            "Transfer-Encoding: chunked\r\nProxy-Connection: keep-alive\r\n\r\n"
            "5\r\nhello\r\n0\r\n\r\n"
            # A second request on the same connection is never forwarded.
            f"DELETE http://up.test:{upstream}/second HTTP/1.1\r\nHost: up.test\r\n\r\n"
        ).encode()
        data = await exchange(proxy.http_port, request)
    finally:
        await proxy.aclose()
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert data.endswith(b"POST /p?q=1 body=hello")
    assert b"/second" not in data
    assert [n.method for n in notes] == ["POST"]


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: up.test\r\n\r\n", b"400"),
        (b"GET https://up.test/ HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT up.test:99999 HTTP/1.1\r\n\r\n", b"400"),
        (b"garbage\r\n\r\n", b"400"),
    ],
)
async def test_requests_that_cannot_be_proxied_are_400(request_line: bytes, status: bytes) -> None:
    proxy = await started([], domains={"*": "allow"})
    try:
        data = await exchange(proxy.http_port, request_line)
    finally:
        await proxy.aclose()
    assert data.split(b" ")[1] == status


async def test_unreachable_upstream_is_502() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]  # nothing listens here once closed
    proxy = await started([], domains={"up.test": "allow"})
    try:
        data = await exchange(
            proxy.http_port, f"GET http://up.test:{free}/ HTTP/1.1\r\n\r\n".encode()
        )
    finally:
        await proxy.aclose()
    assert data.startswith(b"HTTP/1.1 502 Bad Gateway")


async def test_unix_socket_requests_follow_the_unix_socket_policy(unix_upstream: str) -> None:
    notes: list[NetworkPolicyDecisionNotification] = []
    proxy = await started(notes, unix_sockets={unix_upstream: "allow", "/run/x.sock": "deny"})
    try:
        allowed = await exchange(
            proxy.http_port,
            b"GET http://docker/v1/info HTTP/1.1\r\nx-unix-socket: %s\r\n\r\n"
            % unix_upstream.encode(),
        )
        denied = await exchange(
            proxy.http_port,
            b"GET http://docker/v1/info HTTP/1.1\r\nx-unix-socket: /run/x.sock\r\n\r\n",
        )
    finally:
        await proxy.aclose()
    assert allowed.endswith(b"GET /v1/info body=")
    assert denied.startswith(b"HTTP/1.1 403 Forbidden")
    assert b"x-proxy-error: blocked-by-unix-socket-policy" in denied
    assert [(n.decision, n.reason) for n in notes] == [
        ("allow", "allow"),
        ("deny", "unix_socket_not_allowed"),
    ]


async def socks_greeting(
    port: int, methods: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(bytes([5, len(methods)]) + methods)
    return reader, writer, await reader.readexactly(2)


async def test_socks5_refuses_auth_it_does_not_speak_and_udp() -> None:
    proxy = await started([], enable_socks5=True, domains={"*": "allow"})
    assert proxy.socks_port is not None
    try:
        _, writer, reply = await socks_greeting(proxy.socks_port, b"\x02")
        assert reply == b"\x05\xff"
        writer.close()
        reader, writer, reply = await socks_greeting(proxy.socks_port, b"\x00")
        assert reply == b"\x05\x00"
        writer.write(b"\x05\x03\x00\x01\x7f\x00\x00\x01" + struct.pack("!H", 53))
        assert (await reader.readexactly(10))[1] == 7  # command not supported
        writer.close()
    finally:
        await proxy.aclose()


async def test_socks5_connects_to_an_ipv4_address_when_allowed(upstream: int) -> None:
    proxy = await started([], enable_socks5=True, allow_local_binding=True, domains={"*": "allow"})
    assert proxy.socks_port is not None
    try:
        reader, writer, _ = await socks_greeting(proxy.socks_port, b"\x00")
        writer.write(b"\x05\x01\x00\x01\x7f\x00\x00\x01" + struct.pack("!H", upstream))
        assert (await reader.readexactly(10))[1] == 0
        writer.write(b"GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).endswith(b"GET /s body=")
        writer.close()
    finally:
        await proxy.aclose()


async def test_closing_the_proxy_closes_listeners_connections_and_sockets() -> None:
    proxy = await started([], enable_socks5=True)
    directory = await proxy.start_unix_sockets()
    assert sorted(os.listdir(directory)) == ["http.sock", "socks.sock"]
    routes = await proxy.sandbox_routes()
    assert [port for port, _ in routes.routes] == [proxy.http_port, proxy.socks_port]
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.http_port)
    writer.write(b"GET http://up.test/ HTTP/1.1\r\n")  # an unfinished request, left hanging
    await writer.drain()
    await proxy.aclose()
    try:
        rest = await reader.read()
    except ConnectionResetError:
        rest = b""
    assert rest == b""  # the open connection was closed
    assert not await asyncio.to_thread(os.path.exists, directory)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", proxy.http_port)


async def test_loopback_bridge_forwards_a_unix_socket_to_the_port(upstream: int) -> None:
    loop_bridge = LoopbackBridge([upstream])
    routes = await loop_bridge.start()
    try:
        [(port, path)] = routes.routes
        assert port == upstream
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET /via-bridge HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).endswith(b"GET /via-bridge body=")
        writer.close()
    finally:
        await loop_bridge.aclose()
    assert loop_bridge.socket_dir is not None
    assert not await asyncio.to_thread(os.path.exists, loop_bridge.socket_dir)


def test_bridge_arguments() -> None:
    assert bridge._parse(["--route", "80=/a.sock", "--route", "81=/b.sock", "--", "cmd", "x"]) == (
        [(80, "/a.sock"), (81, "/b.sock")],
        [],
        ["cmd", "x"],
    )
    parsed = bridge._parse(["--hold-fd", "7", "--route", "80=/proc/self/fd/7/a.sock", "--", "c"])
    assert parsed == ([(80, "/proc/self/fd/7/a.sock")], [7], ["c"])
    with pytest.raises(ValueError):
        bridge._parse(["--route", "80=/a.sock", "--"])
    with pytest.raises(ValueError):
        bridge._parse(["--bogus", "--", "cmd"])


PROBE = """
import socket
out = []
s = socket.socket()
out.append("inet ok")
try:
    s.bind(("127.0.0.1", 0)); out.append("bind ok")
except OSError as e:
    out.append(f"bind errno {e.errno}")
try:
    socket.socket(socket.AF_PACKET if hasattr(socket, "AF_PACKET") else 17, socket.SOCK_RAW)
except OSError as e:
    out.append(f"packet errno {e.errno}")
print(", ".join(out))
"""


@pytest.mark.parametrize(
    ("allow_local_binding", "expected"),
    [(False, "inet ok, bind errno 1, packet errno 1"), (True, "inet ok, bind ok, packet errno 1")],
)
def test_proxy_routed_filter_allows_inet_clients_only(
    allow_local_binding: bool, expected: str
) -> None:
    program = seccomp.build_program(
        network_restricted=True, proxy_routed=True, allow_local_binding=allow_local_binding
    )
    fd = seccomp.program_fd(program)
    try:
        argv = [
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            "--seccomp-fd",
            str(fd),
            "--",
            sys.executable,
            "-c",
            PROBE,
        ]
        done = subprocess.run(
            argv, pass_fds=(fd,), capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        os.close(fd)
    assert done.stdout.strip() == expected, done.stderr
