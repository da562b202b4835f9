"""Byte-message transports under the JSON-RPC layer: a websocket and a child's stdio.

A transport moves whole messages (one JSON object each) and knows nothing
about JSON-RPC. ``receive`` returns ``None`` once the peer is gone, however it
went (close frame, reset, EOF), because the layer above treats every loss the
same way: fail what is pending and maybe resume.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Protocol

import aiohttp

from execserver.client.errors import ExecServerConnectError, ExecServerTimeout

__all__ = ["StdioTransport", "Transport", "WebSocketTransport"]

log = logging.getLogger(__name__)

# A line from a stdio server can be a whole base64 file; never cut it.
_STDIO_LINE_LIMIT = 1 << 31


class Transport(Protocol):
    async def send(self, message: bytes) -> None: ...

    async def receive(self) -> bytes | None: ...

    async def close(self) -> None: ...

    def abort(self) -> None:
        """Drop the connection at once, without a goodbye (used on decode errors)."""


_REASON_LIMIT = 500


async def _refusal_reason(
    session: aiohttp.ClientSession, url: str, headers: Mapping[str, str]
) -> str | None:
    """The body of a refused upgrade (e.g. ``invalid websocket bearer token``).

    aiohttp drops it when the upgrade fails, so ask once more with a plain
    request carrying the same upgrade headers; the server answers it the same way.
    """
    upgrade = {
        **headers,
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
    }
    http_url = "http" + url.removeprefix("ws")  # ws:// -> http://, wss:// -> https://
    try:
        async with asyncio.timeout(5), session.get(http_url, headers=upgrade) as response:
            if response.status == 101:
                return None
            text = (await response.content.read(_REASON_LIMIT)).decode("utf-8", "replace")
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    return " ".join(text.split()) or None


class WebSocketTransport:
    """One aiohttp client websocket. Text and binary frames are both accepted."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._session = session
        self._ws = ws

    @classmethod
    async def connect(
        cls, url: str, *, token: str | None = None, timeout: float | None = 10.0
    ) -> WebSocketTransport:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        session = aiohttp.ClientSession()
        try:
            async with asyncio.timeout(timeout):
                # max_msg_size=0: the server does not bound outbound messages (a
                # 3 MiB file read is one ~4 MiB frame), so neither may we.
                # autoping answers the server's 30 s pings; no client heartbeat,
                # the reference does not need one.
                ws = await session.ws_connect(url, headers=headers, max_msg_size=0, autoping=True)
        except TimeoutError as exc:
            await session.close()
            raise ExecServerTimeout("connect", f"timed out connecting to {url}") from exc
        except aiohttp.WSServerHandshakeError as exc:
            try:
                reason = await _refusal_reason(session, url, headers) or exc.message
            finally:
                await session.close()
            raise ExecServerConnectError(
                f"websocket upgrade to {url} refused: HTTP {exc.status}: {reason}",
                status=exc.status,
                reason=reason,
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            await session.close()
            raise ExecServerConnectError(f"cannot connect to {url}: {exc}") from exc
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def send(self, message: bytes) -> None:
        await self._ws.send_str(message.decode())

    async def receive(self) -> bytes | None:
        while True:
            msg = await self._ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT:
                data: str = msg.data
                return data.encode()
            if msg.type == aiohttp.WSMsgType.BINARY:
                raw: bytes = msg.data
                return raw
            if msg.type in (aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
                continue
            return None

    async def close(self) -> None:
        try:
            await self._ws.close()
        finally:
            await self._session.close()

    def abort(self) -> None:
        conn = self._ws._response.connection  # aiohttp keeps the socket here
        if conn is not None and conn.transport is not None:
            conn.transport.abort()


class StdioTransport:
    """A child server speaking newline-delimited JSON on its stdin/stdout.

    The child belongs to the transport: closing it (or dropping the client)
    ends the child, as the reference client does.
    """

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    @classmethod
    async def spawn(
        cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> StdioTransport:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=None if env is None else dict(env),
                limit=_STDIO_LINE_LIMIT,
            )
        except OSError as exc:
            raise ExecServerConnectError(f"cannot start {argv[0]!r}: {exc}") from exc
        return cls(proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._proc

    async def send(self, message: bytes) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(message + b"\n")
            await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionResetError("stdio server went away") from exc

    async def receive(self) -> bytes | None:
        stdout = self._proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except (ConnectionError, ValueError):
                return None
            if not line:
                return None
            line = line.strip()
            if line:
                return line

    async def close(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        # EOF on stdin ends a stdio server (and its children); give it a moment.
        try:
            await asyncio.wait_for(self._proc.wait(), 5)
        except TimeoutError:
            self.abort()
            await self._proc.wait()

    def abort(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
