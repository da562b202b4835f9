"""A tenant's quotas through a real daemon (root): B's ``max_processes`` and
``max_sessions`` trip with a JSON-RPC error naming the ceiling, A (no quota)
starts and connects as before, and B's room comes back when its processes end;
a detached session of B's still counts until it is resumed or expires. Every
refusal is on the audit log with the principal and the ceiling that said no."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.rpc import RpcFailure, connect, poll_until
from tests.support.state_dir import end_keepers, kill9
from tests.support.tenants import TOKEN_A, TOKEN_B, TenantHost, records, start, tenant_host

INVALID_REQUEST = -32600


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(
            alice={"sandbox": "optional"},
            bob={"max_processes": 2, "max_sessions": 1},
        )
        yield made


async def test_b_past_max_processes_is_refused_and_a_is_untouched(host: TenantHost) -> None:
    async with (
        host.serve() as server,
        connect(server.url, token=TOKEN_B) as b,
        connect(server.url, token=TOKEN_A) as a,
    ):
        for n in range(2):
            ok, _ = await start(b, f"b{n}", ["sleep", "300"], host.b)
            assert ok
        ok, error = await start(b, "b-over", ["sleep", "300"], host.b)
        assert not ok
        assert error == (INVALID_REQUEST, "tenant bob: max_processes 2 reached")
        # A has no quota and B's full quota does not touch it.
        for n in range(3):
            ok, _ = await start(a, f"a{n}", ["sleep", "300"], host.a)
            assert ok
        # When one of B's processes has ended, B has room for one more.
        await b.ok("process/terminate", {"processId": "b0"})
        await b.wait_closed("b0")
        ok, _ = await start(b, "b-again", ["sleep", "300"], host.b)
        assert ok
        ok, error = await start(b, "b-over-again", ["sleep", "300"], host.b)
        assert (ok, error) == (False, (INVALID_REQUEST, "tenant bob: max_processes 2 reached"))
        for client, ids in ((a, ["a0", "a1", "a2"]), (b, ["b1", "b-again"])):
            for process_id in ids:
                await client.ok("process/terminate", {"processId": process_id})


async def test_b_past_max_sessions_is_refused_and_a_is_untouched(host: TenantHost) -> None:
    refusal = (INVALID_REQUEST, "tenant bob: max_sessions 1 reached")
    async with host.serve() as server:
        async with connect(server.url, token=TOKEN_B) as first:
            session_id = first.session_id
            with pytest.raises(RpcFailure) as refused:
                async with connect(server.url, token=TOKEN_B):
                    pass
            assert (refused.value.code, refused.value.message) == refusal
            async with connect(server.url, token=TOKEN_A), connect(server.url, token=TOKEN_A):
                pass  # A has no quota: two sessions at once
        # A detached session still counts (it can be resumed until its TTL runs
        # out): B may resume it, not open another beside it.
        with pytest.raises(RpcFailure) as still:
            async with connect(server.url, token=TOKEN_B):
                pass
        assert (still.value.code, still.value.message) == refusal
        async with connect(server.url, token=TOKEN_B, resume=session_id) as resumed:
            assert resumed.session_id == session_id


async def test_every_refusal_is_audited_with_principal_method_and_ceiling(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with host.serve("--audit-log", str(audit)) as server:
        async with connect(server.url, token=TOKEN_B) as b:
            for n in range(2):
                ok, _ = await start(b, f"b{n}", ["sleep", "300"], host.b)
                assert ok
            ok, _ = await start(b, "b-over", ["sleep", "300"], host.b)
            assert not ok
            with pytest.raises(RpcFailure):
                async with connect(server.url, token=TOKEN_B):
                    pass
            # A's work is not a refusal and leaves no such record.
            async with connect(server.url, token=TOKEN_A) as a:
                ok, _ = await start(a, "a0", ["true"], host.a)
                assert ok
            # The log is appended by the daemon's writer thread: wait for both.
            assert await poll_until(lambda: len(records(audit, "tenant.refuse")) >= 2, 20)
            session_b = b.session_id
            for process_id in ("b0", "b1"):
                await b.ok("process/terminate", {"processId": process_id})
    by_method = {str(record["method"]): record for record in records(audit, "tenant.refuse")}
    assert sorted(by_method) == ["initialize", "process/start"]
    started = by_method["process/start"]
    assert started["principal"] == "bob"
    assert started["reason"] == "max_processes 2 reached"
    assert started["session"] == session_b
    opened = by_method["initialize"]
    assert opened["principal"] == "bob"
    assert opened["reason"] == "max_sessions 1 reached"
    assert opened["session"] is None  # refused before it had one
    assert all(isinstance(record["peer"], str) for record in by_method.values())


async def test_b_kept_processes_still_count_after_the_daemon_is_killed_and_restarted(
    host: TenantHost,
) -> None:
    # --state-dir: B's processes outlive the daemon in their keepers. A restarted
    # daemon that re-adopted them without counting them would let B start
    # max_processes more beside them.
    state = host.base / "state"
    refusal = (INVALID_REQUEST, "tenant bob: max_processes 2 reached")
    try:
        async with host.serve("--state-dir", str(state)) as first:
            async with connect(first.url, token=TOKEN_B) as b:
                session_id = b.session_id
                for n in range(2):
                    ok, _ = await start(b, f"b{n}", ["sleep", "300"], host.b)
                    assert ok
            await kill9(first)
        async with (
            host.serve("--state-dir", str(state)) as second,
            connect(second.url, token=TOKEN_B, resume=session_id) as b,
        ):
            ok, error = await start(b, "b-over", ["sleep", "300"], host.b)
            assert (ok, error) == (False, refusal)
            # Its room comes back when a re-adopted process ends, as before the restart.
            await b.ok("process/terminate", {"processId": "b0"})
            await b.wait_closed("b0")
            ok, _ = await start(b, "b-again", ["sleep", "300"], host.b)
            assert ok
            for process_id in ("b1", "b-again"):
                await b.ok("process/terminate", {"processId": process_id})
    finally:
        await end_keepers(state)
