"""Sending one http/request with aiohttp, shaped like the reference's reqwest client.

What a server sees matches the reference: the method verbatim (aiohttp would
upper-case it), lower-case header names with repeated names grouped, an
``accept: */*`` only when the caller gives none, then ``host`` and
``content-length``; no user-agent, accept-encoding or cookies; bodies are not
decompressed. Redirects are followed here (not by aiohttp) to reproduce
reqwest's policy: at most 10, ``referer`` set to the previous URL, 301/302/303
turn a non-GET/HEAD request into a body-less GET, credentials are dropped
when the origin changes.
"""

from __future__ import annotations

import urllib.parse
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from execserver.http_request.validate import PreparedRequest, parse_url, send_failed
from execserver.wire.errors import RpcError

__all__ = ["HttpClient", "response_headers"]

MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SKIP_AUTO = frozenset({"User-Agent", "Accept-Encoding", "Accept", "Content-Type"})
_CROSS_ORIGIN_DROPPED = frozenset(
    {"authorization", "cookie", "proxy-authorization", "www-authenticate"}
)
_TRAILING = ("host", "content-length", "transfer-encoding")


# aiohttp upper-cases the method in two places and adds "content-length: 0"
# to body-less non-GET requests; the request being sent reaches the request
# object through this context variable (set by the sending task) to undo that.
_SENDING: ContextVar[PreparedRequest | None] = ContextVar("http_request_sending", default=None)


class _VerbatimRequest(aiohttp.ClientRequest):
    """Keeps the method's case and puts host/content-length after the caller's headers."""

    def __init__(self, method: str, url: URL, **kwargs: Any) -> None:
        super().__init__(method, url, **kwargs)
        sending = _SENDING.get()
        if sending is not None:
            self.method = sending.method
        # reqwest sends no content-length at all for an absent or empty body.
        drop_length = sending is not None and not sending.body
        reordered: CIMultiDict[str] = CIMultiDict()
        trailing: list[tuple[str, str]] = []
        for name, value in self.headers.items():
            if name.lower() == "content-length" and drop_length:
                continue
            if name.lower() in _TRAILING:
                trailing.append((name.lower(), value))
            else:
                reordered.add(name, value)
        trailing.sort(key=lambda item: _TRAILING.index(item[0]))
        for name, value in trailing:
            reordered.add(name, value)
        self.headers = reordered


class HttpClient:
    """Server-wide aiohttp session (connection pooling, like the reference's client)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                request_class=_VerbatimRequest,
                timeout=aiohttp.ClientTimeout(total=None),
                # reqwest honours HTTP(S)_PROXY/ALL_PROXY/NO_PROXY; so does the reference.
                trust_env=True,
            )
        return self._session

    async def send(self, request: PreparedRequest) -> aiohttp.ClientResponse:
        """Send, following redirects if asked; returns once response headers are in.

        Timeouts are the caller's (an ``asyncio.timeout`` around this call).
        """
        current = request
        referer: str | None = None
        for _ in range(MAX_REDIRECTS + 1):
            response = await self._send_once(current, referer)
            location = response.headers.get("Location")
            if (
                not current.follow_redirects
                or response.status not in _REDIRECTS
                or location is None
            ):
                return response
            response.release()
            referer, current = str(current.url), _redirected(current, response.status, location)
        raise RpcError.internal("http/request failed: too many redirects")

    async def _send_once(
        self, request: PreparedRequest, referer: str | None
    ) -> aiohttp.ClientResponse:
        headers: CIMultiDict[str] = CIMultiDict()
        if referer is not None:
            headers.add("referer", referer)
        for name, value in request.headers:
            headers.add(name, value)
        if "accept" not in headers:
            headers.add("accept", "*/*")
        _SENDING.set(request)
        try:
            return await self._get_session().request(
                request.method,
                URL(str(request.url), encoded=True),
                headers=headers,
                data=request.body or None,
                allow_redirects=False,
                skip_auto_headers=_SKIP_AUTO,
            )
        except (aiohttp.ClientError, OSError, ValueError):
            raise send_failed(request.url) from None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _redirected(request: PreparedRequest, status: int, location: str) -> PreparedRequest:
    try:
        target = parse_url(urllib.parse.urljoin(str(request.url), location))
    except RpcError:
        raise send_failed(request.url) from None
    method, body = request.method, request.body
    if status in (301, 302, 303) and method not in ("GET", "HEAD"):
        method, body = "GET", None
    headers = request.headers
    if target.origin != request.url.origin:
        headers = [(n, v) for n, v in headers if n not in _CROSS_ORIGIN_DROPPED]
    if body is None:
        headers = [(n, v) for n, v in headers if n not in ("content-length", "content-type")]
    return replace(request, method=method, url=target, headers=headers, body=body)


def response_headers(response: aiohttp.ClientResponse) -> list[tuple[str, str]]:
    """Wire order, names lower-cased, repeated headers kept apart."""
    return [
        (name.decode("latin-1").lower(), value.decode("utf-8", errors="replace"))
        for name, value in response.raw_headers
    ]
