"""Managed network end to end (docs/managed-network.md): process/start with networkProxy.

Differential cases run on both servers (``any_server``) with ``localhost`` as
the destination; the reference only lets a local destination through when it
is allowed by exact name or ``allowLocalBinding`` is set, and so do we.
execserver-only cases use made-up domains mapped to 127.0.0.1 by the proxy's
resolver hook.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support.netproxy import (
    SANDBOX_READ_ONLY,
    proxy_params,
    run_child,
    server_with_hosts,
    upstream_server,
)
from tests.support.servers import RunningServer

DECISION_KEYS = {
    "processId",
    "timestamp",
    "scope",
    "decision",
    "source",
    "reason",
    "protocol",
    "host",
    "port",
    "method",
    "client",
    "policyOverride",
}


def blocked_body(result: dict[str, Any]) -> dict[str, Any]:
    assert result["status"] == 403, result
    assert result["headers"]["content-type"] == "application/json"
    body: dict[str, Any] = json.loads(result["body"])
    return body


async def test_allowed_domain_reaches_the_upstream(any_server: RunningServer) -> None:
    async with upstream_server() as up:
        url = f"http://localhost:{up.port}/x?y=1"
        run = await run_child(
            any_server.url,
            [["fetch", "GET", url]],
            network_proxy=proxy_params(domains={"localhost": "allow"}),
        )
    assert run.start["result"]["sandboxType"] == "none"
    [result] = run.results
    assert result["status"] == 200
    assert up.seen == [f"GET /x?y=1 host=localhost:{up.port}"]
    [decision] = run.decisions
    assert set(decision) == DECISION_KEYS
    assert decision["processId"] == "np"
    assert decision["timestamp"].endswith("Z")
    assert {k: decision[k] for k in ("scope", "decision", "source", "reason", "protocol")} == {
        "scope": "domain",
        "decision": "allow",
        "source": "baseline_policy",
        "reason": "allow",
        "protocol": "http",
    }
    assert (decision["host"], decision["port"], decision["method"]) == ("localhost", up.port, "GET")
    assert decision["client"].startswith("127.0.0.1:")
    assert decision["policyOverride"] is False
    assert run.requests == []


async def test_denied_domain_gets_403_and_a_decision(any_server: RunningServer) -> None:
    run = await run_child(
        any_server.url,
        [["fetch", "GET", "http://blocked.invalid/"]],
        network_proxy=proxy_params(domains={"*.invalid": "deny"}),
        answer=lambda _: {"type": "allow"},
    )
    [result] = run.results
    assert result["headers"]["x-proxy-error"] == "blocked-by-denylist"
    assert blocked_body(result) == {
        "status": "blocked",
        "host": "blocked.invalid",
        "reason": "denied",
        "decision": "deny",
        "source": "baseline_policy",
        "protocol": "http",
        "port": 80,
        "message": "Domain denied by the sandbox policy.",
    }
    [decision] = run.decisions
    assert (decision["decision"], decision["source"], decision["reason"]) == (
        "deny",
        "baseline_policy",
        "denied",
    )
    assert run.requests == []  # a baseline deny is never put to the client


async def test_local_address_not_listed_is_blocked_without_asking(
    any_server: RunningServer,
) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["fetch", "GET", f"http://127.0.0.1:{up.port}/"]],
            network_proxy=proxy_params(domains={"localhost": "allow"}),
            answer=lambda _: {"type": "allow"},
        )
    assert blocked_body(run.results[0])["reason"] == "not_allowed_local"
    assert up.seen == []
    assert run.requests == []
    assert [d["reason"] for d in run.decisions] == ["not_allowed_local"]


@pytest.mark.parametrize(
    ("answer", "decision", "reason", "header"),
    [
        ({"type": "deny", "reason": "user said no"}, "deny", "user said no", "blocked-by-policy"),
        ({"type": "ask", "reason": "hmm"}, "ask", "hmm", "blocked-by-policy"),
        ({"type": "bogus"}, "deny", "not_allowed", "blocked-by-allowlist"),
        ({"type": "deny"}, "deny", "not_allowed", "blocked-by-allowlist"),
        ("error", "deny", "not_allowed", "blocked-by-allowlist"),
        ("silent", "deny", "not_allowed", "blocked-by-allowlist"),
    ],
)
async def test_undecided_domain_asks_the_client_who_does_not_allow(
    any_server: RunningServer, answer: Any, decision: str, reason: str, header: str
) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["fetch", "GET", f"http://localhost:{up.port}/u"]],
            network_proxy=proxy_params(timeout_ms=1000, allowLocalBinding=True),
            answer=lambda _: answer,
        )
    [request] = run.requests
    assert isinstance(request["id"], int)
    assert request["params"] == {
        "processId": "np",
        "request": {"protocol": "http", "host": "localhost", "port": up.port},
    }
    [result] = run.results
    assert result["headers"]["x-proxy-error"] == header
    body = blocked_body(result)
    assert (body["decision"], body["source"], body["reason"]) == (decision, "decider", reason)
    assert up.seen == []
    [record] = run.decisions
    assert (record["decision"], record["source"], record["reason"]) == (decision, "decider", reason)


async def test_undecided_domain_allowed_once_by_the_client(any_server: RunningServer) -> None:
    async with upstream_server() as up:
        url = f"http://localhost:{up.port}/once"
        run = await run_child(
            any_server.url,
            [["fetch", "GET", url], ["fetch", "GET", url]],
            network_proxy=proxy_params(allowLocalBinding=True),
            answer=lambda _: {"type": "allow"},
        )
    assert [r["status"] for r in run.results] == [200, 200]
    # Allowing is per request: the proxy asks again for the second one.
    assert len(run.requests) == 2
    assert up.seen == [f"GET /once host=localhost:{up.port}"] * 2
    for record in run.decisions:
        assert (record["decision"], record["source"], record["policyOverride"]) == (
            "allow",
            "decider",
            True,
        )


async def test_undecided_domain_without_a_decider_is_not_allowed(
    any_server: RunningServer,
) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["fetch", "GET", f"http://localhost:{up.port}/"]],
            network_proxy=proxy_params(timeout_ms=None, allowLocalBinding=True),
        )
    body = blocked_body(run.results[0])
    assert (body["reason"], body["source"], body["message"]) == (
        "not_allowed",
        "baseline_policy",
        "Domain not in allowlist.",
    )
    assert run.requests == []


async def test_review_domains_go_to_the_decider_even_when_allowed(
    any_server: RunningServer,
) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["fetch", "GET", f"http://localhost:{up.port}/"]],
            network_proxy=proxy_params(
                allowLocalBinding=True,
                domains={"localhost": "allow"},
                reviewDomains=["localhost"],
            ),
            answer=lambda _: {"type": "deny", "reason": "reviewed"},
        )
    assert len(run.requests) == 1
    assert blocked_body(run.results[0])["reason"] == "reviewed"
    assert up.seen == []


async def test_limited_mode_refuses_writes_and_tunnels(any_server: RunningServer) -> None:
    async with upstream_server() as up:
        base = f"localhost:{up.port}"
        run = await run_child(
            any_server.url,
            [
                ["fetch", "GET", f"http://{base}/get"],
                ["fetch", "HEAD", f"http://{base}/head"],
                ["fetch", "POST", f"http://{base}/post"],
                ["tunnel", base, "/tunnel"],
            ],
            network_proxy=proxy_params(mode="limited", domains={"localhost": "allow"}),
        )
    get, head, post, tunnel = run.results
    assert (get["status"], head["status"]) == (200, 200)
    assert post["headers"]["x-proxy-error"] == "blocked-by-method-policy"
    body = blocked_body(post)
    assert (body["reason"], body["source"]) == ("method_not_allowed", "mode_guard")
    assert tunnel == {"status": 403, "connect": True}
    assert up.seen == [f"GET /get host={base}", f"HEAD /head host={base}"]
    # A refused request is recorded twice: the domain allowed it, the mode did not.
    guarded = [(d["scope"], d["decision"], d["source"], d["reason"]) for d in run.decisions[2:]]
    assert guarded == [
        ("domain", "allow", "baseline_policy", "allow"),
        ("non_domain", "deny", "mode_guard", "method_not_allowed"),
        ("domain", "allow", "baseline_policy", "allow"),
        ("non_domain", "deny", "mode_guard", "mitm_required"),
    ]


async def test_connect_tunnel_in_full_mode(any_server: RunningServer) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["tunnel", f"localhost:{up.port}", "/t"]],
            network_proxy=proxy_params(domains={"localhost": "allow"}),
        )
    assert run.results[0]["status"] == 200
    assert up.seen == [f"GET /t host=localhost:{up.port}"]
    [record] = run.decisions
    assert (record["protocol"], record["method"], record["decision"]) == (
        "https_connect",
        "CONNECT",
        "allow",
    )


async def test_socks5_allows_and_refuses_by_policy(any_server: RunningServer) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["socks", "localhost", up.port, "/s"], ["socks", "denied.invalid", 80, "/"]],
            network_proxy=proxy_params(
                enableSocks5=True, domains={"localhost": "allow", "denied.invalid": "deny"}
            ),
        )
    ok, refused = run.results
    assert ok["status"] == 200
    assert refused == {"socks_reply": 2}  # connection not allowed by ruleset
    assert up.seen == ["GET /s host=localhost"]
    assert [(d["protocol"], d["decision"]) for d in run.decisions] == [
        ("socks5_tcp", "allow"),
        ("socks5_tcp", "deny"),
    ]
    assert all("method" not in d for d in run.decisions)


@pytest.mark.parametrize(("socks", "local"), [(False, False), (True, True)])
async def test_proxy_variables_match_the_reference(
    any_server: RunningServer, socks: bool, local: bool
) -> None:
    run = await run_child(
        any_server.url,
        [["env", ["CODEX_", "NODE_", "ELECTRON_", "PIP_"]]],
        network_proxy=proxy_params(enableSocks5=socks, allowLocalBinding=local),
    )
    env: dict[str, str] = run.results[0]["env"]
    http = env["HTTP_PROXY"]
    assert http.startswith("http://127.0.0.1:")
    shape = {k: ("HTTP" if v == http else v) for k, v in env.items()}
    expected_all = env["ALL_PROXY"] if socks else "HTTP"
    if socks:
        assert env["ALL_PROXY"].startswith("socks5h://127.0.0.1:")
    no_proxy = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16" if local else ""
    http_names = [
        "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "WS_PROXY", "WSS_PROXY",
        "ws_proxy", "wss_proxy", "YARN_HTTP_PROXY", "YARN_HTTPS_PROXY",
        "npm_config_http_proxy", "npm_config_https_proxy", "npm_config_proxy",
        "NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY", "NPM_CONFIG_PROXY",
        "BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY", "PIP_PROXY", "DOCKER_HTTP_PROXY",
        "DOCKER_HTTPS_PROXY",
    ]  # fmt: skip
    expected = dict.fromkeys(http_names, "HTTP")
    expected.update(
        dict.fromkeys(["ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"], expected_all)
    )
    expected.update(
        dict.fromkeys(
            ["NO_PROXY", "no_proxy", "NPM_CONFIG_NOPROXY", "npm_config_noproxy", "BUNDLE_NO_PROXY"],
            no_proxy,
        )
    )
    expected.update(
        {
            "NODE_USE_ENV_PROXY": "1",
            "ELECTRON_GET_USE_PROXY": "true",
            "CODEX_NETWORK_PROXY_ACTIVE": "1",
            "CODEX_NETWORK_ALLOW_LOCAL_BINDING": "1" if local else "0",
        }
    )
    assert shape == expected


async def test_disabled_proxy_is_invalid_params(any_server: RunningServer) -> None:
    run = await run_child(any_server.url, [], network_proxy=proxy_params(enabled=False))
    assert run.start["error"] == {
        "code": -32602,
        "message": "invalid network proxy config: executor-local network proxy launch "
        "requires an enabled proxy",
    }


# ---- sandboxed children ------------------------------------------------------------


async def test_sandboxed_child_reaches_only_the_proxy(any_server: RunningServer) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [
                ["fetch", "GET", f"http://localhost:{up.port}/via-proxy"],
                ["direct", "127.0.0.1", up.port],
            ],
            network_proxy=proxy_params(domains={"localhost": "allow"}),
            extra={"sandbox": SANDBOX_READ_ONLY, "enforceManagedNetwork": True},
        )
    assert run.start["result"]["sandboxType"] == "linuxSeccomp"
    via_proxy, direct = run.results
    assert via_proxy["status"] == 200
    assert direct["direct"] == "failed"
    assert up.seen == [f"GET /via-proxy host=localhost:{up.port}"]
    assert [d["decision"] for d in run.decisions] == ["allow"]


async def test_sandboxed_child_without_enforcement_cannot_reach_the_proxy(
    any_server: RunningServer,
) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["fetch", "GET", f"http://localhost:{up.port}/"], ["direct", "127.0.0.1", up.port]],
            network_proxy=proxy_params(domains={"localhost": "allow"}),
            extra={"sandbox": SANDBOX_READ_ONLY},
        )
    assert "error" in run.results[0]
    assert run.results[1]["direct"] == "failed"
    assert up.seen == []
    assert run.decisions == []


async def test_sandboxed_child_still_gets_policy_decisions() -> None:
    async with server_with_hosts("execserver") as server, upstream_server() as up:
        run = await run_child(
            server.url,
            [
                ["fetch", "GET", f"http://upstream.test:{up.port}/allowed"],
                ["fetch", "GET", f"http://other.test:{up.port}/asked"],
                ["fetch", "GET", "http://blocked.invalid/"],
            ],
            network_proxy=proxy_params(domains={"upstream.test": "allow", "*.invalid": "deny"}),
            answer=lambda p: {"type": "deny", "reason": "not " + p["request"]["host"]},
            extra={"sandbox": SANDBOX_READ_ONLY, "enforceManagedNetwork": True},
        )
    allowed, asked, blocked = run.results
    assert allowed["status"] == 200
    assert blocked_body(asked)["reason"] == "not other.test"
    assert blocked_body(blocked)["reason"] == "denied"
    assert up.seen == [f"GET /allowed host=upstream.test:{up.port}"]
    assert [r["params"]["request"]["host"] for r in run.requests] == ["other.test"]


async def test_enforced_sandbox_is_bridged_to_a_client_side_loopback_proxy(
    any_server: RunningServer,
) -> None:
    """No networkProxy, but HTTP_PROXY names a proxy on the executor's loopback (a
    client-side proxy): the sandboxed child reaches it, and nothing else."""
    async with upstream_server() as proxy, upstream_server() as other:
        proxy_url = f"http://127.0.0.1:{proxy.port}"
        run = await run_child(
            any_server.url,
            [["fetch", "GET", "http://example.invalid/p"], ["direct", "127.0.0.1", other.port]],
            network_proxy=None,
            extra={
                "sandbox": SANDBOX_READ_ONLY,
                "enforceManagedNetwork": True,
                "managedNetwork": {"loopbackPorts": [proxy.port]},
                "env": {"PATH": "/usr/bin:/bin", "HTTP_PROXY": proxy_url},
            },
        )
    fetched, direct = run.results
    assert fetched["status"] == 200
    assert proxy.seen == ["GET /p host=example.invalid"]
    assert direct["direct"] == "failed"
    assert other.seen == []


async def test_enforced_sandbox_without_any_proxy_fails_closed(any_server: RunningServer) -> None:
    run = await run_child(
        any_server.url,
        [["direct", "127.0.0.1", 9]],
        network_proxy=None,
        extra={
            "sandbox": SANDBOX_READ_ONLY,
            "enforceManagedNetwork": True,
            "managedNetwork": {"loopbackPorts": [9]},
        },
    )
    assert run.results == []  # the command never ran
    assert (run.exit_code, run.sandbox_denied) == (101, True)
    assert "managed proxy mode requires proxy environment variables" in run.raw_output


async def test_the_proxy_stops_when_its_process_is_closed(execserver: RunningServer) -> None:
    run = await run_child(
        execserver.url, [["env", ["CODEX_"]]], network_proxy=proxy_params(enableSocks5=True)
    )
    env = run.results[0]["env"]
    ports = [int(env[name].rsplit(":", 1)[1]) for name in ("HTTP_PROXY", "ALL_PROXY")]
    # Closing is asynchronous to process/closed: poll (bounded) until refused.
    for port in ports:
        refused = False
        for _ in range(100):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except ConnectionRefusedError:
                refused = True
                break
            writer.close()
            await asyncio.sleep(0.05)
        assert refused, f"proxy port {port} still open after process/closed"


async def test_tunnels_and_socks_are_put_to_the_client_with_their_protocol(
    any_server: RunningServer,
) -> None:
    async with upstream_server() as up:
        run = await run_child(
            any_server.url,
            [["tunnel", f"localhost:{up.port}", "/t"], ["socks", "localhost", up.port, "/s"]],
            network_proxy=proxy_params(enableSocks5=True, allowLocalBinding=True),
            answer=lambda _: {"type": "allow"},
        )
    assert [r["status"] for r in run.results] == [200, 200]
    assert [r["params"]["request"]["protocol"] for r in run.requests] == [
        "https_connect",
        "socks5_tcp",
    ]
    assert [(d["protocol"], d["decision"], d["source"]) for d in run.decisions] == [
        ("https_connect", "allow", "decider"),
        ("socks5_tcp", "allow", "decider"),
    ]
