"""credentialMasking keeps the real secret inside its scope.

The proxy holds a provider's secret and swaps it in for the child's
placeholder on allowed plain-HTTP requests to the provider's URL prefix. A
hostile child tries to get the real value back or sent somewhere else:

* by putting the placeholder in a header the destination echoes back
  (``X-Other: <placeholder>``), or by asking an echoing endpoint of the bound
  destination to reflect ``Authorization`` in its response (headers, a
  streamed body cut mid-secret, a gzip body, a Basic pair it can decode);
* by a path that starts with the prefix as text but is not under it
  (``/api/../public``, ``/api/%2e%2e/public``, ``/apiX``, ``/api/..;/public``,
  ``%2f`` tricks);
* by naming another site in ``Host:`` so a shared front end (virtual hosting)
  delivers the secret there.

The proxy and the destination are real (127.0.0.1); the destination records
the path and headers of every request it got. DNS is the only stand-in (the
resolver's static hook).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h11
import msgspec
import pytest
from aiohttp import web

from execserver.netproxy.credentials import CredentialScopeError, Scrubber, normalise_path
from execserver.netproxy.proxy import ProcessNetworkProxy
from execserver.netproxy.resolver import Resolver
from execserver.wire.network import NetworkPolicyDecisionNotification
from execserver.wire.process import CredentialProviderConfig, RemoteNetworkProxyLaunchConfig
from tests.unit.test_netproxy_policy import config

SECRET = "vendor_S3cretScopeValue0042"
BASIC_PAIR = base64.b64encode(f"me:{SECRET}".encode()).decode()


@dataclass
class Echo:
    port: int = 0
    # (raw path, headers) of every request.
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def got_secret(self) -> list[str]:
        return [
            path
            for path, headers in self.requests
            if any(SECRET in v or BASIC_PAIR in v for v in headers.values())
        ]


@asynccontextmanager
async def echo_upstream() -> AsyncIterator[Echo]:
    """An allowed destination that reflects what it was sent."""
    echo = Echo()

    async def handle(request: web.Request) -> web.StreamResponse:
        headers = dict(request.headers)
        echo.requests.append((request.raw_path, headers))
        reflected = {
            "X-Echo-Authorization": headers.get("Authorization", ""),
            "X-Echo-Other": headers.get("X-Other", ""),
        }
        body = json.dumps(headers).encode()
        ranged = request.headers.get("Range", "").removeprefix("bytes=")
        if ranged:  # one range, "a-b": a server that honours Range on anything
            first, _, last = ranged.partition("-")
            piece = body[int(first) : int(last) + 1]
            return web.Response(body=piece, status=206, headers=reflected)
        if request.path.endswith("/gzip"):  # compressed whatever was accepted
            return web.Response(
                body=gzip.compress(body), headers={**reflected, "Content-Encoding": "gzip"}
            )
        if request.path.endswith("/stream"):  # chunked, the secret cut across chunks
            response = web.StreamResponse(headers=reflected)
            response.enable_chunked_encoding()
            await response.prepare(request)
            for i in range(0, len(body), 7):
                await response.write(body[i : i + 7])
            await response.write_eof()
            return response
        return web.Response(body=body, headers=reflected)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    echo.port = int(runner.addresses[0][1])
    try:
        yield echo
    finally:
        await runner.cleanup()


@asynccontextmanager
async def masking_proxy(
    port: int, provider: Mapping[str, object]
) -> AsyncIterator[tuple[ProcessNetworkProxy, str]]:
    """The real proxy with one provider; yields it and the child's placeholder."""

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        pass

    launch = RemoteNetworkProxyLaunchConfig(
        proxy=config(
            domains={"upstream.test": "allow", "other-site.test": "allow"},
            credential_masking=True,
            credential_providers={
                # Decoded as the wire decodes a request's provider object.
                "vendor": msgspec.convert(
                    {
                        "env": ["VENDOR_TOKEN"],
                        "url_prefixes": [f"http://upstream.test:{port}/api"],
                        **provider,
                    },
                    CredentialProviderConfig,
                )
            },
        )
    )
    proxy = ProcessNetworkProxy(
        launch,
        process_id="cred",
        notify=notify,
        ask=None,
        resolver=Resolver({"upstream.test": "127.0.0.1", "other-site.test": "127.0.0.1"}),
        upstream_environ={},
    )
    assert proxy.credentials is not None
    placeholder = proxy.credentials.mask_environment({"VENDOR_TOKEN": SECRET})["VENDOR_TOKEN"]
    await proxy.start()
    try:
        yield proxy, placeholder
    finally:
        await proxy.aclose()


