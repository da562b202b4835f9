"""/metrics on a --tenants daemon, through a real daemon (root) and real websockets:
it is the operator's alone (every tenant's figures are in it), so A's and B's tokens
get 403 and only the --metrics-token-file token reads it; its per-principal series
count A's and B's processes, sessions and refusals apart; a tenant a reload removed
leaves no series behind; and a metrics token a tenant could read, or that is a
tenant's own, stops the start-up."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import http_get
from tests.support.rpc import connect, poll_until
from tests.support.servers import PROJECT_ROOT, RunningServer, execserver_command
from tests.support.tenants import TOKEN_A, TOKEN_B, TenantHost, records, sighup, start, tenant_host

INVALID_REQUEST = -32600
OPERATOR_TOKEN = "operator-scrape-token-5f3a9c"
FORBIDDEN = "/metrics is the operator's: scrape it with the token of --metrics-token-file"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        # Both may run unsandboxed commands; B may have one process at a time.
        made.write_tenants(alice={"sandbox": "optional"}, bob={"max_processes": 1})
        token = made.base / "metrics.token"
        token.write_text(OPERATOR_TOKEN + "\n")
        os.chmod(token, 0o600)
        yield made


def _serve(host: TenantHost, *extra: str) -> AbstractAsyncContextManager[RunningServer]:
    return host.serve("--metrics", "--metrics-token-file", str(host.base / "metrics.token"), *extra)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _scrape(server: RunningServer) -> Samples:
    status, text = await http_get(server.url, "/metrics", _bearer(OPERATOR_TOKEN))
    assert status == 200, text
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def _scrape_until(
    server: RunningServer, done: Callable[[Samples], bool], timeout: float = 30
) -> Samples:
    """The first scrape ``done`` accepts: what the daemon does after a reload or an
    exit happens after the request that caused it has been answered."""
    async with asyncio.timeout(timeout):
        while True:
            got = await _scrape(server)
            if done(got):
                return got
            await asyncio.sleep(0.05)


def _of(got: Samples, principal: str) -> dict[str, float]:
    """The per-principal series of ``principal``, by metric name."""
    return {
        name.removeprefix("execserver_tenant_"): value
        for (name, labels), value in got.items()
        if name.startswith("execserver_tenant_")
        and not name.endswith("_created")
        and labels == (("principal", principal),)
    }


def _principals(got: Samples) -> set[str]:
    return {
        dict(labels)["principal"] for name, labels in got if name.startswith("execserver_tenant_")
    }


async def test_tenant_tokens_get_403_and_only_the_operator_token_reads_metrics(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with _serve(host, "--audit-log", str(audit)) as server:
        async with connect(server.url, token=TOKEN_A) as a:
            ok, _ = await start(a, "a0", ["sleep", "300"], host.a)
            assert ok
            # B, with A busy: its own token says nothing of A (nor of the daemon).
            for token in (TOKEN_B, TOKEN_A):
                assert await http_get(server.url, "/metrics", _bearer(token)) == (403, FORBIDDEN)
            assert await http_get(server.url, "/metrics") == (401, "missing websocket bearer token")
            wrong = await http_get(server.url, "/metrics", _bearer("not-a-token"))
            assert wrong == (401, "invalid websocket bearer token")
            got = await _scrape(server)
            assert got[("execserver_connections", ())] == 1
            await a.ok("process/terminate", {"processId": "a0"})
        # The operator sees who tried (the audit log is the operator's, not B's).
        assert await poll_until(lambda: len(records(audit, "metrics.refuse")) == 2, 20)
    assert [r["principal"] for r in records(audit, "metrics.refuse")] == ["bob", "alice"]


async def test_per_principal_series_count_a_and_b_apart(host: TenantHost) -> None:
    async with (
        _serve(host) as server,
        connect(server.url, token=TOKEN_A) as a,
        connect(server.url, token=TOKEN_A),  # A's second session
        connect(server.url, token=TOKEN_B) as b,
    ):
        for process_id in ("a0", "a1"):
            ok, _ = await start(a, process_id, ["sleep", "300"], host.a)
            assert ok
        await a.ok("process/terminate", {"processId": "a0"})
        ok, _ = await start(b, "b0", ["sleep", "300"], host.b)
        assert ok
        ok, error = await start(b, "b1", ["sleep", "300"], host.b)
        assert (ok, error) == (False, (INVALID_REQUEST, "tenant bob: max_processes 1 reached"))
        # a0 is counted live until it is closed, which follows its terminate's answer.
        got = await _scrape_until(server, lambda s: _of(s, "alice").get("processes_live") == 1)
        for process_id, client in (("a1", a), ("b0", b)):
            await client.ok("process/terminate", {"processId": process_id})
    assert _of(got, "alice") == {
        "processes_started_total": 2,
        "processes_live": 1,
        "sessions": 2,
        "refusals_total": 0,
    }
    assert _of(got, "bob") == {
        "processes_started_total": 1,
        "processes_live": 1,
        "sessions": 1,
        "refusals_total": 1,
    }
    assert got[("execserver_processes_started_total", ())] == 3
    assert _principals(got) == {"alice", "bob"}


async def test_a_tenant_removed_on_sighup_leaves_no_series(host: TenantHost) -> None:
    async with _serve(host) as server:
        async with connect(server.url, token=TOKEN_A) as a, connect(server.url, token=TOKEN_B) as b:
            ok, _ = await start(b, "b0", ["sleep", "300"], host.b)
            assert ok
            ok, _ = await start(b, "b1", ["sleep", "300"], host.b)
            assert not ok
            ok, _ = await start(a, "a0", ["true"], host.a)
            assert ok
            got = await _scrape(server)
            assert _of(got, "bob")["refusals_total"] == 1
            host.write_tenants(alice={"sandbox": "optional"}, bob=None)
            sighup(server)
            await b.closed(timeout=20)
            # Its session ends and its process is killed; then bob has nothing live
            # and its series go, counters too, while alice's stay.
            got = await _scrape_until(server, lambda s: "bob" not in _principals(s))
            assert _principals(got) == {"alice"}
            assert _of(got, "alice")["processes_started_total"] == 1
            # Added back, bob starts afresh: nothing of the removed tenant was kept.
            host.write_tenants(alice={"sandbox": "optional"}, bob={"max_processes": 1})
            sighup(server)
            got = await _scrape_until(server, lambda s: "bob" in _principals(s))
            assert _of(got, "bob") == {
                "processes_started_total": 0,
                "processes_live": 0,
                "sessions": 0,
                "refusals_total": 0,
            }
            assert (await a.call("environment/status", {})).ok


def _startup_error(host: TenantHost, *flags: str) -> list[str]:
    """The daemon's stderr when it refuses to start (it must exit 1 at once)."""
    env = {**os.environ, "EXECSERVER_STARTUP_PROBE": "0"}
    argv = execserver_command(
        ["--listen", "ws://127.0.0.1:0", "--tenants", str(host.tenants_file), *flags]
    )
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env, cwd=PROJECT_ROOT
    )
    assert done.returncode == 1, done
    return done.stderr.splitlines()


def test_metrics_with_tenants_need_the_operator_token(host: TenantHost) -> None:
    assert _startup_error(host, "--metrics") == [
        "Error: `--metrics` with `--tenants` requires `--metrics-token-file`: no tenant's "
        "token may read /metrics"
    ]


def test_a_metrics_token_others_can_read_or_a_tenants_own_is_refused(host: TenantHost) -> None:
    token = host.base / "metrics.token"
    flags = ("--metrics", "--metrics-token-file", str(token))
    os.chmod(token, 0o644)
    assert _startup_error(host, *flags) == [
        f"Error: metrics token file {token} is readable or writable by others (mode 0644); "
        "chmod o-rw it"
    ]
    os.chmod(token, 0o600)
    os.chown(token, host.b_uid, 0)
    assert _startup_error(host, *flags) == [
        f"Error: metrics token file {token} is owned by tenant account es-tenant-b"
    ]
    os.chown(token, 0, 0)
    token.write_text(TOKEN_B)
    assert _startup_error(host, *flags) == [
        f"Error: metrics token file {token} holds tenant bob's token; give the scrape job "
        "a token of its own"
    ]
