"""http/request against a local aiohttp server on 127.0.0.1, for both servers.

Covers buffered and streamed responses, request header order and casing,
redirect follow/stop, timeouts, transport failures, valueEnvVar and the
reference's -32602/-32603 texts.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.support.rpc import RpcClient, b64, connect, unb64
from tests.support.servers import RunningServer, start_server
from tests.support.shared_daemon import SharedDaemon

BODY_DELTA = "http/request/bodyDelta"
SECRET = "s3cr3t-value"

ROUTE_AWARE_TIMEOUT = "http/request failed: route-aware request timed out"


@dataclass
class Upstream:
    base: str
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _app(upstream: Upstream) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        raw = [[k.decode(), v.decode()] for k, v in request.raw_headers if k.lower() != b"host"]
        return web.json_response(
            {
                "method": request.method,
                "path": request.path_qs,
                "headers": raw,
                "body": body.decode(),
                "rawPath": request.raw_path,
            },
            headers={"X-Probe": "1"},
        )

    async def multi(request: web.Request) -> web.Response:
        response = web.Response(text="multi")
        response.headers.add("Set-Cookie", "a=1")
        response.headers.add("Set-Cookie", "b=2")
        return response

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/echo")

    async def redirect_307(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/echo")

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="status body")

    async def empty(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def hold_headers(request: web.Request) -> web.Response:
        await upstream.release.wait()
        return web.Response(text="late")

    async def hold_body(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"first")
        await upstream.release.wait()
        await response.write(b"second")
        return response

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=201, headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for i in range(3):
            await response.write(f"part-{i}\n".encode())
        await response.write_eof()
        return response

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=bytes(range(256)) * 4096)

    async def abort(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "100"})
        await response.prepare(request)
        await response.write(b"partial")
        assert request.transport is not None
        request.transport.close()
        return response

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/multi", multi)
    app.router.add_route("*", "/redirect", redirect)
    app.router.add_route("*", "/r307", redirect_307)
    app.router.add_get("/loop", loop)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/empty", empty)
    app.router.add_get("/hold-headers", hold_headers)
    app.router.add_get("/hold-body", hold_body)
    app.router.add_get("/stream", stream)
    app.router.add_get("/big", big)
    app.router.add_get("/abort", abort)
    return app


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    holder = Upstream(base="")
    runner = web.AppRunner(_app(holder))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    holder.base = f"http://127.0.0.1:{port}"
    yield holder
    holder.release.set()
    await runner.cleanup()


def server_environment() -> dict[str, str]:
    """A secret and a deny-listed credential in the server's environment."""
    # Both servers honour *_PROXY variables; the upstream is reached directly.
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(SPEC_SECRET=SECRET, AWS_SECRET_ACCESS_KEY="do-not-send")
    env.pop("NOT_SET_ANYWHERE", None)
    return env


@pytest.fixture(scope="module")
def http_daemon() -> Iterator[SharedDaemon]:
    """One execserver with that environment for the module's tests: each test's
    session is its own (tests/support/shared_daemon.py), and http/request keeps no
    state past it. A daemon per test was ~20 starts, ~0.3 s of CPU each."""
    daemon = SharedDaemon(env=server_environment())
    try:
        daemon.get()  # now, before the first test's leak check looks
        yield daemon
    finally:
        daemon.close()


@pytest.fixture(params=["execserver", "reference"])
def shared_execserver(
    request: pytest.FixtureRequest, http_daemon: SharedDaemon
) -> Iterator[RunningServer | None]:
    """The module's execserver for the execserver half, None for the reference's.
    Synchronous: the daemon's loop runs outside the test's."""
    if request.param != "execserver":
        yield None
        return
    yield http_daemon.get()
    http_daemon.check_alive()


@pytest.fixture
async def server(shared_execserver: RunningServer | None) -> AsyncIterator[RunningServer]:
    """Either server, with a secret and a deny-listed credential in its environment
    (a fresh reference for each test)."""
    if shared_execserver is not None:
        yield shared_execserver
        return
    async with start_server("reference", env=server_environment()) as running:
        yield running


def visible(result: dict[str, Any]) -> dict[str, Any]:
    """Status, headers without date/server/content-length, decoded body."""
    headers = [
        (h["name"], h["value"])
        for h in result["headers"]
        if h["name"] not in ("date", "server", "content-length")
    ]
    return {"status": result["status"], "headers": headers, "body": unb64(result["bodyBase64"])}


def echoed(result: dict[str, Any]) -> dict[str, Any]:
    """What the upstream saw, without the raw request target (see raw_path)."""
    echo: dict[str, Any] = json.loads(unb64(result["bodyBase64"]))
    del echo["rawPath"]
    return echo


