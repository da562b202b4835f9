"""``http/request``: executor-side HTTP with buffered or streamed responses."""

from __future__ import annotations

import asyncio
import sys

import msgspec

from execserver.http_request.validate import (
    PreparedRequest,
    check_method,
    grouped,
    parse_url,
    resolve_headers,
    send_failed,
)
from execserver.kernel.context import RequestContext
from execserver.kernel.methods import MethodTable
from execserver.tenancy.directory import TenantDirectory
from execserver.tenancy.http import check_http_request
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.seat import tenant_of
from execserver.tenancy.shares import hold_share
from execserver.wire import methods as m
from execserver.wire.errors import RpcError
from execserver.wire.http import (
    HttpRequestBodyDeltaNotification,
    HttpRequestParams,
    HttpRequestResponse,
    ResponseHeader,
)
from execserver.wire.rust.base64 import Base64Error, decode_base64

__all__ = ["register"]

FAMILY = "http"


class HttpCall(msgspec.Struct, frozen=True, gc=False):
    """http/request params with the body already decoded."""

    params: HttpRequestParams
    body: bytes | None


def decode_body(params: HttpRequestParams) -> HttpCall:
    """The reference decodes bodyBase64 while parsing params: bare decoder text, -32602."""
    if not params.body_base64:
        return HttpCall(params, None)
    try:
        return HttpCall(params, decode_base64(params.body_base64))
    except Base64Error as exc:
        raise RpcError.invalid_params(str(exc)) from None


# The aiohttp side (sending.py): loaded by the first http/request, in a worker
# thread so that the loop goes on serving meanwhile (~130 ms and ~13 MB of
# resident memory that a daemon never asked for an http/request does without).
_SENDING = "execserver.http_request.sending"


def _import_sending() -> None:
    from execserver.http_request import sending  # noqa: F401


async def _load_sending() -> None:
    if _SENDING not in sys.modules:
        await asyncio.to_thread(_import_sending)


def _prepare(call: HttpCall) -> PreparedRequest:
    # URL, method and header checks come after the lifecycle check (in the handler).
    params = call.params
    url = parse_url(params.url)
    check_method(params.method)
    headers = grouped(resolve_headers(params.headers))
    follow = params.redirect_policy == "follow"
    return PreparedRequest(params.method, url, headers, call.body, follow)


async def http_request(ctx: RequestContext, call: HttpCall) -> HttpRequestResponse:
    # --max-concurrent-http-requests, held until the answer (for a
    # streamed response: until its headers; the body then streams outside the cap).
    tenant = tenant_of(ctx)
    if tenant is None:
        with ctx.server.limits.http.hold():
            return await _http_request(ctx, call, None)
    # --tenants: the tenant's own share first (tenancy.shares), so that no tenant
    # holds the daemon's room; the daemon-wide limit stays as the backstop.
    directory = ctx.server.resources.get(TenantDirectory)
    assert directory is not None  # tenant_of found the tenant in it
    share = directory.shares(tenant).http_requests
    with (
        hold_share(directory.http_in_flight, tenant, share, "max_http_requests"),
        ctx.server.limits.http.hold(),
    ):
        return await _http_request(ctx, call, tenant)


async def _http_request(
    ctx: RequestContext, call: HttpCall, tenant: TenantProfile | None
) -> HttpRequestResponse:
    request = _prepare(call)
    params = call.params
    if tenant is not None:
        check_http_request(tenant, request.url.host, follow=request.follow_redirects)
    if params.timeout_ms == 0:
        # The reference's outer (route-aware) timer wins over reqwest's at zero.
        raise RpcError.internal("http/request failed: route-aware request timed out")
    loop = asyncio.get_running_loop()
    deadline = None if params.timeout_ms is None else loop.time() + params.timeout_ms / 1000
    await _load_sending()
    from execserver.http_request.sending import HttpClient, HttpStreams, read_body, response_headers

    client = ctx.server.state.get(HttpClient, HttpClient)
    streams = ctx.peer.state.get(HttpStreams, HttpStreams)
    if params.stream_response:
        streams.claim(params.request_id)
    try:
        try:
            async with asyncio.timeout_at(deadline):
                response = await client.send(request)
        except TimeoutError:
            raise send_failed(request.url) from None
    except BaseException:
        if params.stream_response:
            streams.release(params.request_id)
        raise
    headers = [ResponseHeader(name, value) for name, value in response_headers(response)]
    if params.stream_response:
        connection = ctx.peer
        count_http_bytes = ctx.server.telemetry.stream_counter("http")

        async def send(delta: HttpRequestBodyDeltaNotification) -> None:
            count_http_bytes(len(delta.delta_base64))
            await connection.send_notification(m.HTTP_REQUEST_BODY_DELTA, delta)

        streams.start(params.request_id, response, deadline, send)
        return HttpRequestResponse(response.status, headers, b"")
    body = await read_body(response, deadline)
    ctx.server.telemetry.stream_counter("http")(len(body))
    return HttpRequestResponse(response.status, headers, body)


def register(table: MethodTable) -> None:
    table.add(m.HTTP_REQUEST, http_request, family=FAMILY, prepare=decode_body)
    table.capabilities.add("http_header_env_vars")
