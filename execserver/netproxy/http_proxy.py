"""The HTTP front end: ``CONNECT host:port`` tunnels and absolute-form plain HTTP.

One request per client connection: after a plain request is forwarded (with
``Connection: close`` upstream) only the response flows back and the
connection ends. Keeping connections alive would let a second request ride on
an already checked connection (e.g. a POST after a GET in limited mode).
"""

from __future__ import annotations

import asyncio
import logging
import os
from urllib.parse import SplitResult, urlsplit

from execserver.netproxy import decision as d
from execserver.netproxy import upstream
from execserver.netproxy.engine import PolicyEngine
from execserver.netproxy.relay import close, peer_text, pipe, relay
from execserver.sandbox.hidden import is_private

__all__ = ["handle"]

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT_S = 30.0
# Hop-by-hop and proxy-only headers never forwarded upstream.
_DROP = frozenset(
    {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "x-unix-socket"}
)


class BadRequest(Exception):
    pass


def split_authority(authority: str, default_port: int) -> tuple[str, int]:
    host, port = authority, default_port
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise BadRequest("bad authority")
        host, rest = authority[1:end], authority[end + 1 :]
        if rest.startswith(":"):
            port = _port(rest[1:])
    elif authority.count(":") == 1:
        host, _, text = authority.partition(":")
        port = _port(text)
    if not host:
        raise BadRequest("missing host")
    return host, port


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise BadRequest("bad port")
    return int(text)


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest("malformed request line") from None
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest("malformed header")
        headers.append((name.strip(), value.strip()))
    return method.upper(), target, version, headers


def header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


async def handle(
    engine: PolicyEngine, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            method, target, _version, headers = parse_head(head[:-4])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        except BadRequest as exc:
            writer.write(d.simple_response(400, "Bad Request", str(exc)))
            return
        client = peer_text(writer)
        try:
            if method == "CONNECT":
                await _tunnel(engine, reader, writer, target, client)
            else:
                await _forward(engine, reader, writer, method, target, headers, client)
        except BadRequest as exc:
            writer.write(d.simple_response(400, "Bad Request", str(exc)))
    except (ConnectionError, OSError, RuntimeError):
        pass  # the child went away, or the proxy closed its transport (RuntimeError)
    finally:
        await close(writer)


async def _tunnel(
    engine: PolicyEngine,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    authority: str,
    client: str | None,
) -> None:
    host, port = split_authority(authority, 443)
    target = d.Target("https_connect", host, port, "CONNECT", client)
    outcome = await engine.check(target)
    if not outcome.allowed:
        writer.write(d.blocked_response(target, outcome.decision))
        return
    try:
        up_reader, up_writer = await upstream.open_stream(engine, outcome, target)
    except OSError as exc:
        writer.write(d.simple_response(502, "Bad Gateway", f"upstream unreachable: {exc}"))
        return
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    try:
        await relay(reader, writer, up_reader, up_writer)
    finally:
        await close(up_writer)


async def _forward(
    engine: PolicyEngine,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    url: str,
    headers: list[tuple[str, str]],
    client: str | None,
) -> None:
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or not parts.netloc:
        raise BadRequest("only absolute http:// URLs (or CONNECT) can be proxied")
    host, port = split_authority(parts.netloc.rpartition("@")[2], 80)
    target = d.Target("http", host, port, method, client)
    socket_path = header(headers, "x-unix-socket")
    if socket_path is not None:
        await _forward_unix(engine, reader, writer, target, socket_path, parts, headers)
        return
    outcome = await engine.check(target)
    if not outcome.allowed:
        writer.write(d.blocked_response(target, outcome.decision))
        return
    if engine.credentials is not None:
        headers = engine.credentials.inject("http", host, port, parts.path or "/", headers)
    try:
        up_reader, up_writer, via = await upstream.open_http(engine, outcome, target)
    except OSError as exc:
        writer.write(d.simple_response(502, "Bad Gateway", f"upstream unreachable: {exc}"))
        return
    await _exchange(reader, writer, up_reader, up_writer, method, parts, headers, via=via)


def _unix_socket_target(engine: PolicyEngine, path: str) -> tuple[bool, str]:
    """(allowed, the resolved path to connect to). The daemon's private directory
    (other sandboxes' proxy sockets) is never a destination, whatever the policy
    lists."""
    real = os.path.realpath(path) if os.path.isabs(path) else path
    return engine.policy.unix_socket_allowed(path) and not is_private(real), real


async def _forward_unix(
    engine: PolicyEngine,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: d.Target,
    path: str,
    parts: SplitResult,
    headers: list[tuple[str, str]],
) -> None:
    """``x-unix-socket: /path``: the request goes to a host unix socket, if the
    ``unixSockets`` policy lists it (or all are dangerously allowed)."""
    # Resolving touches the filesystem: off the event loop.
    allowed, real = await asyncio.to_thread(_unix_socket_target, engine, path)
    await engine.report_unix_socket(target, allowed)
    if not allowed:
        writer.write(d.blocked_response(target, d.UNIX_SOCKET_DENIED))
        return
    guard = engine.method_guard(target)
    if guard is not None:  # limited mode: read-only methods only, here too
        await engine.report_guard(target, guard)
        writer.write(d.blocked_response(target, guard))
        return
    try:
        # Exactly the socket that was checked, not the name again.
        up_reader, up_writer = await asyncio.open_unix_connection(real)
    except OSError as exc:
        writer.write(d.simple_response(502, "Bad Gateway", f"unix socket unreachable: {exc}"))
        return
    assert target.method is not None
    await _exchange(reader, writer, up_reader, up_writer, target.method, parts, headers)


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    method: str,
    parts: SplitResult,
    headers: list[tuple[str, str]],
    *,
    via: upstream.UpstreamProxy | None = None,
) -> None:
    path = parts.path or "/"
    query = parts.query
    origin_form = path + (f"?{query}" if query else "")
    authority = parts.netloc.rpartition("@")[2]
    # An upstream proxy is sent the absolute form (and its credentials).
    target = f"http://{authority}{origin_form}" if via is not None else origin_form
    lines = [f"{method} {target} HTTP/1.1"]
    if header(headers, "host") is None:  # HTTP/1.1 requires it; the URL names it
        lines.append(f"Host: {authority}")
    if via is not None and via.authorization is not None:
        lines.append(f"Proxy-Authorization: {via.authorization}")
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in _DROP]
    lines.append("Connection: close")
    try:
        up_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await _copy_body(reader, up_writer, headers)
        await pipe(up_reader, writer)
    finally:
        await close(up_writer)


async def _copy_body(
    reader: asyncio.StreamReader, dst: asyncio.StreamWriter, headers: list[tuple[str, str]]
) -> None:
    if (header(headers, "transfer-encoding") or "").lower().endswith("chunked"):
        await _copy_chunked(reader, dst)
        return
    remaining = int(header(headers, "content-length") or "0")
    while remaining > 0:
        data = await reader.read(min(remaining, 65536))
        if not data:
            break
        dst.write(data)
        remaining -= len(data)
        await dst.drain()


async def _copy_chunked(reader: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    while True:
        line = await reader.readuntil(b"\r\n")
        dst.write(line)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest("malformed chunk size") from None
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                dst.write(trailer)
            dst.write(b"\r\n")
            await dst.drain()
            return
        dst.write(await reader.readexactly(size + 2))
        await dst.drain()