def raw_path(result: dict[str, Any]) -> str:
    target: str = json.loads(unb64(result["bodyBase64"]))["rawPath"]
    return target


async def request(client: RpcClient, **params: Any) -> Any:
    params.setdefault("requestId", "r")
    return await client.call("http/request", params)


async def test_buffered_requests(server: RunningServer, upstream: Upstream) -> None:
    base = upstream.base
    async with connect(server.url) as client:
        plain = (await request(client, method="GET", url=f"{base}/echo")).result
        posted = (
            await request(
                client,
                method="POST",
                url=f"{base}/echo?a=1",
                headers=[
                    {"name": "X-B", "value": "1"},
                    {"name": "x-a", "value": "2"},
                    {"name": "X-B", "value": "3"},
                    {"name": "Accept", "value": "x/y"},
                ],
                bodyBase64=b64("payload"),
                timeoutMs=5000,
            )
        ).result
        custom_method = (await request(client, method="PROPFIND", url=f"{base}/echo")).result
        multi = (await request(client, method="GET", url=f"{base}/multi")).result
        missing = (await request(client, method="GET", url=f"{base}/status/404")).result
        secret = (
            await request(
                client,
                method="GET",
                url=f"{base}/echo",
                headers=[
                    {"name": "Authorization", "value": "Bearer ", "valueEnvVar": "SPEC_SECRET"}
                ],
            )
        ).result
    assert visible(plain)["headers"] == [
        ("x-probe", "1"),
        ("content-type", "application/json; charset=utf-8"),
    ]
    assert echoed(plain) == {
        "method": "GET",
        "path": "/echo",
        "headers": [["accept", "*/*"]],
        "body": "",
    }
    # repeated names sent together, names lower-cased, host and content-length last
    assert echoed(posted) == {
        "method": "POST",
        "path": "/echo?a=1",
        "headers": [
            ["x-b", "1"],
            ["x-b", "3"],
            ["x-a", "2"],
            ["accept", "x/y"],
            ["content-length", "7"],
        ],
        "body": "payload",
    }
    assert echoed(custom_method)["method"] == "PROPFIND"
    assert visible(multi) == {
        "status": 200,
        "headers": [
            ("content-type", "text/plain; charset=utf-8"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ],
        "body": b"multi",
    }
    assert visible(missing)["status"] == 404
    assert visible(missing)["body"] == b"status body"
    assert echoed(secret)["headers"][0] == ["authorization", f"Bearer {SECRET}"]


async def test_redirects(server: RunningServer, upstream: Upstream) -> None:
    base = upstream.base
    async with connect(server.url) as client:
        followed = (await request(client, method="GET", url=f"{base}/redirect")).result
        kept_post = (
            await request(client, method="POST", url=f"{base}/r307", bodyBase64=b64("x"))
        ).result
        stopped = (
            await request(client, method="GET", url=f"{base}/redirect", redirectPolicy="stop")
        ).result
        looping = (await request(client, method="GET", url=f"{base}/loop")).error
        bad_policy = (
            await request(client, method="GET", url=f"{base}/redirect", redirectPolicy="none")
        ).error
    assert echoed(followed) == {
        "method": "GET",
        "path": "/echo",
        "headers": [["referer", f"{base}/redirect"], ["accept", "*/*"]],
        "body": "",
    }
    assert echoed(kept_post) == {
        "method": "POST",
        "path": "/echo",
        "headers": [["referer", f"{base}/r307"], ["accept", "*/*"], ["content-length", "1"]],
        "body": "x",
    }
    assert visible(stopped) == {
        "status": 302,
        "headers": [("content-type", "text/plain; charset=utf-8"), ("location", "/echo")],
        "body": b"302: Found",
    }
    assert looping == (-32603, "http/request failed: too many redirects")
    assert bad_policy == (-32602, "unknown variant `none`, expected `follow` or `stop`")


async def test_failures_and_timeouts(server: RunningServer, upstream: Upstream) -> None:
    base = upstream.base
    async with connect(server.url) as client:
        refused = (await request(client, method="GET", url="http://127.0.0.1:1/x")).error
        normalised = (await request(client, method="GET", url="HTTP://127.0.0.1:1")).error
        slow = (
            await request(client, method="GET", url=f"{base}/hold-headers", timeoutMs=300)
        ).error
        zero = (await request(client, method="GET", url=f"{base}/echo", timeoutMs=0)).error
        slow_body = (
            await request(client, method="GET", url=f"{base}/hold-body", timeoutMs=500)
        ).error
        aborted = (await request(client, method="GET", url=f"{base}/abort")).error
    send_failed = "http/request failed: error sending request for url ({})"
    assert refused == (-32603, send_failed.format("http://127.0.0.1:1/x"))
    assert normalised == (-32603, send_failed.format("http://127.0.0.1:1/"))
    reqwest_timeout = (-32603, send_failed.format(f"{base}/hold-headers"))
    if server.kind == "reference":
        # The reference arms two timers with the same deadline (reqwest's and its
        # route-aware outer one); which fires first depends on scheduling, and on a
        # loaded machine the outer one wins now and then. Ours answers reqwest's.
        assert slow in {reqwest_timeout, (-32603, ROUTE_AWARE_TIMEOUT)}
    else:
        assert slow == reqwest_timeout
    assert zero == (-32603, ROUTE_AWARE_TIMEOUT)
    body_failed = (
        -32603,
        "failed to read http/request response body: error decoding response body",
    )
    assert slow_body == body_failed
    assert aborted == body_failed


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"url": "not a url"}, "http/request url is invalid: relative URL without a base"),
        ({"url": "http://"}, "http/request url is invalid: empty host"),
        ({"url": "http://host:99999/"}, "http/request url is invalid: invalid port number"),
        ({"url": "file:///etc/passwd"}, "http/request only supports http and https URLs, got file"),
        ({"url": "ws://x"}, "http/request only supports http and https URLs, got ws"),
        ({"method": ""}, "http/request method is invalid: invalid HTTP method"),
        ({"method": "G(T"}, "http/request method is invalid: invalid HTTP method"),
        (
            {"headers": [{"name": "", "value": "x"}]},
            "http/request header name is invalid: invalid HTTP header name",
        ),
        (
            {"headers": [{"name": "X", "value": "a\nb"}]},
            "http/request header value is invalid for X: failed to parse header value",
        ),
        (
            {
                "headers": [
                    {"name": "Authorization", "value": "", "valueEnvVar": "NOT_SET_ANYWHERE"}
                ]
            },
            "http/request header Authorization requires executor environment variable "
            "NOT_SET_ANYWHERE",
        ),
        (
            {"headers": [{"name": "A", "value": "", "valueEnvVar": "AWS_SECRET_ACCESS_KEY"}]},
            "http/request header A cannot use executor environment variable AWS_SECRET_ACCESS_KEY",
        ),
        (
            {"headers": [{"name": "A", "value": "", "valueEnvVar": "openai_api_key"}]},
            "http/request header A cannot use executor environment variable openai_api_key",
        ),
        ({"bodyBase64": "!"}, "Invalid symbol 33, offset 0."),
    ],
)
async def test_invalid_params(
    server: RunningServer, upstream: Upstream, params: dict[str, Any], message: str
) -> None:
    full = {"method": "GET", "url": f"{upstream.base}/echo", **params}
    async with connect(server.url) as client:
        assert (await request(client, **full)).error == (-32602, message)


