"""A tenant's managed network within its profile's ``network_allow``, through a real
daemon (root) and its real proxy: B's request cannot allow a host beyond the
ceiling, a request without an allow-list gets the ceiling's, and the proxy denies
every host outside it even when B's own client answers ``allow`` to the policy
request. Everything stays on 127.0.0.1: ``upstream.test`` and ``other.test`` are
made-up names the daemon's resolver maps there (tests/support/netproxy_serve.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.netproxy import (
    CHILD,
    SANDBOX_READ_ONLY,
    SERVE_WITH_HOSTS,
    proxy_params,
    run_on,
    upstream_server,
)
from tests.support.rpc import connect
from tests.support.tenants import TOKEN_B, TenantHost, tenant_host

INVALID_REQUEST = -32600
CEILING = ["upstream.test"]


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(bob={"network": "managed", "network_allow": CEILING})
        yield made


def _child(ops: list[list[Any]]) -> dict[str, Any]:
    """A start of the CHILD with ``ops`` (the system's python: the tenant's account
    runs it). Unsandboxed (B's sandbox is optional): it reaches its proxy on
    127.0.0.1, whose decisions are what is tested here."""
    return {"argv": ["/usr/bin/python3", "-c", CHILD, json.dumps(ops)]}


async def test_a_request_allowing_a_host_beyond_the_ceiling_is_refused(host: TenantHost) -> None:
    async with upstream_server() as upstream, host.serve(serve=SERVE_WITH_HOSTS) as server:
        async with connect(server.url, token=TOKEN_B) as b:
            url = f"http://other.test:{upstream.port}/"
            ops = [["fetch", "GET", url]]
            for allowed in ({"other.test": "allow"}, {"*.test": "allow"}, {"*": "allow"}):
                run = await run_on(
                    b, ops, network_proxy=proxy_params(domains=allowed), extra=_child(ops)
                )
                pattern = next(iter(allowed))
                assert run.start["error"] == {
                    "code": INVALID_REQUEST,
                    "message": f"tenant bob: network allow {pattern} is outside the tenant's "
                    "ceiling (network_allow upstream.test)",
                }, allowed
        assert upstream.seen == []


async def test_the_proxy_denies_a_host_outside_the_ceiling_even_when_bs_client_allows_it(
    host: TenantHost,
) -> None:
    async with upstream_server() as upstream, host.serve(serve=SERVE_WITH_HOSTS) as server:
        inside = f"http://upstream.test:{upstream.port}/inside"
        outside = f"http://other.test:{upstream.port}/outside"
        async with connect(server.url, token=TOKEN_B) as b:
            # No allow-list of its own, and B's client allows whatever it is asked.
            ops = [["fetch", "GET", inside], ["fetch", "GET", outside]]
            run = await run_on(
                b,
                ops,
                network_proxy=proxy_params(domains=None, reviewDomains=["other.test"]),
                answer=lambda request: {"type": "allow"},
                extra=_child(ops),
            )
        assert "error" not in run.start, run.start
        got_inside, got_outside = run.results
        # Inside the ceiling: the ceiling's list is what the proxy allows.
        assert got_inside["status"] == 200, run.raw_output
        # Outside: denied before B's decider is asked, and nothing reached it.
        assert got_outside["status"] == 403, run.raw_output
        assert got_outside["headers"]["x-proxy-error"] == "blocked-by-allowlist"
        assert [r["params"]["request"]["host"] for r in run.requests] == []
        assert upstream.seen == [f"GET /inside host=upstream.test:{upstream.port}"]
        denied = [d for d in run.decisions if d["host"] == "other.test"]
        assert [(d["decision"], d["source"]) for d in denied] == [("deny", "baseline_policy")]


async def test_a_managed_network_without_the_daemons_proxy_is_refused(host: TenantHost) -> None:
    # A sandbox bridged to a proxy on the executor's loopback that the request names
    # (HTTP_PROXY): the daemon could not hold that proxy to the ceiling.
    async with (
        host.serve(serve=SERVE_WITH_HOSTS) as server,
        connect(server.url, token=TOKEN_B) as b,
    ):
        extra = {
            **_child([]),
            "sandbox": SANDBOX_READ_ONLY,
            "enforceManagedNetwork": True,
            "env": {"PATH": "/usr/bin:/bin", "HTTP_PROXY": "http://127.0.0.1:9"},
        }
        run = await run_on(b, [], network_proxy=None, extra=extra)
    assert run.start["error"] == {
        "code": INVALID_REQUEST,
        "message": "tenant bob: a managed network without the daemon's proxy (networkProxy) "
        "is outside the tenant's ceiling (network_allow)",
    }


def test_doctor_shows_the_ceiling_and_network_allow_needs_a_managed_level(
    host: TenantHost,
) -> None:
    doctor = [sys.executable, "-m", "execserver", "doctor", "--tenants", str(host.tenants_file)]
    shown = subprocess.run(doctor, capture_output=True, text=True, check=True).stdout
    assert "network managed (only hosts upstream.test);" in shown
    host.write_tenants(bob={"network": "none", "network_allow": CEILING})
    result = subprocess.run(doctor, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().endswith('tenant bob: network_allow needs network = "managed"')
