"""HTTP helpers for the operations tests (auth, limits, metrics, audit): raw HTTP
upgrades that show a rejection's status and body, plain GETs, and hand-made JWTs
(so malformed ones can be built too). JSON-RPC goes through tests/support/rpc.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
from typing import Any

import aiohttp


def hostport(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("ws://").rpartition(":")
    return host, int(port)


async def raw_request(
    url: str, path: str = "/", headers: dict[str, str] | None = None, upgrade: bool = True
) -> tuple[int, str]:
    """One HTTP/1.1 request written by hand; returns (status, body)."""
    host, port = hostport(url)
    reader, writer = await asyncio.open_connection(host, port)
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}"]
    if upgrade:
        key = base64.b64encode(os.urandom(16)).decode()
        lines += [
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status_line, *header_lines = head.decode().split("\r\n")
    status = int(status_line.split()[1])
    length = 0
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
    writer.close()
    return status, body.decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(secret: bytes, claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    """A compact JWS signed with HMAC-SHA256, whatever the header claims."""
    head = _b64(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = _b64(hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{signature}"


async def http_get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    base = "http://" + url.removeprefix("ws://")
    async with (
        aiohttp.ClientSession() as session,
        session.get(base + path, headers=headers) as resp,
    ):
        return resp.status, await resp.text()
