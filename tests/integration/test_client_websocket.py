"""The client's websocket (execserver/client/transport.py) frame by frame: what a
server may do that the JSON-RPC tests meet only by chance. A message bigger than
the websocket library's default frame limit, a ping, a close with a code, a
message in fragments with a ping between them, and wss:// with the certificate
checked. Servers are real: ours, or a peer on 127.0.0.1 written for the case."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import shutil
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import WSMsgType, web

from execserver.client import (
    ExecServerClient,
    ExecServerConnectError,
    ExecServerTransportClosed,
    ExecServerUnavailable,
)
from tests.support.client_peers import ENVIRONMENT_INFO, ScriptedPeer
from tests.support.servers import RunningServer

Handler = Callable[[web.WebSocketResponse], Awaitable[None]]


@asynccontextmanager
async def ws_peer(
    handle: Handler, *, autoping: bool = True, tls: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """A websocket server on 127.0.0.1 that runs ``handle`` on its one connection."""
    errors: list[BaseException] = []

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=autoping)
        await ws.prepare(request)
        try:
            await handle(ws)
        except Exception as exc:
            errors.append(exc)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    scheme = "wss" if tls is not None else "ws"
    try:
        yield f"{scheme}://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
    if errors:
        raise errors[0]


async def test_a_message_beyond_ten_mib_arrives_whole(
    execserver: RunningServer, tmp_path: Path
) -> None:
    # 12 MiB of file is a ~16 MiB frame: past picows' 10 MiB default limit, which
    # the client lifts because the server bounds no outbound message either.
    data = os.urandom(12 * 1024 * 1024)
    (tmp_path / "big").write_bytes(data)
    async with await ExecServerClient.connect(execserver.url) as client:
        assert await client.fs.read_file(tmp_path / "big") == data


async def test_big_messages_sent_back_to_back_arrive_whole_and_in_order(
    execserver: RunningServer, tmp_path: Path
) -> None:
    # Several multi-megabyte writes in flight at once: the socket's buffer fills,
    # so each frame is written partly at once and partly later. A byte lost or
    # reordered there (as the daemon's side once saw with picows' direct send)
    # would leave a file that differs from what was sent.
    async with await ExecServerClient.connect(execserver.url) as client:
        for round_ in range(3):
            payloads = [os.urandom(3_000_000 + 7919 * k) for k in range(4)]
            paths = [tmp_path / f"w{round_}-{k}" for k in range(4)]
            await asyncio.gather(
                *(client.fs.write_file(p, data) for p, data in zip(paths, payloads, strict=True))
            )
            for path, data in zip(paths, payloads, strict=True):
                assert path.read_bytes() == data


async def test_a_server_ping_is_answered_with_its_payload() -> None:
    pongs: asyncio.Queue[tuple[WSMsgType, bytes]] = asyncio.Queue()

    async def handle(ws: web.WebSocketResponse) -> None:
        await ScriptedPeer(ws).handshake()
        await ws.ping(b"are you there")
        msg = await ws.receive()
        await pongs.put((msg.type, msg.data))

    async with ws_peer(handle, autoping=False) as url:
        async with await ExecServerClient.connect(url) as client:
            assert client.session_id == "session-1"
            assert await pongs.get() == (WSMsgType.PONG, b"are you there")


async def test_a_close_from_the_server_is_answered_and_ends_the_connection() -> None:
    client_reply: asyncio.Queue[int | None] = asyncio.Queue()

    async def handle(ws: web.WebSocketResponse) -> None:
        await ScriptedPeer(ws).handshake()
        # aiohttp waits for the client's close frame and records its code; a
        # client that did not answer would leave 1006 here (after 10 s).
        await ws.close(code=4001, message=b"going away for a test")
        await client_reply.put(ws.close_code)

    async with ws_peer(handle) as url:
        client = await ExecServerClient.connect(url, auto_reconnect=False)
        try:
            assert await client_reply.get() == 1000
            with pytest.raises((ExecServerUnavailable, ExecServerTransportClosed)):
                await client.environment_status()
        finally:
            await client.close()


_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(opcode: int, payload: bytes, *, fin: bool) -> bytes:
    """A server frame (unmasked), as RFC 6455 section 5.2 lays it out."""
    head = bytes([(0x80 if fin else 0) | opcode])
    if len(payload) < 126:
        return head + bytes([len(payload)]) + payload
    return head + bytes([126]) + struct.pack("!H", len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One client frame (always masked), unmasked: (opcode, payload)."""
    first, second = await reader.readexactly(2)
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", await reader.readexactly(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", await reader.readexactly(8))
    mask = await reader.readexactly(4)
    body = await reader.readexactly(length)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(body))


