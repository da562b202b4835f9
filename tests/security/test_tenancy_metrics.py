"""/metrics on a --tenants daemon, through a real daemon (root) and real websockets:
it is the operator's alone (what every tenant does is in it), so A's and B's tokens
get 403 and only the --metrics-token-file token reads it; and a metrics token a
tenant could read, or that is a tenant's own, stops the start-up."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import http_get
from tests.support.rpc import connect, poll_until
from tests.support.servers import PROJECT_ROOT, RunningServer, execserver_command
from tests.support.tenants import TOKEN_A, TOKEN_B, TenantHost, start, tenant_host

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
        assert await poll_until(lambda: len(_records(audit, "metrics.refuse")) == 2, 20)
    assert [r["principal"] for r in _records(audit, "metrics.refuse")] == ["bob", "alice"]


def _records(path: Path, event: str) -> list[dict[str, object]]:
    text = path.read_text() if path.exists() else ""
    return [r for r in map(json.loads, text.splitlines()) if r.get("event") == event]


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
