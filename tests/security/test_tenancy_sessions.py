"""Tenant B against tenant A's sessions, through a real daemon (root) on 127.0.0.1:
resuming A's session knowing its id fails exactly as an unknown id does (attached
or detached: its existence is not told); a token revoked by a SIGHUP reload is
refused at the next upgrade; a tenant removed by a reload loses its connection,
its session and its processes; a bad file on reload keeps the old table; audit
records name the principal."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.rpc import RpcFailure, connect
from tests.support.tenants import (
    TOKEN_A,
    TOKEN_B,
    TenantHost,
    audit_records,
    sha,
    sighup,
    start,
    tenant_host,
)


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        yield made


async def _upgrade_status(url: str, token: str) -> int:
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(url, headers={"Authorization": f"Bearer {token}"}):
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def test_b_cannot_resume_as_session_of_a_even_knowing_its_id(host: TenantHost) -> None:
    async with host.serve() as server:
        async with connect(server.url, token=TOKEN_A) as a:
            session_a = a.session_id
            assert session_a is not None
            # Attached: B must not even learn that (not "already attached").
            with pytest.raises(RpcFailure) as attached:
                async with connect(server.url, token=TOKEN_B, resume=session_a):
                    pass
        # Detached now (A left): still refused, with the unknown-id text.
        with pytest.raises(RpcFailure) as detached:
            async with connect(server.url, token=TOKEN_B, resume=session_a):
                pass
        unknown_id = str(uuid.uuid4())
        with pytest.raises(RpcFailure) as unknown:
            async with connect(server.url, token=TOKEN_B, resume=unknown_id):
                pass
        # A itself resumes it.
        async with connect(server.url, token=TOKEN_A, resume=session_a) as again:
            assert again.session_id == session_a
    assert attached.value.message == f"unknown session id {session_a}"
    assert detached.value.message == f"unknown session id {session_a}"
    assert unknown.value.message == f"unknown session id {unknown_id}"
    assert attached.value.code == detached.value.code == unknown.value.code


async def test_a_token_revoked_by_a_reload_is_refused_at_the_next_upgrade(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with host.serve("--audit-log", str(audit)) as server:
        assert await _upgrade_status(server.url, TOKEN_A) == 101
        host.write_tenants(alice={"token_sha256": sha("alice-new-token-abcdef")})
        sighup(server)
        await audit_records(audit, "tenants.reload")
        assert await _upgrade_status(server.url, TOKEN_A) == 401
        assert await _upgrade_status(server.url, "alice-new-token-abcdef") == 101
        assert await _upgrade_status(server.url, TOKEN_B) == 101


async def test_a_removed_tenant_loses_its_connection_session_and_processes(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with host.serve("--audit-log", str(audit)) as server:
        async with connect(server.url, token=TOKEN_B) as b:
            ok, _ = await start(b, "long", ["sleep", "300"], host.b)
            assert ok
            session_b = b.session_id
            host.write_tenants(bob=None)
            sighup(server)
            closed = await audit_records(audit, "session.close")
            assert closed[0]["session"] == session_b and closed[0]["principal"] == "bob"
            exits = await audit_records(audit, "process.exit")
            assert exits[0]["principal"] == "bob"
            # Its connection was dropped by the daemon.
            await b.closed(timeout=10)
        assert await _upgrade_status(server.url, TOKEN_B) == 401
        assert await _upgrade_status(server.url, TOKEN_A) == 101


async def test_a_bad_file_on_reload_keeps_the_previous_table(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with host.serve("--audit-log", str(audit)) as server:
        async with connect(server.url, token=TOKEN_A) as a:
            host.tenants_file.write_text("[tenants.alice]\nwriteable_roots = 3\n")
            sighup(server)
            record = (await audit_records(audit, "tenants.reload"))[0]
            assert record["ok"] is False
            assert "unknown key 'writeable_roots'" in str(record["reason"])
            # The session goes on, and the old tokens still upgrade.
            assert (await a.call("environment/status", {})).ok
        assert await _upgrade_status(server.url, TOKEN_A) == 101
        assert await _upgrade_status(server.url, TOKEN_B) == 101


async def test_audit_records_name_the_principal(host: TenantHost, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with host.serve("--audit-log", str(audit)) as server:
        async with connect(server.url, token=TOKEN_B) as b:
            ok, _ = await start(b, "p", ["true"], host.b)
            assert ok
            await audit_records(audit, "process.exit")
    opened = await audit_records(audit, "session.open")
    started = await audit_records(audit, "process.start")
    assert opened[0]["principal"] == "bob" and started[0]["principal"] == "bob"
