"""The HTTP front end: ``CONNECT host:port`` tunnels and absolute-form plain HTTP.

One request per client connection: after a plain request is forwarded (with
``Connection: close`` upstream) only the response flows back and the
connection ends. Keeping connections alive would let a second request ride on
an already checked connection (e.g. a POST after a GET in limited mode).

Request smuggling is the same danger through the back door: if the proxy and
the destination disagree on where the one request ends, the rest of its bytes
are a second request nobody checked. So the head is parsed strictly (h11,
plus the refusals ``parse_request`` lists), answered 400 with a short reason
otherwise, and never forwarded as received: the proxy writes a new head from
the parsed values with ``Host`` from the URL, exactly one framing header, and
the body re-framed (a chunked body decoded and re-chunked).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import h11

from execserver.netproxy import decision as d
from execserver.netproxy import upstream
from execserver.netproxy.credentials import CredentialScopeError, Scrubber
from execserver.netproxy.engine import PolicyEngine
from execserver.netproxy.relay import BUFFER, close, peer_text, pipe, relay
from execserver.sandbox.hidden import is_private

__all__ = ["handle"]

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT_S = 30.0
# Hop-by-hop and proxy-only headers never forwarded upstream. The framing
# headers and Host are dropped too: the proxy writes its own (exactly one
# framing header for the body it re-frames, Host from the URL it decided on).
_DROP = frozenset(
    {
        "proxy-connection",
        "proxy-authorization",
        "connection",
        "keep-alive",
        "x-unix-socket",
        "host",
        "content-length",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
    }
)
# Control characters other than CR/LF (checked as pairs) and HTAB: h11 lets a
# few of them through in values; a proxy must not forward what a back end
# could read as a line end or a terminator.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HOST = re.compile(rb"\r\nhost:", re.IGNORECASE)


class BadRequest(Exception):
    pass


@dataclass(frozen=True)
class Request:
    """One request head as the strict parser read it."""

    method: str
    target: str
    http10: bool
    # (name as sent, value) without the framing headers' duplicates.
    headers: list[tuple[str, str]]
    chunked: bool
    length: int  # the body's length when not chunked (0: none)
    # The parser, left at the start of the body (chunked bodies are decoded by it).
    parser: h11.Connection


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


def parse_request(head: bytes) -> Request:
    """``head`` (up to and including the blank line) parsed strictly: h11's
    grammar, plus what a proxy must refuse on top of it because the next hop
    may read it differently (request smuggling):

    * a CR or LF that is not part of a CRLF (h11 accepts bare LF line ends);
    * obs-fold continuation lines (h11 unfolds them);
    * control characters anywhere;
    * Content-Length values that differ (h11 refuses them; equal repeats it
      merges into one, as RFC 9110 8.6 allows), a second Host, and
      Content-Length together with Transfer-Encoding (h11 lets
      Transfer-Encoding win); a Transfer-Encoding other than exactly
      ``chunked`` (h11 refuses that, with a 501 hint: we answer 400).
    """
    if head.count(b"\r") != head.count(b"\r\n") or head.count(b"\n") != head.count(b"\r\n"):
        raise BadRequest("bare CR or LF in the request head")
    if b"\r\n " in head or b"\r\n\t" in head:
        raise BadRequest("obsolete line folding in the request head")
    if _CONTROL.search(head) is not None:
        raise BadRequest("control character in the request head")
    synthetic_host = _HOST.search(head) is None
    if synthetic_host:
        # HTTP/1.1 requires Host and h11 enforces it; clients of a proxy often
        # omit it with an absolute URL or CONNECT. The proxy writes Host from
        # the URL anyway, so a stand-in lets h11 parse the rest.
        line_end = head.index(b"\r\n") + 2
        head = head[:line_end] + b"Host: -\r\n" + head[line_end:]
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    try:
        parser.receive_data(head)
        event = parser.next_event()
    except h11.RemoteProtocolError as exc:
        raise BadRequest(f"malformed request: {exc}") from None
    if not isinstance(event, h11.Request):
        raise BadRequest("malformed request")
    headers: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    length = 0
    chunked = False
    items = event.headers.raw_items()
    for raw_name, value in items[1:] if synthetic_host else items:
        name = raw_name.decode("ascii").lower()
        seen[name] = seen.get(name, 0) + 1
        text = value.decode("latin-1")
        if name == "content-length":
            length = int(text)  # h11 checked the digits (and merged "5, 5")
        elif name == "transfer-encoding":
            chunked = True  # h11 accepts only "chunked", once
        headers.append((raw_name.decode("ascii"), text))
    if seen.get("content-length", 0) > 1:
        raise BadRequest("duplicate Content-Length")
    if seen.get("host", 0) > 1:
        raise BadRequest("duplicate Host")
    if chunked and "content-length" in seen:
        raise BadRequest("both Content-Length and Transfer-Encoding")
    return Request(
        event.method.decode("ascii").upper(),
        event.target.decode("ascii"),
        event.http_version == b"1.0",
        headers,
        chunked,
        length,
        parser,
    )


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
            request = parse_request(head)
        except (asyncio.IncompleteReadError, TimeoutError):
            return
        except asyncio.LimitOverrunError:
            writer.write(d.simple_response(400, "Bad Request", "request head too large"))
            return
        except BadRequest as exc:
            writer.write(d.simple_response(400, "Bad Request", str(exc)))
            return
        client = peer_text(writer)
        try:
            if request.method == "CONNECT":
                await _tunnel(engine, reader, writer, request.target, client)
            else:
                await _forward(engine, reader, writer, request, client)
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
    request: Request,
    client: str | None,
) -> None:
    parts = urlsplit(request.target)
    if parts.scheme.lower() != "http" or not parts.netloc:
        raise BadRequest("only absolute http:// URLs (or CONNECT) can be proxied")
    host, port = split_authority(_authority(parts), 80)
    target = d.Target("http", host, port, request.method, client)
    socket_path = header(request.headers, "x-unix-socket")
    if socket_path is not None:
        await _forward_unix(engine, reader, writer, target, socket_path, parts, request)
        return
    outcome = await engine.check(target)
    if not outcome.allowed:
        writer.write(d.blocked_response(target, outcome.decision))
        return
    path, headers, scrubber = parts.path or "/", request.headers, None
    if engine.credentials is not None:
        try:
            prepared = engine.credentials.prepare("http", host, port, path, headers)
        except CredentialScopeError as exc:
            raise BadRequest(str(exc)) from None
        path, headers, scrubber = prepared.path, prepared.headers, prepared.scrubber
    try:
        up_reader, up_writer, via = await upstream.open_http(engine, outcome, target)
    except OSError as exc:
        writer.write(d.simple_response(502, "Bad Gateway", f"upstream unreachable: {exc}"))
        return
    await _exchange(
        reader, writer, up_reader, up_writer, request, parts, path, headers, via, scrubber
    )


def _authority(parts: SplitResult) -> str:
    """The URL's host[:port], without any ``user:password@``."""
    return parts.netloc.rpartition("@")[2]


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
    request: Request,
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
    await _exchange(
        reader, writer, up_reader, up_writer, request, parts, parts.path or "/", request.headers
    )


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    request: Request,
    parts: SplitResult,
    path: str,
    headers: list[tuple[str, str]],
    via: upstream.UpstreamProxy | None = None,
    scrubber: Scrubber | None = None,
) -> None:
    """Write the one request upstream (its head rebuilt from parsed values,
    exactly one framing header, Host from the URL), copy its body re-framed,
    and relay the response."""
    query = parts.query
    origin_form = path + (f"?{query}" if query else "")
    authority = _authority(parts)
    # An upstream proxy is sent the absolute form (and its credentials).
    target = f"http://{authority}{origin_form}" if via is not None else origin_form
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {authority}"]
    if via is not None and via.authorization is not None:
        lines.append(f"Proxy-Authorization: {via.authorization}")
    hop = _connection_options(headers)
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in _DROP and k.lower() not in hop]
    if request.chunked:
        lines.append("Transfer-Encoding: chunked")
    elif request.length:
        lines.append(f"Content-Length: {request.length}")
    lines.append("Connection: close")
    try:
        up_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if request.chunked:
            await _copy_chunked(reader, up_writer, request.parser)
        elif request.length:
            await _copy_length(reader, up_writer, request.length)
        if scrubber is None:
            await pipe(up_reader, writer)
        else:
            await _relay_scrubbed(up_reader, writer, request, scrubber)
    finally:
        await close(up_writer)


