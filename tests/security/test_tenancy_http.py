"""http/request of a tenant, through a real daemon: the executor's network is not
the tenant's (127.0.0.1 is every tenant's dev server), so B cannot reach A's
listening server unless B's profile allows it, and then only allow-listed hosts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web

from tests.support.rpc import connect
from tests.support.tenants import TOKEN_B, TenantHost, tenant_host


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        yield made


@pytest.fixture
async def a_dev_server() -> AsyncIterator[int]:
    """Tenant A's dev server on 127.0.0.1 (what B must not reach)."""

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="alice's dev server")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield port
    finally:
        await runner.cleanup()


def _request(url: str) -> dict[str, object]:
    return {"requestId": "r1", "method": "GET", "url": url, "headers": [], "redirectPolicy": "stop"}


async def test_b_cannot_reach_as_dev_server_on_loopback(
    host: TenantHost, a_dev_server: int
) -> None:
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        reply = await b.call("http/request", _request(f"http://127.0.0.1:{a_dev_server}/"))
    assert reply.error[1] == "tenant bob: http/request is not allowed by its profile"


async def test_an_allow_list_admits_only_its_hosts(host: TenantHost, a_dev_server: int) -> None:
    host.write_tenants(bob={"http_request": ["localhost"]})
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        other = await b.call("http/request", _request(f"http://127.0.0.1:{a_dev_server}/"))
        listed = await b.call("http/request", _request(f"http://localhost:{a_dev_server}/"))
    assert other.error[1] == "tenant bob: http/request to host 127.0.0.1 is outside its allow-list"
    assert listed.ok and listed.result["status"] == 200