async def collect_stream(client: RpcClient, request_id: str) -> tuple[bytes, list[dict[str, Any]]]:
    """Body and frames of one stream, up to and including its terminal frame."""
    frames = []
    while True:
        frame = await client.next_notification(BODY_DELTA)
        assert frame["requestId"] == request_id
        frames.append(frame)
        if frame["done"]:
            break
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert all(not f["done"] and f["error"] is None for f in frames[:-1])
    assert frames[-1]["deltaBase64"] == ""
    body = b"".join(unb64(f["deltaBase64"]) for f in frames)
    return body, frames


async def test_streamed_responses(server: RunningServer, upstream: Upstream) -> None:
    base = upstream.base
    async with connect(server.url) as client:
        head = (
            await request(
                client, method="GET", url=f"{base}/stream", streamResponse=True, requestId="s1"
            )
        ).result
        assert visible(head) == {
            "status": 201,
            "headers": [("content-type", "text/plain"), ("transfer-encoding", "chunked")],
            "body": b"",
        }
        body, frames = await collect_stream(client, "s1")
        assert body == b"part-0\npart-1\npart-2\n"
        assert frames[-1]["error"] is None

        await request(client, method="GET", url=f"{base}/big", streamResponse=True, requestId="s1")
        body, _ = await collect_stream(client, "s1")
        assert body == bytes(range(256)) * 4096

        await request(
            client, method="GET", url=f"{base}/empty", streamResponse=True, requestId="s2"
        )
        body, frames = await collect_stream(client, "s2")
        assert (body, len(frames)) == (b"", 1)

        failed = await request(
            client,
            method="GET",
            url=f"{base}/hold-headers",
            streamResponse=True,
            requestId="s3",
            timeoutMs=300,
        )
        assert failed.error[0] == -32603

        await request(
            client, method="GET", url=f"{base}/abort", streamResponse=True, requestId="s4"
        )
        body, frames = await collect_stream(client, "s4")
        assert body == b"partial"
        assert frames[-1]["error"] == "error decoding response body"
        assert not client.unread_notifications()


