"""Request smuggling through the per-process HTTP proxy.

In ``limited`` mode the proxy lets only GET/HEAD/OPTIONS through. A child that
can make the proxy and the destination disagree about where one request ends
gets a second request of its choosing (a POST) served behind the method
guard's back. Each shape below is sent to the real proxy on 127.0.0.1; the
destination is a deliberately lenient server (bare LF ends a line, the first
``Content-Length`` wins, ``chunked`` anywhere in ``Transfer-Encoding`` means
chunked, it keeps serving until the connection ends), the kind of back end
such attacks are aimed at. It records every byte and every request it served.
Every shape must be refused with 400 and nothing may reach the destination, or
(where the proxy can fix the request instead) exactly one well-framed request
arrives.

The only stand-in is DNS (the resolver's static hook names the destination):
the proxy and both servers are real, on real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from execserver.netproxy.proxy import ProcessNetworkProxy
from execserver.netproxy.resolver import Resolver
from execserver.wire.network import NetworkPolicyDecisionNotification
from execserver.wire.process import RemoteNetworkProxyLaunchConfig
from tests.unit.test_netproxy_policy import config

# How long the destination waits for more bytes before it closes (it serves
# whatever complete requests it read by then).
IDLE_S = 0.3


@dataclass
class LenientUpstream:
    port: int = 0
    raw: bytearray = field(default_factory=bytearray)
    # (method, target, headers as the lenient parser read them) of every request served.
    served: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


def _lenient_parse(buf: bytes) -> tuple[tuple[str, str, dict[str, str]], int] | None:
    """One request from ``buf`` the way a careless server reads it; None: incomplete."""
    match = re.search(rb"\r?\n\r?\n", buf)
    if match is None:
        return None
    lines = re.split(rb"\r?\n", buf[: match.start()])
    parts = lines[0].decode("latin-1").split(" ")
    method, target = parts[0], parts[1] if len(parts) > 1 else ""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers.setdefault(name.strip().lower(), value.strip())  # the first one wins
    pos = match.end()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            end = buf.find(b"\n", pos)
            if end < 0:
                return None
            size = int(buf[pos:end].split(b";")[0].strip() or b"0", 16)
            pos = end + 1
            if size == 0:
                end = buf.find(b"\n", pos)
                if end < 0:
                    return None
                pos = end + 1
                break
            if len(buf) < pos + size + 2:
                return None
            pos += size + 2
    else:
        digits = re.match(r"\d+", headers.get("content-length", "0"))
        length = int(digits.group(0)) if digits else 0
        if len(buf) < pos + length:
            return None
        pos += length
    return (method, target, headers), pos


@asynccontextmanager
async def lenient_upstream() -> AsyncIterator[LenientUpstream]:
    upstream = LenientUpstream()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = b""
        try:
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(65536), IDLE_S)
                except TimeoutError:
                    break
                if not data:
                    break
                upstream.raw += data
                buf += data
                while (parsed := _lenient_parse(buf)) is not None:
                    request, used = parsed
                    buf = buf[used:]
                    upstream.served.append(request)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
        except (ConnectionError, ValueError, IndexError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    upstream.port = int(server.sockets[0].getsockname()[1])
    try:
        yield upstream
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def limited_proxy() -> AsyncIterator[ProcessNetworkProxy]:
    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        pass

    launch = RemoteNetworkProxyLaunchConfig(
        proxy=config(mode="limited", domains={"upstream.test": "allow", "other.test": "allow"})
    )
    proxy = ProcessNetworkProxy(
        launch,
        process_id="smuggle",
        notify=notify,
        ask=None,
        resolver=Resolver({"upstream.test": "127.0.0.1", "other.test": "127.0.0.1"}),
        upstream_environ={},
    )
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()


async def _send(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


SMUGGLED = (
    b"POST /smuggled-delete-everything HTTP/1.1\r\nHost: upstream.test\r\nContent-Length: 0\r\n\r\n"
)
CHUNK = b"%x\r\n" % len(SMUGGLED) + SMUGGLED + b"\r\n0\r\n\r\n"


def _get(headers: bytes, body: bytes = b"", target: bytes = b"/innocent") -> bytes:
    """A GET to upstream.test:{port} (filled in later) with ``headers`` and ``body``."""
    return (
        b"GET http://upstream.test:{port}" + target + b" HTTP/1.1\r\n"
        b"Host: upstream.test:{port}\r\n" + headers + b"\r\n" + body
    )


def _cl(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n" % len(body)


ZERO_CHUNK = b"0\r\n\r\n" + SMUGGLED
# Each shape: a request whose framing the lenient destination reads differently.
SHAPES: dict[str, bytes] = {
    # The reported one: bare LFs inside a value make the destination see its own
    # Content-Length: 0 first; the proxy frames by the later one and forwards the POST.
    "bare-lf-in-value": _get(
        b"X-A: a\nContent-Length: 0\nConnection: keep-alive\r\n" + _cl(SMUGGLED), SMUGGLED
    ),
    "bare-lf-ends-head": _get(b"X-A: a\n\n" + SMUGGLED[:-2] + _cl(b"")),
    "cl-te": _get(_cl(ZERO_CHUNK) + b"Transfer-Encoding: chunked\r\n", ZERO_CHUNK),
    "te-cl": _get(b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", CHUNK),
    "te-obfuscated-xchunked": _get(
        b"Transfer-Encoding: xchunked\r\n" + _cl(ZERO_CHUNK), ZERO_CHUNK
    ),
    "te-space-before-colon": _get(b"Transfer-Encoding : chunked\r\n" + _cl(ZERO_CHUNK), ZERO_CHUNK),
    "te-list-chunked-identity": _get(
        b"Transfer-Encoding: chunked, identity\r\n" + _cl(ZERO_CHUNK), ZERO_CHUNK
    ),
    "te-doubled": _get(
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n" + _cl(ZERO_CHUNK), ZERO_CHUNK
    ),
    "te-vertical-tab": _get(b"Transfer-Encoding: chunked\x0b\r\n" + _cl(ZERO_CHUNK), ZERO_CHUNK),
    "te-obs-folded": _get(
        b"X-Pad: 1\r\nTransfer-Encoding:\r\n chunked\r\n" + _cl(ZERO_CHUNK), ZERO_CHUNK
    ),
    "obs-fold-continuation": _get(b"X-A: a\r\n Content-Length: 0\r\n" + _cl(SMUGGLED), SMUGGLED),
    "bare-cr-in-value": _get(b"X-A: a\rContent-Length: 0\r\n" + _cl(SMUGGLED), SMUGGLED),
    "bare-cr-in-name": _get(b"X\rContent-Length: 0\r\n" + _cl(SMUGGLED), SMUGGLED),
    "nul-in-value": _get(b"X-A: a\x00b\r\n" + _cl(SMUGGLED), SMUGGLED),
    "nul-in-name": _get(b"X\x00A: a\r\n" + _cl(SMUGGLED), SMUGGLED),
    "duplicate-cl-differing": _get(b"Content-Length: 0\r\n" + _cl(SMUGGLED), SMUGGLED),
    "cl-list-differing": _get(b"Content-Length: 0, %d\r\n" % len(SMUGGLED), SMUGGLED),
    "cl-plus-sign": _get(b"Content-Length: +%d\r\n" % len(SMUGGLED), SMUGGLED),
    "bare-lf-request-line": (
        b"GET http://upstream.test:{port}/innocent HTTP/1.1\n"
        b"Host: upstream.test:{port}\r\n" + _cl(SMUGGLED) + b"\r\n" + SMUGGLED
    ),
    "chunk-size-bare-lf": _get(
        b"Transfer-Encoding: chunked\r\n", b"%x\n" % len(SMUGGLED) + SMUGGLED + b"\r\n0\r\n\r\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_smuggling_shapes_are_refused_with_400(shape: str) -> None:
    async with lenient_upstream() as up, limited_proxy() as proxy:
        request = SHAPES[shape].replace(b"{port}", str(up.port).encode())
        answer = await _send(proxy.http_port, request)
        await asyncio.sleep(0.05)  # let the destination log what it got, if anything
    served = [(m, t) for m, t, _ in up.served]
    assert answer.startswith(b"HTTP/1.1 400 "), (shape, answer[:200], served)
    assert up.served == [], (shape, served)
    assert b"smuggled" not in up.raw, (shape, bytes(up.raw))


async def test_a_well_framed_body_arrives_as_one_request_with_one_framing_header() -> None:
    """A chunked body is re-framed by the proxy: the destination sees exactly one
    framing header and one request, however the body's chunks were cut."""
    body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    request = _get(b"Transfer-Encoding: chunked\r\n", body + SMUGGLED)
    async with lenient_upstream() as up, limited_proxy() as proxy:
        answer = await _send(proxy.http_port, request.replace(b"{port}", str(up.port).encode()))
        await asyncio.sleep(0.05)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert [(m, t) for m, t, _ in up.served] == [("GET", "/innocent")]
    head, _, forwarded = bytes(up.raw).partition(b"\r\n\r\n")
    framing = [
        line
        for line in head.lower().split(b"\r\n")
        if line.startswith((b"content-length:", b"transfer-encoding:"))
    ]
    assert len(framing) == 1, head
    assert b"smuggled" not in up.raw  # the pipelined request after the body is never sent
    assert b"hello" in forwarded and b" world" in forwarded


