"""The daemon-wide limits are shared out among the tenants, through a real daemon
(root): B cannot fill ``--max-connections`` or ``--max-concurrent-http-requests``
so that A's next upgrade, process/start or http/request is refused. Each tenant
has its share (an even split by default, or its profile's ``max_connections`` /
``max_http_requests``); B's refusal names B's own ceiling, never the daemon's
count, and is on the audit log as every ceiling a tenant runs into."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.http import raw_request
from tests.support.rpc import connect, poll_until
from tests.support.tenants import (
    TOKEN_A,
    TOKEN_B,
    TenantHost,
    audit_records,
    output_of,
    sighup,
    start,
    tenant_host,
)

INVALID_REQUEST = -32600


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(alice={"sandbox": "optional"})
        yield made


async def _refused_upgrade(url: str, token: str) -> tuple[int, str, str | None]:
    """(status, body, Retry-After) of an upgrade the daemon refuses."""
    status, body = await raw_request(url, headers={"Authorization": f"Bearer {token}"})
    retry_after: str | None = None
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with connect(url, token=token, handshake=False):
            pass
    assert refused.value.status == status
    if refused.value.headers is not None:
        retry_after = refused.value.headers.get("Retry-After")
    return status, body, retry_after


async def test_b_at_its_connection_share_is_refused_while_a_connects_and_starts(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    # Two tenants, 4 connections: 2 each by default.
    async with host.serve("--max-connections", "4", "--audit-log", str(audit)) as server:
        async with AsyncExitStack() as stack:
            for _ in range(2):
                await stack.enter_async_context(connect(server.url, token=TOKEN_B))
            # B tries to take the rest of the daemon's room: its own share says no.
            for _ in range(2):
                status, body, retry_after = await _refused_upgrade(server.url, TOKEN_B)
                assert (status, body, retry_after) == (
                    503,
                    "tenant bob: max_connections 2 reached",
                    "1",
                )
            # The refusal says nothing of the daemon's limit or its load.
            assert "4" not in body and "--max-connections" not in body
            # A is untouched: it gets its own two connections and starts a process.
            async with (
                connect(server.url, token=TOKEN_A) as a,
                connect(server.url, token=TOKEN_A) as a2,
            ):
                ok, _ = await start(a, "a0", ["echo", "alice runs"], host.a)
                assert ok
                assert await output_of(a, "a0") == ("alice runs\n", 0)
                assert (await a2.ok("environment/status")) == {"status": "ready"}
        refusals = await audit_records(audit, "tenant.refuse", 2)
    assert {(r["principal"], r["method"], r["reason"]) for r in refusals} == {
        ("bob", "upgrade", "max_connections 2 reached")
    }
    assert all(r["session"] is None for r in refusals)


async def test_a_profiles_connection_share_and_a_reload_changes_it(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    host.write_tenants(alice={"sandbox": "optional"}, bob={"max_connections": 1})
    async with host.serve("--audit-log", str(audit)) as server:
        async with connect(server.url, token=TOKEN_B):
            status, body, _ = await _refused_upgrade(server.url, TOKEN_B)
            assert (status, body) == (503, "tenant bob: max_connections 1 reached")
            # A has the even split of the default --max-connections (1024 / 2).
            async with connect(server.url, token=TOKEN_A) as a:
                assert (await a.ok("environment/status")) == {"status": "ready"}
            # SIGHUP: the new share applies to the next upgrade.
            host.write_tenants(alice={"sandbox": "optional"}, bob={"max_connections": 2})
            sighup(server)
            await audit_records(audit, "tenants.reload")
            async with connect(server.url, token=TOKEN_B) as second:
                assert (await second.ok("environment/status")) == {"status": "ready"}
                status, body, _ = await _refused_upgrade(server.url, TOKEN_B)
                assert (status, body) == (503, "tenant bob: max_connections 2 reached")


@dataclass
class SlowServer:
    """A 127.0.0.1 server: ``/slow`` answers once ``release`` is set, ``/fast`` at once."""

    port: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: int = 0


@pytest.fixture
async def slow_server() -> AsyncIterator[SlowServer]:
    server = SlowServer()

    async def slow(request: web.Request) -> web.Response:
        server.waiting += 1
        await server.release.wait()
        return web.Response(text="slow")

    async def fast(request: web.Request) -> web.Response:
        return web.Response(text="fast")

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_get("/fast", fast)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = int(runner.addresses[0][1])
    try:
        yield server
    finally:
        server.release.set()
        await runner.cleanup()


def _get(request_id: str, url: str) -> dict[str, object]:
    return {
        "requestId": request_id,
        "method": "GET",
        "url": url,
        "headers": [],
        "redirectPolicy": "stop",
    }


async def _wait_for(predicate: Callable[[], bool], timeout: float = 20) -> None:
    assert await poll_until(predicate, timeout)


async def test_b_at_its_http_share_is_refused_while_as_http_request_succeeds(
    host: TenantHost, slow_server: SlowServer, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    host.write_tenants(
        alice={"sandbox": "optional", "http_request": ["127.0.0.1"]},
        bob={"http_request": ["127.0.0.1"]},
    )
    slow = f"http://127.0.0.1:{slow_server.port}/slow"
    fast = f"http://127.0.0.1:{slow_server.port}/fast"
    flags = ["--max-concurrent-http-requests", "4", "--concurrent-requests", "8"]
    async with (
        host.serve(*flags, "--audit-log", str(audit)) as server,
        connect(server.url, token=TOKEN_B) as b,
        connect(server.url, token=TOKEN_A) as a,
    ):
        # B holds two slow requests (its even share of 4), then tries for the rest.
        held = [await b.send_request("http/request", _get(f"held{n}", slow)) for n in range(2)]
        await _wait_for(lambda: slow_server.waiting == 2)
        over = [await b.send_request("http/request", _get(f"over{n}", slow)) for n in range(2)]
        # A's http/request still goes through while B's two are held.
        reply = await a.call("http/request", _get("a", fast), timeout=20)
        assert reply.ok, reply.error
        assert reply.result["status"] == 200
        for pending in over:
            refused = await asyncio.wait_for(pending, 20)
            assert refused.error == (INVALID_REQUEST, "tenant bob: max_http_requests 2 reached")
        assert slow_server.waiting == 2  # the refused ones never left the daemon
        slow_server.release.set()
        for pending in held:
            answered = await asyncio.wait_for(pending, 20)
            assert answered.ok and answered.result["status"] == 200
        # Its room comes back once they are answered.
        again = await b.call("http/request", _get("again", fast), timeout=20)
        assert again.ok
        refusals = await audit_records(audit, "tenant.refuse", 2)
    assert {(r["principal"], r["method"], r["reason"]) for r in refusals} == {
        ("bob", "http/request", "max_http_requests 2 reached")
    }


async def test_a_profiles_http_share_overrides_the_split(
    host: TenantHost, slow_server: SlowServer
) -> None:
    host.write_tenants(
        alice={"sandbox": "optional"},
        bob={"http_request": ["127.0.0.1"], "max_http_requests": 1},
    )
    slow = f"http://127.0.0.1:{slow_server.port}/slow"
    async with (
        host.serve("--concurrent-requests", "4") as server,
        connect(server.url, token=TOKEN_B) as b,
    ):
        held = await b.send_request("http/request", _get("held", slow))
        await _wait_for(lambda: slow_server.waiting == 1)
        refused = await b.call("http/request", _get("over", slow), timeout=20)
        assert refused.error == (INVALID_REQUEST, "tenant bob: max_http_requests 1 reached")
        slow_server.release.set()
        assert (await asyncio.wait_for(held, 20)).ok


def test_doctor_prints_each_tenants_shares(host: TenantHost) -> None:
    host.write_tenants(alice={"sandbox": "optional"}, bob={"max_http_requests": 3})
    doctor = [sys.executable, "-m", "execserver", "doctor", "--tenants", str(host.tenants_file)]
    shown = subprocess.run(
        [*doctor, "--max-connections", "10"], capture_output=True, text=True, check=True
    ).stdout
    lines = [line.strip() for line in shown.splitlines() if "max connections" in line]
    assert lines == [
        "max connections 5 (an even share of --max-connections=10), max http/requests 32 "
        "(an even share of --max-concurrent-http-requests=64)",
        "max connections 5 (an even share of --max-connections=10), max http/requests 3",
    ]