@dataclass
class Answer:
    raw: bytes
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


async def _fetch(proxy_port: int, target: str, headers: dict[str, str]) -> Answer:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    lines = [f"GET {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    writer.write(("\r\n".join([*lines, "Connection: close"]) + "\r\n\r\n").encode())
    await writer.drain()
    async with asyncio.timeout(10):
        raw = await reader.read()
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    answer = Answer(raw)
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    conn.receive_data(b"")
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Response):
            answer.status = event.status_code
            answer.headers = {k.decode().lower(): v.decode() for k, v in event.headers}
        elif isinstance(event, h11.Data):
            answer.body += event.data
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed) or event is h11.NEED_DATA:
            break
    if answer.headers.get("content-encoding") == "gzip" and answer.body:
        answer.body = gzip.decompress(answer.body)
    return answer


def _leaks(answer: Answer) -> bool:
    """The real secret (or the Basic pair built from it) in what the child got."""
    text = answer.raw + answer.body
    return SECRET.encode() in text or BASIC_PAIR.encode() in text


BEARER = {"auth": ["bearer"]}


async def test_a_placeholder_outside_the_credential_header_is_never_swapped() -> None:
    async with echo_upstream() as up, masking_proxy(up.port, BEARER) as (proxy, ph):
        url = f"http://upstream.test:{up.port}/api/echo"
        host = f"upstream.test:{up.port}"
        answer = await _fetch(
            proxy.http_port, url, {"Host": host, "Authorization": f"Bearer {ph}", "X-Other": ph}
        )
    assert answer.status == 200, answer.raw[:300]
    _path, headers = up.requests[0]
    assert headers["Authorization"] == f"Bearer {SECRET}"  # injected where it belongs
    assert SECRET not in headers.get("X-Other", ""), headers  # never into another header
    assert not _leaks(answer), answer.raw


async def test_an_echoing_destination_does_not_hand_the_secret_back() -> None:
    async with echo_upstream() as up, masking_proxy(up.port, BEARER) as (proxy, ph):
        host = f"upstream.test:{up.port}"
        answers = {
            name: await _fetch(
                proxy.http_port,
                f"http://{host}/api/{name}",
                {"Host": host, "Authorization": auth.replace("PH", ph)},
            )
            for name, auth in [
                ("echo", "Bearer PH"),
                ("stream", "Bearer PH"),
                ("gzip", "Bearer PH"),
            ]
        }
        answers["basic"] = await _fetch(
            proxy.http_port,
            f"http://{host}/api/basic",
            {
                "Host": host,
                "Authorization": "Basic " + base64.b64encode(f"me:{ph}".encode()).decode(),
            },
        )
        # Pieces of the reflected body, each shorter than the secret.
        pieces = [
            await _fetch(
                proxy.http_port,
                f"http://{host}/api/echo",
                {"Host": host, "Authorization": f"Bearer {ph}", "Range": f"bytes={i}-{i + 4}"},
            )
            for i in range(0, 160, 5)
        ]
    assert len(up.got_secret()) == len(up.requests) == 4 + len(pieces), up.requests
    assembled = b"".join(p.body for p in pieces if p.status == 206)
    assert SECRET.encode() not in assembled, assembled
    for name, answer in answers.items():
        assert not _leaks(answer), (name, answer.raw[:400], answer.body[:400])
        # What the child gets back is usable: it reads its placeholder where the secret was.
        if answer.status == 200 and name in ("echo", "stream"):
            assert ph in answer.body.decode(), (name, answer.body)


