"""A websocket client on a blocking socket (RFC 6455), for one-shot commands.

``execserver patch`` without ``--persist`` connects, makes a dozen calls one
after the other and exits; most of its wall time was start-up. The event loop,
picows and the async client cost ~80 ms to import on the 2-vCPU machine the
benchmarks run on (asyncio 29 ms with ssl, concurrent.futures and logging,
picows 24 ms with its proxy support); this module needs only ``socket``,
``base64``, CPython's own SHA-1 and ``os`` (~5 ms). The sans-IO libraries were measured
too and are not cheap to import either: ``wsproto`` 31 ms (h11 17 ms of it),
``websockets`` ~45 ms. What a client of one request at a time needs of the
protocol is small, so it is written here: the opening handshake (with the
``Sec-WebSocket-Accept`` check), masked text frames out, text, binary and
fragmented messages in, pings answered, the closing handshake.

Not for long-lived connections: there is no reader running between calls (a
server ping is answered at the next receive), and a frame is read whole into
memory (so is a JSON-RPC message anyway).
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

try:
    # The handshake's one SHA-1: hashlib would load OpenSSL's _hashlib first,
    # ~3.5 ms of a one-shot command's start, against ~0.4 ms for this module.
    from _sha1 import sha1 as _sha1  # type: ignore[import-not-found]
except ImportError:  # a CPython built without its own hash modules
    from hashlib import sha1 as _sha1

from execserver.client.errors import (
    REFUSAL_BODY_LIMIT,
    ExecServerConnectError,
    ExecServerTimeout,
)

__all__ = ["BlockingWebSocket", "WebSocketClosed"]

# RFC 6455 section 1.3: the GUID the server appends to the client's key.
_ACCEPT_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

_CONTINUATION: Final = 0x0
_TEXT: Final = 0x1
_BINARY: Final = 0x2
_CLOSE: Final = 0x8
_PING: Final = 0x9
_PONG: Final = 0xA

_FIN: Final = 0x80
_MASKED: Final = 0x80
_NORMAL_CLOSURE: Final = 1000

# The upgrade answer's head; a server that sends more without the blank line
# is not a websocket server.
_HEAD_LIMIT: Final = 64 * 1024
_READ_SIZE: Final = 256 * 1024
# How long close() waits for the server's close frame before hanging up.
_CLOSE_WAIT: Final = 1.0


class WebSocketClosed(ConnectionError):
    """The server closed the websocket (or the TCP connection ended)."""


def _mask(payload: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte key repeated, done as one big-integer XOR (a Python
    loop per byte costs ~50 ns a byte; this is ~1 ns)."""
    if not payload:
        return payload
    size = len(payload)
    repeated = (key * (size // 4 + 1))[:size]
    masked = int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")
    return masked.to_bytes(size, "little")


def _frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked frame (a client masks every frame it sends)."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", _FIN | opcode, _MASKED | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", _FIN | opcode, _MASKED | 126, size)
    else:
        head = struct.pack("!BBQ", _FIN | opcode, _MASKED | 127, size)
    key = os.urandom(4)
    return head + key + _mask(payload, key)


class BlockingWebSocket:
    """One client websocket over a blocking socket. Every operation honours the
    socket's timeout (``timeout`` seconds per send or receive; None: no limit)."""

    def __init__(self, sock: socket.socket, buffered: bytes) -> None:
        self._sock = sock
        self._buffer = bytearray(buffered)
        self._fragments: list[bytes] | None = None
        self.closed = False
        # Server pings answered so far (they are answered during receive()).
        self.pings_answered = 0

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = 10.0,
    ) -> BlockingWebSocket:
        """Open ``url`` (``ws://`` or ``wss://``) and complete the opening handshake.
        A refused upgrade raises :class:`ExecServerConnectError` with the HTTP
        status and the body's text, as the async client's transport does."""
        parts = urlsplit(url)
        secure = parts.scheme == "wss"
        host = parts.hostname
        if host is None:
            raise ExecServerConnectError(f"cannot connect to {url}: no host in the URL")
        try:
            port = parts.port or (443 if secure else 80)
        except ValueError as exc:
            raise ExecServerConnectError(f"cannot connect to {url}: {exc}") from exc
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        # An ASCII host goes to getaddrinfo as bytes: a str would be encoded with
        # the "idna" codec, whose import (with stringprep) costs ~2 ms.
        address: str | bytes = host.encode("ascii") if host.isascii() else host
        try:
            # (typeshed says str; getaddrinfo, which gets it, takes bytes too)
            sock = socket.create_connection((address, port), timeout=timeout)  # type: ignore[arg-type]
        except TimeoutError as exc:
            raise ExecServerTimeout("connect", f"timed out connecting to {url}") from exc
        except OSError as exc:
            raise ExecServerConnectError(f"cannot connect to {url}: {exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if secure:
                # Only a wss:// URL pays for loading OpenSSL.
                import ssl

                context = ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=host)
            return cls._handshake(sock, url, parts.netloc, target, headers or {})
        except BaseException:
            sock.close()
            raise

    @classmethod
    def _handshake(
        cls,
        sock: socket.socket,
        url: str,
        netloc: str,
        target: str,
        headers: Mapping[str, str],
    ) -> BlockingWebSocket:
        key = base64.b64encode(os.urandom(16))
        lines = [
            f"GET {target} HTTP/1.1",
            f"Host: {netloc.rpartition('@')[2]}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key.decode('ascii')}",
            "Sec-WebSocket-Version: 13",
        ]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            received = bytearray()
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(_READ_SIZE)
                if not chunk:
                    raise ExecServerConnectError(
                        f"cannot connect to {url}: connection closed during the websocket handshake"
                    ) from ConnectionResetError("connection closed during the websocket handshake")
                received += chunk
                if len(received) > _HEAD_LIMIT:
                    raise ExecServerConnectError(
                        f"cannot connect to {url}: the answer to the upgrade is not HTTP"
                    )
        except TimeoutError as exc:
            raise ExecServerTimeout("connect", f"timed out connecting to {url}") from exc
        except OSError as exc:
            raise ExecServerConnectError(f"cannot connect to {url}: {exc}") from exc
        head, _, rest = bytes(received).partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        fields: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        status_parts = status_line.split(" ", 2)
        if len(status_parts) < 2 or not status_parts[0].startswith("HTTP/"):
            raise ExecServerConnectError(
                f"cannot connect to {url}: the answer to the upgrade is not HTTP"
            )
        try:
            status = int(status_parts[1])
        except ValueError:
            raise ExecServerConnectError(
                f"cannot connect to {url}: the answer to the upgrade is not HTTP"
            ) from None
        if status != 101:
            body = cls._refusal_body(sock, rest, fields)
            status_text = status_parts[2] if len(status_parts) == 3 else status_line
            raise ExecServerConnectError.upgrade_refused(url, status, body, status_text)
        expected = base64.b64encode(_sha1(key + _ACCEPT_GUID).digest()).decode("ascii")
        if fields.get("sec-websocket-accept") != expected:
            raise ExecServerConnectError(
                f"cannot connect to {url}: the server's Sec-WebSocket-Accept does not match"
            )
        return cls(sock, rest)

    @staticmethod
    def _refusal_body(sock: socket.socket, rest: bytes, fields: Mapping[str, str]) -> bytes:
        """Up to the first ``REFUSAL_BODY_LIMIT`` bytes of a refusal's body."""
        try:
            wanted = min(int(fields.get("content-length", "0")), REFUSAL_BODY_LIMIT)
        except ValueError:
            wanted = 0
        body = bytearray(rest)
        try:
            while len(body) < wanted:
                chunk = sock.recv(wanted - len(body))
                if not chunk:
                    break
                body += chunk
        except OSError:
            pass  # the status alone still says what went wrong
        return bytes(body[:wanted])

    # -- frames ----------------------------------------------------------------

    def send_text(self, message: bytes) -> None:
        """Send ``message`` (UTF-8 JSON) as one text frame."""
        if self.closed:
            raise WebSocketClosed("websocket is closed")
        self._sock.sendall(_frame(_TEXT, message))

    def receive(self) -> bytes:
        """The next whole message (text or binary, fragments joined). Pings are
        answered on the way. Raises :class:`WebSocketClosed` when the server
        closes, after answering its close frame."""
        while True:
            fin, opcode, payload = self._read_frame()
            if opcode in (_TEXT, _BINARY):
                if fin:
                    return payload
                self._fragments = [payload]
            elif opcode == _CONTINUATION:
                if self._fragments is None:
                    self._fail("continuation frame without a start")
                else:
                    self._fragments.append(payload)
                    if fin:
                        message, self._fragments = b"".join(self._fragments), None
                        return message
            elif opcode == _PING:
                self._sock.sendall(_frame(_PONG, payload))
                self.pings_answered += 1
            elif opcode == _CLOSE:
                self._answer_close()
                raise WebSocketClosed("the server closed the websocket")
            elif opcode != _PONG:
                self._fail(f"unknown opcode {opcode}")

    def _read_frame(self) -> tuple[bool, int, bytes]:
        head = self._read_exactly(2)
        first, second = head[0], head[1]
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", self._read_exactly(2))
        elif size == 127:
            (size,) = struct.unpack("!Q", self._read_exactly(8))
        key = self._read_exactly(4) if second & _MASKED else b""
        payload = self._read_exactly(size)
        if key:  # servers do not mask; accept it anyway rather than drop the answer
            payload = _mask(payload, key)
        return bool(first & _FIN), first & 0x0F, payload

    def _read_exactly(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            chunk = self._sock.recv(max(_READ_SIZE, size - len(buffer)))
            if not chunk:
                self.closed = True
                raise WebSocketClosed("the connection ended")
            buffer += chunk
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _fail(self, reason: str) -> None:
        self.abort()
        raise WebSocketClosed(f"websocket protocol error: {reason}")

    def _answer_close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.sendall(_frame(_CLOSE, struct.pack("!H", _NORMAL_CLOSURE)))
            except OSError:
                pass  # the server may already have hung up
            self._sock.close()

    def close(self) -> None:
        """Closing handshake: send our close frame, wait briefly for the server's,
        hang up."""
        if self.closed:
            return
        self.closed = True
        sock = self._sock
        try:
            sock.sendall(_frame(_CLOSE, struct.pack("!H", _NORMAL_CLOSURE)))
            sock.settimeout(_CLOSE_WAIT)
            while True:
                _, opcode, _ = self._read_frame()
                if opcode == _CLOSE:
                    break
        except (OSError, WebSocketClosed):
            pass  # gone already, or not answering: hang up either way
        finally:
            sock.close()

    def abort(self) -> None:
        """Hang up without a closing handshake."""
        self.closed = True
        self._sock.close()

    def settimeout(self, seconds: float | None) -> None:
        self._sock.settimeout(seconds)