def _connection_options(headers: list[tuple[str, str]]) -> frozenset[str]:
    """Headers the ``Connection`` header names: hop-by-hop, never forwarded."""
    return frozenset(
        option.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for option in value.split(",")
    )


async def _copy_length(
    reader: asyncio.StreamReader, dst: asyncio.StreamWriter, remaining: int
) -> None:
    while remaining > 0:
        data = await reader.read(min(remaining, BUFFER))
        if not data:
            raise BadRequest("request body ended early")
        dst.write(data)
        remaining -= len(data)
        await dst.drain()


async def _copy_chunked(
    reader: asyncio.StreamReader, dst: asyncio.StreamWriter, parser: h11.Connection
) -> None:
    """Decode the chunked body with h11 and send it re-chunked: the next hop
    sees only chunk sizes the proxy wrote, no extensions and no trailers."""
    while True:
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            raise BadRequest(f"malformed chunked body: {exc}") from None
        if event is h11.NEED_DATA:
            parser.receive_data(await reader.read(BUFFER))  # b"": EOF, which h11 refuses
        elif isinstance(event, h11.Data):
            if event.data:
                dst.write(b"%x\r\n%b\r\n" % (len(event.data), event.data))
                await dst.drain()
        elif isinstance(event, h11.EndOfMessage):
            dst.write(b"0\r\n\r\n")
            await dst.drain()
            return
        else:
            raise BadRequest("malformed chunked body")