async def test_absolute_form_wins_over_a_different_host_header() -> None:
    """The policy decided on the URL's host: the destination must be told that
    host, not the one the child wrote in ``Host:`` (RFC 9112 3.2.2)."""
    request = (
        b"GET http://upstream.test:{port}/innocent HTTP/1.1\r\n"
        b"Host: denied.example\r\nContent-Length: 0\r\n\r\n"
    )
    async with lenient_upstream() as up, limited_proxy() as proxy:
        answer = await _send(proxy.http_port, request.replace(b"{port}", str(up.port).encode()))
        await asyncio.sleep(0.05)
    if answer.startswith(b"HTTP/1.1 400 "):
        assert up.served == []
        return
    assert len(up.served) == 1, up.served
    assert up.served[0][2]["host"] == f"upstream.test:{up.port}"
    assert bytes(up.raw).lower().count(b"\r\nhost:") == 1


async def test_a_second_host_header_is_refused() -> None:
    request = (
        b"GET http://upstream.test:{port}/innocent HTTP/1.1\r\n"
        b"Host: upstream.test:{port}\r\nHost: denied.example\r\n\r\n"
    )
    async with lenient_upstream() as up, limited_proxy() as proxy:
        answer = await _send(proxy.http_port, request.replace(b"{port}", str(up.port).encode()))
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert up.served == []
