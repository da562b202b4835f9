"""Helpers for the attack tests: every attack goes through the protocol to a real
daemon (real websocket, real sandbox, real files in tmp dirs), nothing mocked.

``attack`` starts one sandboxed command and returns its merged output and exit
status; the payloads are small Python or bash programs run *inside* the
sandbox, printing one marker per attempt so a test can assert on each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.rpc import RpcClient
from tests.support.sandbox import (
    PATH,
    ROOT_READ,
    context_json,
    entry,
    managed,
    special,
    uri,
)

__all__ = [
    "PATH",
    "PYTHON",
    "ROOT_READ",
    "Result",
    "UnixListener",
    "attack",
    "bash",
    "entry",
    "python",
    "received_datagrams",
    "sandbox",
    "short_tmp_dir",
    "special",
    "unix_dgram_service",
    "unix_stream_service",
    "unrestricted",
    "uri",
]

PYTHON = sys.executable


def sandbox(
    entries: list[dict[str, Any]], *, network: str = "restricted", cwd: Path | None = None
) -> dict[str, Any]:
    """A managed, restricted-filesystem context as the wire carries it."""
    extra = {} if cwd is None else {"cwd": uri(cwd)}
    return context_json(managed(entries, network), **extra)


def unrestricted(network: str = "restricted") -> dict[str, Any]:
    return context_json(
        {"type": "managed", "file_system": {"type": "unrestricted"}, "network": network}
    )


@dataclass
class Result:
    exit_code: int | None
    output: str
    sandbox_denied: bool | None

    def marker(self, name: str) -> str:
        """The value printed as ``name=value`` (the last one wins)."""
        value = ""
        for line in self.output.splitlines():
            key, sep, rest = line.partition("=")
            if sep and key.strip() == name:
                value = rest.strip()
        return value


_counter = iter(range(1_000_000))


async def attack(
    client: RpcClient,
    argv: list[str],
    *,
    cwd: Path,
    context: dict[str, Any] | None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    **extra: Any,
) -> Result:
    """Run ``argv`` under ``context`` through process/start; wait until closed."""
    process_id = f"attack-{next(_counter)}"
    params: dict[str, Any] = {"cwd": uri(cwd), **extra}
    if context is not None:
        params["sandbox"] = context
    await client.start(process_id, argv, env=env or {"PATH": PATH, "LANG": "C.UTF-8"}, **params)
    events = await client.wait_closed(process_id, timeout)
    exited = events.exited() or {}
    return Result(
        exited.get("exitCode"),
        events.output().decode(errors="replace"),
        exited.get("sandboxDenied"),
    )


def python(code: str, *args: str) -> list[str]:
    return [PYTHON, "-I", "-c", code, *args]


def bash(script: str) -> list[str]:
    return ["bash", "--norc", "--noprofile", "-c", script]


@dataclass
class UnixListener:
    """A stand-in for a host service socket (docker.sock, /dev/log...)."""

    path: str
    accepted: int = 0
    received: bytes = b""


@contextlib.asynccontextmanager
async def unix_stream_service(directory: Path, name: str) -> AsyncIterator[UnixListener]:
    listener = UnixListener(str(directory / name))

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        listener.accepted += 1
        with contextlib.suppress(Exception):
            listener.received += await asyncio.wait_for(reader.read(65536), 5)
            writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(serve, listener.path)
    os.chmod(listener.path, 0o666)
    try:
        yield listener
    finally:
        server.close()
        await server.wait_closed()


@contextlib.contextmanager
def unix_dgram_service(directory: Path, name: str) -> Iterator[socket.socket]:
    """A host datagram socket (like /dev/log); read it non-blocking afterwards."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(directory / name)
    sock.bind(path)
    os.chmod(path, 0o666)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def received_datagrams(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            return out


def short_tmp_dir() -> str:
    """A short directory for unix sockets (sun_path is limited to 108 bytes)."""
    return tempfile.mkdtemp(prefix="es-sec-", dir="/tmp")
