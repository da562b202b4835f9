"""Plain HTTP on the daemon's port, byte for byte over a raw socket, against both
servers: what load balancers and operators send (HEAD, HTTP/1.0, other methods,
several requests on one kept-alive connection) gets the reference's answers.
The listener hands such connections to aiohttp (execserver/server/http_plain.py);
a websocket upgrade still goes to picows."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from tests.support.rpc import connect
from tests.support.servers import RunningServer


async def exchange(server: RunningServer, *requests: bytes) -> list[tuple[bytes, bytes]]:
    """Send ``requests`` one after another on one connection; (status line, body) of
    each answer. Stops early when the server closes the connection."""
    address = urlsplit(server.url)
    assert address.hostname is not None and address.port is not None
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    answers: list[tuple[bytes, bytes]] = []
    try:
        for request in requests:
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status, *header_lines = head[:-4].split(b"\r\n")
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(b":") for line in header_lines)
            }
            length = int(headers.get(b"content-length", b"0"))
            is_head = request.startswith(b"HEAD ")
            body = b"" if is_head else await reader.readexactly(length)
            answers.append((status, body))
            if headers.get(b"connection", b"").lower() == b"close":
                break
    finally:
        writer.close()
    return answers


def status_code(status_line: bytes) -> int:
    return int(status_line.split()[1])


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        (b"GET /readyz HTTP/1.0\r\n\r\n", 200),
        (b"POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 405),
        (b"DELETE /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"GET /readyz HTTP/1.1\r\nHost: x\r\nOrigin: http://example.test\r\n\r\n", 403),
    ],
    ids=["head", "http1.0", "post-readyz", "post-root", "unknown-path", "origin"],
)
async def test_plain_requests_get_the_references_status(
    any_server: RunningServer, request_bytes: bytes, expected: int
) -> None:
    [(status, _)] = await exchange(any_server, request_bytes)
    assert status_code(status) == expected


async def test_a_kept_alive_connection_serves_several_probes(any_server: RunningServer) -> None:
    probe = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
    answers = await exchange(any_server, probe, probe, probe)
    assert [status_code(status) for status, _ in answers] == [200, 200, 200]


async def test_the_websocket_still_upgrades_after_plain_connections(
    any_server: RunningServer,
) -> None:
    # The first request decides which server a connection gets: a probe before it
    # must not change what the next connection's upgrade gets.
    await exchange(any_server, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    async with connect(any_server.url, handshake=False) as c:
        assert "sessionId" in await c.ok("initialize", {"clientName": "t"})