async def test_the_url_prefix_scope_is_matched_on_normalised_path_segments() -> None:
    async with echo_upstream() as up, masking_proxy(up.port, BEARER) as (proxy, ph):
        host = f"upstream.test:{up.port}"
        outside = [
            "/api/../public/x",
            "/api/%2e%2e/public/x",
            "/api/%2E%2e/public/x",
            "/api/./../public/x",
            "/apiX",
            "/api-other/x",
            "/api/x%2f..%2f..%2fpublic",
            "/api/..;/public",
            "/api/..%5cpublic",
        ]
        answers = [
            await _fetch(
                proxy.http_port,
                f"http://{host}{path}",
                {"Host": host, "Authorization": f"Bearer {ph}"},
            )
            for path in outside
        ]
        inside = await _fetch(
            proxy.http_port,
            f"http://{host}/public/../api/v1",
            {"Host": host, "Authorization": f"Bearer {ph}"},
        )
    assert up.got_secret() == ["/api/v1"]  # only the one really under /api
    # Each outside path is refused (400) or forwarded without the secret.
    for path, answer in zip(outside, answers, strict=True):
        assert answer.status in (200, 400), (path, answer.raw[:200])
        assert not _leaks(answer)
    assert inside.status == 200
    # What reached the destination is the path that was matched, never a raw one
    # with dot segments it could resolve differently.
    assert all(".." not in path and "%2e" not in path.lower() for path, _ in up.requests)


async def test_the_secret_goes_only_to_the_host_the_url_names() -> None:
    """Virtual hosting: the URL is the bound host but ``Host:`` names another
    site behind the same front end. The secret must go with the URL's host."""
    async with echo_upstream() as up, masking_proxy(up.port, BEARER) as (proxy, ph):
        await _fetch(
            proxy.http_port,
            f"http://upstream.test:{up.port}/api/v1",
            {"Host": f"other-site.test:{up.port}", "Authorization": f"Bearer {ph}"},
        )
    for _path, headers in up.requests:
        if SECRET in headers.get("Authorization", ""):
            assert headers["Host"] == f"upstream.test:{up.port}", headers


async def test_a_named_header_provider_injects_only_into_that_header() -> None:
    provider = {"auth": ["header"], "header": "X-Api-Key", "prefix": "Key "}
    async with echo_upstream() as up, masking_proxy(up.port, provider) as (proxy, ph):
        host = f"upstream.test:{up.port}"
        with_placeholder = await _fetch(
            proxy.http_port,
            f"http://{host}/api/echo",
            {"Host": host, "X-Api-Key": f"Key {ph}", "Authorization": f"Bearer {ph}"},
        )
        added = await _fetch(proxy.http_port, f"http://{host}/api/echo", {"Host": host})
    first, second = (headers for _, headers in up.requests)
    assert first["X-Api-Key"] == f"Key {SECRET}"
    assert SECRET not in first.get("Authorization", "")
    assert second["X-Api-Key"] == f"Key {SECRET}"  # no placeholder sent: auth adds it
    assert not _leaks(with_placeholder) and not _leaks(added)


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/api/../public/x", "/public/x"),
        ("/api/%2e%2E/public", "/public"),
        ("/api/./v1/", "/api/v1/"),
        ("/a/b/..", "/a/"),
        ("/../../x", "/x"),
        ("/%61pi/v1", "/api/v1"),  # an unreserved escape is the character
        ("/projects/group%2fname", "/projects/group%2Fname"),  # a slash stays escaped
    ],
)
def test_paths_are_normalised_before_the_scope_check(path: str, normal: str) -> None:
    assert normalise_path(path) == normal


@pytest.mark.parametrize(
    "path",
    [
        "/api/x%2f..%2fpublic",
        "/api/..;/public",
        "/api/..%5cpublic",
        "/api/..\\public",
        "/api/%252e%252e/public",
    ],
)
def test_paths_servers_read_differently_are_refused(path: str) -> None:
    with pytest.raises(CredentialScopeError):
        normalise_path(path)


def test_the_scrubber_finds_a_secret_cut_anywhere_across_reads() -> None:
    body = b'{"a": "Bearer ' + SECRET.encode() + b'", "b": "' + SECRET.encode() + b'"}'
    for cut in range(1, len(body)):
        for second in range(cut, len(body)):
            scrubber = Scrubber([(SECRET, "PLACEHOLDER")])
            out = (
                scrubber.feed(body[:cut])
                + scrubber.feed(body[cut:second])
                + scrubber.feed(body[second:])
                + scrubber.flush()
            )
            assert out == body.replace(SECRET.encode(), b"PLACEHOLDER"), (cut, second)