async def test_stream_request_id_is_reserved_while_active(
    server: RunningServer, upstream: Upstream
) -> None:
    base = upstream.base
    async with connect(server.url) as client:
        await request(
            client, method="GET", url=f"{base}/hold-body", streamResponse=True, requestId="s"
        )
        first = await client.next_notification(BODY_DELTA)
        assert (first["seq"], unb64(first["deltaBase64"])) == (1, b"first")
        duplicate = await request(
            client, method="GET", url=f"{base}/echo", streamResponse=True, requestId="s"
        )
        assert duplicate.error == (
            -32602,
            "http/request streamResponse requestId `s` is already active",
        )
        # buffered requests do not check the id
        assert (await request(client, method="GET", url=f"{base}/echo", requestId="s")).ok
        upstream.release.set()
        rest: list[dict[str, Any]] = []
        while not rest or not rest[-1]["done"]:
            rest.append(await client.next_notification(BODY_DELTA))
        assert b"".join(unb64(f["deltaBase64"]) for f in rest) == b"second"
        assert rest[0]["seq"] == 2
        again = await request(
            client, method="GET", url=f"{base}/echo", streamResponse=True, requestId="s"
        )
        assert again.ok
        await collect_stream(client, "s")


async def test_request_shapes(server: RunningServer, upstream: Upstream) -> None:
    base = upstream.base
    typed = [{"name": "Content-Type", "value": "text/x"}]
    async with connect(server.url) as client:
        no_body = (await request(client, method="POST", url=f"{base}/echo")).result
        empty_body = (
            await request(client, method="POST", url=f"{base}/echo", bodyBase64="")
        ).result
        get_body = (
            await request(client, method="GET", url=f"{base}/echo", bodyBase64="eA==")
        ).result
        put = (
            await request(
                client, method="PUT", url=f"{base}/echo", bodyBase64="eA==", headers=typed
            )
        ).result
        post_redirected = (
            await request(
                client, method="POST", url=f"{base}/redirect", bodyBase64="eA==", headers=typed
            )
        ).result
        encoded = (await request(client, method="GET", url=f"{base}/echo?q=a b&x=%20")).result
        escaped_path = (await request(client, method="GET", url=f"{base}/x/../ech%6F")).result
    accept = ["accept", "*/*"]
    assert echoed(no_body)["headers"] == [accept]  # no content-length for a body-less POST
    assert echoed(empty_body)["headers"] == [accept]
    assert echoed(get_body)["headers"] == [accept, ["content-length", "1"]]
    assert echoed(put)["headers"] == [["content-type", "text/x"], accept, ["content-length", "1"]]
    # 302 turns a POST into a body-less GET (content-type dropped with the body)
    assert echoed(post_redirected) == {
        "method": "GET",
        "path": "/echo",
        "headers": [["referer", f"{base}/redirect"], accept],
        "body": "",
    }
    assert raw_path(encoded) == "/echo?q=a%20b&x=%20"
    assert raw_path(escaped_path) == "/ech%6F"  # dot segments resolved, escapes kept


async def test_proxy_from_the_environment(upstream: Upstream, kind_param: str) -> None:
    """Like reqwest, the executor sends requests through HTTP_PROXY from its environment."""
    seen: list[str] = []

    async def proxy_handler(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.Response(text="via proxy")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    proxy = f"http://127.0.0.1:{runner.addresses[0][1]}"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["HTTP_PROXY"] = proxy
    try:
        async with start_server(kind_param, env=env) as running, connect(running.url) as client:
            result = (await request(client, method="GET", url=f"{upstream.base}/echo")).result
    finally:
        await runner.cleanup()
    assert unb64(result["bodyBase64"]) == b"via proxy"
    assert seen == [f"{upstream.base}/echo"]


@pytest.fixture(params=["execserver", "reference"])
def kind_param(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_response_bytes_are_counted(upstream: Upstream) -> None:
    import aiohttp

    async with (
        start_server("execserver", ["--metrics"]) as running,
        connect(running.url) as client,
    ):
        await request(client, method="GET", url=f"{upstream.base}/big")  # 1 MiB buffered
        await request(client, method="GET", url=f"{upstream.base}/big", streamResponse=True)
        await collect_stream(client, "r")
        async with (
            aiohttp.ClientSession() as session,
            session.get(running.http_url + "/metrics") as response,
        ):
            text = await response.text()
    line = next(
        x
        for x in text.splitlines()
        if x.startswith('execserver_bytes_streamed_total{stream="http"}')
    )
    assert float(line.split()[-1]) == 2 * 256 * 4096