async def test_a_fragmented_message_with_a_ping_inside_is_reassembled() -> None:
    """aiohttp's server never fragments, so this peer speaks raw RFC 6455."""
    seen: list[tuple[int, bytes]] = []

    async def send_in_fragments(writer: asyncio.StreamWriter, message: bytes) -> None:
        first, middle, last = message[:7], message[7:19], message[19:]
        writer.write(_frame(0x1, first, fin=False))
        writer.write(_frame(0x0, middle, fin=False))
        writer.write(_frame(0x9, b"mid-message", fin=True))  # control frames may interleave
        writer.write(_frame(0x0, last, fin=True))
        await writer.drain()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in request.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept_key = base64.b64encode(hashlib.sha1(key + _ACCEPT_GUID).digest())
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept_key + b"\r\n\r\n"
        )
        _, initialize = await _read_frame(reader)
        init_id = json.loads(initialize)["id"]
        result = {"sessionId": "fragmented", "environmentInfo": ENVIRONMENT_INFO}
        await send_in_fragments(writer, json.dumps({"id": init_id, "result": result}).encode())
        while True:  # the pong, the initialized notification, environment/status
            opcode, payload = await _read_frame(reader)
            seen.append((opcode, payload))
            if opcode == 0x1 and json.loads(payload).get("method") == "environment/status":
                break
        status_id = json.loads(payload)["id"]
        reply = {"id": status_id, "result": {"status": "ready in pieces"}}
        await send_in_fragments(writer, json.dumps(reply).encode())
        # The client's close frame is answered, as RFC 6455 asks (else the client
        # waits out its close timeout, 5 s, before it hangs up).
        while (frame := await _read_frame(reader))[0] != 0x8:
            pass
        writer.write(_frame(0x8, frame[1], fin=True))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with await ExecServerClient.connect(f"ws://127.0.0.1:{port}") as client:
            assert client.session_id == "fragmented"
            assert await client.environment_status() == "ready in pieces"
    finally:
        server.close()
        await server.wait_closed()
    assert (0xA, b"mid-message") in seen  # the ping inside the message was answered


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 and the server context that presents it."""
    openssl = shutil.which("openssl")
    assert openssl is not None, "openssl is needed to make the test certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return cert, context


async def test_wss_verifies_the_certificate(
    self_signed: tuple[Path, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, context = self_signed

    async def handle(ws: web.WebSocketResponse) -> None:
        await ScriptedPeer(ws).handshake()
        await ws.receive()  # until the client closes

    async with ws_peer(handle, tls=context) as url:
        with pytest.raises(ExecServerConnectError, match=r"(?i)certificate"):
            await ExecServerClient.connect(url, auto_reconnect=False)
    # Trusted through the standard OpenSSL variable, the same server is accepted.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    async with ws_peer(handle, tls=context) as url:
        async with await ExecServerClient.connect(url) as client:
            assert client.session_id == "session-1"
            assert client.url is not None and client.url.startswith("wss://")


async def test_a_connection_adds_no_websocket_library_lines_to_an_info_log(
    execserver: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    # An agent host logging at INFO opens many connections; picows' own
    # "established"/"Disconnected" lines per connection are noise there.
    caplog.set_level(logging.INFO)
    async with await ExecServerClient.connect(execserver.url) as client:
        await client.fs.get_metadata("/")
    chatter = [r for r in caplog.records if "picows" in r.name and r.levelno < logging.WARNING]
    assert chatter == []
