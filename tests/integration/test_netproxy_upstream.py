"""allowUpstreamProxy: allowed connections leave through the executor's proxy.

The daemon runs with ``HTTP_PROXY``/``HTTPS_PROXY`` naming a recording
CONNECT/HTTP proxy on 127.0.0.1 (tests/support/upstream_proxy.py), and made-up
domains mapped to 127.0.0.1 by the resolver hook. execserver only: the
reference 0.169.0 connected straight to loopback destinations in our probes
even with ``allowUpstreamProxy`` (and blocks unresolvable names as local), so
its chaining cannot be observed without traffic leaving the machine.
"""

from __future__ import annotations

import os
from typing import Any

from tests.support.netproxy import (
    SERVE_WITH_HOSTS,
    Run,
    proxy_params,
    run_child,
    upstream_server,
)
from tests.support.servers import start_server
from tests.support.upstream_proxy import UpstreamProxy, upstream_proxy


async def _run(
    corp: UpstreamProxy, daemon_env: dict[str, str], ops: list[list[Any]], **proxy: Any
) -> Run:
    env = {**os.environ, **daemon_env}
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "https_proxy"):
        if name not in daemon_env:
            env.pop(name, None)
    async with start_server("execserver", env=env, serve=SERVE_WITH_HOSTS) as server:
        return await run_child(
            server.url,
            ops,
            network_proxy=proxy_params(
                domains={"upstream.test": "allow", "other.test": "allow", "blocked.test": "deny"},
                **proxy,
            ),
        )


async def test_allowed_connections_are_chained_through_the_upstream_proxy() -> None:
    async with upstream_server() as up, upstream_proxy() as corp:
        url = corp.url.replace("http://", "http://alice:s3cret@")
        run = await _run(
            corp,
            {"HTTP_PROXY": url, "HTTPS_PROXY": url},
            [
                ["fetch", "GET", f"http://upstream.test:{up.port}/plain"],
                ["tunnel", f"upstream.test:{up.port}", "/tunnel"],
                ["socks", "upstream.test", up.port, "/socks"],
                ["fetch", "GET", f"http://blocked.test:{up.port}/never"],
            ],
            allowUpstreamProxy=True,
            enableSocks5=True,
        )
    statuses = [r.get("status") for r in run.results]
    assert statuses == [200, 200, 200, 403], run.results
    assert corp.seen == [
        f"GET http://upstream.test:{up.port}/plain HTTP/1.1",
        f"CONNECT upstream.test:{up.port} HTTP/1.1",
        f"CONNECT upstream.test:{up.port} HTTP/1.1",
    ]
    # The upstream proxy's credentials come from the executor's environment.
    assert all("Proxy-Authorization: Basic YWxpY2U6czNjcmV0" in h for h in corp.heads)
    assert up.seen == [
        f"GET /plain host=upstream.test:{up.port}",
        f"GET /tunnel host=upstream.test:{up.port}",
        "GET /socks host=upstream.test",
    ]
    # Decisions are still the per-process proxy's own.
    assert [(d["protocol"], d["decision"]) for d in run.decisions] == [
        ("http", "allow"),
        ("https_connect", "allow"),
        ("socks5_tcp", "allow"),
        ("http", "deny"),
    ]


async def test_no_proxy_destinations_bypass_the_upstream_proxy() -> None:
    async with upstream_server() as up, upstream_proxy() as corp:
        run = await _run(
            corp,
            {"HTTP_PROXY": corp.url, "HTTPS_PROXY": corp.url, "NO_PROXY": "localhost,.other.test"},
            [
                ["fetch", "GET", f"http://other.test:{up.port}/direct"],
                ["tunnel", f"other.test:{up.port}", "/direct-tunnel"],
                ["fetch", "GET", f"http://upstream.test:{up.port}/chained"],
            ],
            allowUpstreamProxy=True,
        )
    assert [r.get("status") for r in run.results] == [200, 200, 200], run.results
    assert corp.seen == [f"GET http://upstream.test:{up.port}/chained HTTP/1.1"]
    assert len(up.seen) == 3


async def test_without_allow_upstream_proxy_the_environment_proxy_is_not_used() -> None:
    async with upstream_server() as up, upstream_proxy() as corp:
        run = await _run(
            corp,
            {"HTTP_PROXY": corp.url, "HTTPS_PROXY": corp.url},
            [
                ["fetch", "GET", f"http://upstream.test:{up.port}/plain"],
                ["tunnel", f"upstream.test:{up.port}", "/tunnel"],
            ],
            allowUpstreamProxy=False,
        )
    assert [r.get("status") for r in run.results] == [200, 200], run.results
    assert corp.seen == []
    assert len(up.seen) == 2


async def test_an_upstream_proxy_refusing_the_tunnel_is_a_502() -> None:
    async with upstream_server() as up, upstream_proxy() as corp:
        # Nothing listens on the upstream proxy's port any more.
        dead = corp.url
    run = await _run(
        corp,
        {"HTTP_PROXY": dead, "HTTPS_PROXY": dead},
        [["tunnel", f"upstream.test:{up.port}", "/x"]],
        allowUpstreamProxy=True,
    )
    assert run.results == [{"status": 502, "connect": True}]
