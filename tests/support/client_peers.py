"""Helpers for the client tests (no tests here): a TCP proxy that can cut the
connection, and a scripted websocket peer that plays the server's part."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlparse

from aiohttp import WSMsgType, web

from execserver.wire.sandbox import (
    ExecFileSystemSandboxEntry,
    FileSystemSandboxContext,
    ManagedPermissions,
    RestrictedFileSystem,
    RootSpecial,
    SpecialFsPath,
)


class TcpProxy:
    """127.0.0.1 forwarder in front of a server, for dropping connections on demand.

    ``drop()`` resets every forwarded connection (both sides see it at once, as
    after a network failure); while ``refusing`` new connections are closed
    straight away, so a reconnecting client keeps failing until it is cleared.
    """

    def __init__(self, target_url: str) -> None:
        parsed = urlparse(target_url)
        assert parsed.hostname is not None and parsed.port is not None
        self._target = (parsed.hostname, parsed.port)
        self._server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.refusing = False
        self.accepted = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._server.wait_closed()

    def drop(self) -> None:
        for client, upstream in self._pairs:
            for writer in (client, upstream):
                writer.transport.abort()
        self._pairs.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._pairs.append((writer, up_writer))
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.transport.abort()


class ScriptedPeer:
    """The server side of one websocket connection, driven by a test script."""

    def __init__(self, ws: web.WebSocketResponse, authorization: str | None = None) -> None:
        self.ws = ws
        self.authorization = authorization  # the upgrade's Authorization header

    async def recv(self) -> dict[str, Any]:
        msg = await self.ws.receive()
        assert msg.type == WSMsgType.TEXT, msg
        data: dict[str, Any] = json.loads(msg.data)
        return data

    async def recv_or_none(self) -> dict[str, Any] | None:
        """The next message, or None once the client has closed the connection."""
        msg = await self.ws.receive()
        if msg.type != WSMsgType.TEXT:
            return None
        data: dict[str, Any] = json.loads(msg.data)
        return data

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(obj))

    async def expect(self, method: str) -> dict[str, Any]:
        msg = await self.recv()
        assert msg.get("method") == method, msg
        return msg

    async def reply(self, request: dict[str, Any], result: Any) -> None:
        await self.send({"id": request["id"], "result": result})

    async def error(self, request: dict[str, Any], code: int, message: str) -> None:
        await self.send({"error": {"code": code, "message": message}, "id": request["id"]})

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"method": method, "params": params})

    async def handshake(self, session_id: str = "session-1") -> dict[str, Any]:
        init = await self.expect("initialize")
        await self.reply(init, {"sessionId": session_id, "environmentInfo": ENVIRONMENT_INFO})
        await self.expect("initialized")
        return init


ENVIRONMENT_INFO: dict[str, Any] = {
    "shell": {"name": "bash", "path": "/bin/bash"},
    "executorVersion": "0.169.0",
    "providerId": None,
    "cwd": "file:///tmp",
    "userHomeDir": "file:///root",
    "platformOs": "linux",
    "prependPathDirs": [],
    "temporaryDirectories": [],
    "tempDir": "file:///tmp",
    "capabilities": {},
}

Script = Callable[[ScriptedPeer], Awaitable[None]]


@contextlib.asynccontextmanager
async def scripted_server(*scripts: Script) -> AsyncIterator[str]:
    """A ws server on 127.0.0.1 whose n-th connection runs the n-th script.

    A script that returns leaves the connection open until the client closes
    it; to drop the connection a script closes ``peer.ws`` itself. Failures in
    a script are re-raised when the context exits, so assertions count.
    """
    remaining = list(scripts)
    errors: list[BaseException] = []

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        if not remaining:
            await ws.close()
            return ws
        script = remaining.pop(0)
        try:
            await script(ScriptedPeer(ws, request.headers.get("Authorization")))
            while not ws.closed:
                msg = await ws.receive()
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR):
                    break
        except Exception as exc:
            errors.append(exc)
            await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
    if errors:
        raise errors[0]


def read_only_sandbox() -> FileSystemSandboxContext:
    """A sandbox context that may read everything and write nothing."""
    return FileSystemSandboxContext(
        permissions=ManagedPermissions(
            file_system=RestrictedFileSystem(
                entries=[
                    ExecFileSystemSandboxEntry(
                        path=SpecialFsPath(value=RootSpecial()), access="read"
                    )
                ]
            ),
            network="restricted",
        ),
        windows_sandbox_level="disabled",
    )
