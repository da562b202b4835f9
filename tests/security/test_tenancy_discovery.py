"""The discovery methods of a tenant, through a real daemon (root): they read files
too, so they are a tenant's like fs/*: environmentConfig/read reads the tenant's
own ~/.codex (with its identity), never the daemon's config; capabilityRoots/
discoverV1 scans only inside the tenant's roots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.rpc import connect, uri
from tests.support.tenants import TOKEN_B, TenantHost, tenant_host


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(bob={"readable_roots": [str(made.b)]})
        yield made


async def test_config_read_is_the_tenants_own_never_the_daemons(
    host: TenantHost, tmp_path: Path
) -> None:
    daemon_home = tmp_path / "codex-home"
    daemon_home.mkdir()
    (daemon_home / "config.toml").write_text('model = "the-daemons-own"\n')
    env = {"CODEX_HOME": str(daemon_home)}
    async with host.serve(env=env) as server, connect(server.url, token=TOKEN_B) as b:
        result = await b.ok(
            "environmentConfig/read",
            {"cwd": uri(host.b), "configPaths": [["model"]], "requirementsPaths": []},
        )
    assert "the-daemons-own" not in str(result)
    assert result["userHomeDir"] == uri("/home/es-tenant-b")
    assert result["codexHomeDir"] == uri("/home/es-tenant-b/.codex")


async def test_b_cannot_scan_as_workspace_for_capabilities(host: TenantHost) -> None:
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        reply = await b.call(
            "capabilityRoots/discoverV1", {"roots": [{"id": "r", "path": uri(host.a)}]}
        )
    assert reply.error[1] == f"tenant bob: path {host.a} is outside the tenant's readable roots"