# Response headers the proxy re-frames itself when it rewrites a response body.
_RESPONSE_HOP = frozenset({b"connection", b"keep-alive"})
_RESPONSE_FRAMING = _RESPONSE_HOP | {b"content-length", b"transfer-encoding"}


async def _relay_scrubbed(
    up_reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: Request,
    scrubber: Scrubber,
) -> None:
    """The response to a request that carried a real secret, with the secret
    (and the header values it was put in) replaced by what the child sent,
    in headers and body, so a destination that reflects its request cannot
    hand the secret to the child. The body is scanned as it streams (a window
    of the longest needle's length is held back), so its length changes: it is
    sent chunked (close-delimited to an HTTP/1.0 child)."""
    parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    parser.send(h11.Request(method=request.method, target="/", headers=[("Host", "x")]))
    parser.send(h11.EndOfMessage())
    chunked = False
    started = False
    try:
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                parser.receive_data(await up_reader.read(BUFFER))
            elif isinstance(event, h11.InformationalResponse):
                continue  # 1xx: the child gets the final response only
            elif isinstance(event, h11.Response):
                encoding = (
                    b"".join(v for k, v in event.headers if k == b"content-encoding")
                    .strip()
                    .lower()
                )
                if encoding not in (b"", b"identity"):
                    # Compressed bytes cannot be searched for the secret.
                    writer.write(
                        d.simple_response(
                            502,
                            "Bad Gateway",
                            "the response to a request carrying a credential is "
                            "content-encoded and cannot be checked for the credential",
                        )
                    )
                    return
                bodiless = request.method == "HEAD" or event.status_code in (204, 304)
                chunked = not (request.http10 or bodiless)
                # A bodiless response keeps its Content-Length (it describes the
                # resource, not this message); any other body is re-framed.
                dropped = _RESPONSE_HOP if bodiless else _RESPONSE_FRAMING
                lines = [b"HTTP/1.1 %d %b" % (event.status_code, event.reason)]
                lines += [
                    b"%b: %b" % (k, scrubber.scrub_bytes(v))
                    for k, v in event.headers.raw_items()
                    if k.lower() not in dropped
                ]
                if chunked:
                    lines.append(b"Transfer-Encoding: chunked")
                lines.append(b"Connection: close")
                writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
                started = True
            elif isinstance(event, h11.Data):
                _write_body(writer, scrubber.feed(event.data), chunked)
                await writer.drain()
            else:  # EndOfMessage, ConnectionClosed
                _write_body(writer, scrubber.flush(), chunked)
                if chunked:
                    writer.write(b"0\r\n\r\n")
                await writer.drain()
                return
    except h11.RemoteProtocolError as exc:
        if not started:
            writer.write(d.simple_response(502, "Bad Gateway", f"bad upstream response: {exc}"))
        # Else the child sees the response cut short: nothing unscanned is sent.


def _write_body(writer: asyncio.StreamWriter, data: bytes, chunked: bool) -> None:
    if not data:
        return
    writer.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
