"""``client.http``: requests made by the executor to 127.0.0.1, a typed
response, and a typed error per cause (refused, name not resolved, timeout,
refused by the server), against both servers."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from execserver.client import (
    ExecServerClient,
    HttpConnectionRefused,
    HttpInvalidRequest,
    HttpNameResolutionError,
    HttpRequestError,
    HttpResponse,
    HttpTimeout,
    sync,
)
from tests.support.servers import RunningServer


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with its method, path, headers and body as JSON."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ")
    headers = [line.split(": ", 1) for line in lines[1:] if line]
    length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
    body = await reader.readexactly(length) if length else b""
    status = 404 if path == "/missing" else 200
    payload = json.dumps(
        {"method": method, "path": path, "headers": headers, "body": body.decode()}
    ).encode()
    writer.write(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nSet-Cookie: a=1\r\n"
        f"Set-Cookie: b=2\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
    writer.close()


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A listener that accepts (the kernel does) but never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    sock.close()


def refused_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}/"


async def test_get_returns_a_typed_response(client: ExecServerClient, echo_url: str) -> None:
    response = await client.http.get(f"{echo_url}/hello", headers={"X-Probe": "1"})
    assert isinstance(response, HttpResponse)
    assert response.status == 200 and response.ok
    assert response.header("content-type") == "application/json"
    assert response.header_values("set-cookie") == ["a=1", "b=2"]
    seen = response.json()
    assert (seen["method"], seen["path"]) == ("GET", "/hello")
    assert ["x-probe", "1"] in [[k.lower(), v] for k, v in seen["headers"]]


async def test_request_sends_method_and_body_and_a_404_is_a_response(
    client: ExecServerClient, echo_url: str
) -> None:
    response = await client.http.request("PUT", f"{echo_url}/missing", body="payload", timeout=30)
    assert response.status == 404 and not response.ok
    assert response.json()["method"] == "PUT"
    assert response.json()["body"] == "payload"


async def test_connection_refused(client: ExecServerClient) -> None:
    url = refused_url()
    with pytest.raises(HttpConnectionRefused) as caught:
        await client.http.get(url, timeout=30)
    assert isinstance(caught.value, ConnectionRefusedError)
    assert caught.value.url == url
    assert "error sending request" in caught.value.server_message


async def test_a_name_that_does_not_resolve(client: ExecServerClient) -> None:
    with pytest.raises(HttpNameResolutionError) as caught:
        await client.http.get("http://no-such-host.invalid/", timeout=30)
    assert not isinstance(caught.value, HttpConnectionRefused | HttpTimeout)
    assert "does not resolve" in str(caught.value)


async def test_a_listener_that_never_answers_times_out(
    client: ExecServerClient, silent_url: str
) -> None:
    with pytest.raises(HttpTimeout) as caught:
        await client.http.get(silent_url, timeout=1)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.timeout == 1


async def test_without_diagnosis_the_cause_stays_untold(client: ExecServerClient) -> None:
    with pytest.raises(HttpRequestError) as caught:
        await client.http.get(refused_url(), timeout=30, diagnose=False)
    assert type(caught.value) is HttpRequestError


async def test_a_request_the_server_refuses_is_invalid(client: ExecServerClient) -> None:
    with pytest.raises(HttpInvalidRequest) as caught:
        await client.http.get("ftp://127.0.0.1/")
    assert isinstance(caught.value, ValueError)
    assert "http and https" in str(caught.value)


async def test_the_sync_twin(any_server: RunningServer, echo_url: str, tmp_path: Path) -> None:
    def blocking() -> tuple[int, str]:
        with sync.connect(any_server.url) as c:
            response = c.http.post(f"{echo_url}/p", body=b"x", timeout=30)
            try:
                c.http.get(refused_url(), timeout=30)
            except HttpConnectionRefused as exc:
                return response.status, type(exc).__name__
            return response.status, "no error"

    assert await asyncio.to_thread(blocking) == (200, "HttpConnectionRefused")
