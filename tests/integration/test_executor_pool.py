"""ExecutorPool against 3 real daemons: sessions spread by key and stay pinned; when
one replica dies, sessions on the others are untouched, new sessions land
elsewhere, and resuming a session of the dead one fails with a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from execserver.client import ExecServerClient, Output, RemoteProcess
from execserver.client.environments import Environment
from execserver.client.pool import (
    ExecutorPool,
    NoReplicaAvailable,
    Placement,
    ReplicaUnavailable,
    UnknownSessionKey,
    rendezvous_rank,
)
from tests.support.http import http_get
from tests.support.servers import RunningServer, start_server

KEYS = [f"conversation-{i}" for i in range(24)]


@contextlib.asynccontextmanager
async def three_replicas(extra: list[str] | None = None) -> AsyncIterator[list[RunningServer]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(start_server("execserver", extra or []))
            for _ in range(3)
        ]


def pool_of(servers: list[RunningServer], **options: object) -> ExecutorPool:
    replicas = [Environment(f"execserver-{i}", s.url) for i, s in enumerate(servers)]
    return ExecutorPool(replicas, connect_timeout=5, auto_reconnect=False, **options)


async def echo_line(proc: RemoteProcess, line: bytes) -> bytes:
    await proc.write(line)
    output = b""
    async for event in proc:
        if isinstance(event, Output):
            output += event.data
    return output


async def waiting_process(client: ExecServerClient, cwd: Path) -> RemoteProcess:
    return await client.start_process(
        ["sh", "-c", "read line; echo got $line"], cwd=cwd, pipe_stdin=True
    )


def test_rendezvous_ranking_is_stable_and_moves_only_the_removed_replicas_keys() -> None:
    replicas = ["a", "b", "c"]
    firsts = {key: rendezvous_rank(key, replicas)[0] for key in KEYS}
    assert set(firsts.values()) == {"a", "b", "c"}  # keys spread
    assert firsts == {key: rendezvous_rank(key, list(reversed(replicas)))[0] for key in KEYS}
    without_b = {key: rendezvous_rank(key, ["a", "c"])[0] for key in KEYS}
    for key in KEYS:
        if firsts[key] != "b":
            assert without_b[key] == firsts[key]


async def test_sessions_spread_and_resume_on_their_own_replica(tmp_path: Path) -> None:
    async with three_replicas() as servers:
        async with pool_of(servers) as pool:
            placements = {}
            for key in KEYS[:9]:
                client = await pool.session(key)
                placement = pool.placement(key)
                assert placement is not None
                assert placement.replica == pool.ranking(key)[0]
                assert placement.session_id == client.session_id
                assert await pool.session(key) is client  # the live client is reused
                placements[key] = placement
            assert {p.replica for p in placements.values()} == set(pool.replica_ids())
        # A restarted agent host restores the placements and resumes each session
        # on the replica that holds it (the old connections are closed: detached).
        async with pool_of(servers) as restarted:
            for key, placement in placements.items():
                restarted.restore(key, placement)
            for key, placement in placements.items():
                client = await restarted.session(key)
                assert client.session_id == placement.session_id
            with pytest.raises(UnknownSessionKey):
                await restarted.resume("never-placed")


async def test_killing_one_replica_leaves_the_others_and_fails_over_new_sessions(
    tmp_path: Path,
) -> None:
    async with three_replicas() as servers:
        async with pool_of(servers) as pool:
            # One key per replica, each with a process waiting for input.
            keys: dict[str, Any] = {}
            for key in KEYS:
                replica = pool.ranking(key)[0]
                keys.setdefault(replica, key)
            assert len(keys) == 3
            procs = {}
            for replica, key in keys.items():
                procs[replica] = await waiting_process(await pool.session(key), tmp_path)

            victim = "execserver-1"
            servers[1].process.send_signal(signal.SIGKILL)
            await servers[1].process.wait()

            # Running sessions on the other replicas are untouched.
            for replica, proc in procs.items():
                if replica != victim:
                    assert await echo_line(proc, f"{replica}\n".encode()) == (
                        f"got {replica}\n".encode()
                    )

            # New sessions whose first choice is the dead replica land on their second.
            moved = [k for k in KEYS if pool.ranking(k)[0] == victim and k not in keys.values()]
            assert moved
            for key in moved:
                await pool.session(key)
                placement = pool.placement(key)
                assert placement is not None
                assert placement.replica == pool.ranking(key)[1] != victim

            # The session on the dead replica cannot be resumed anywhere: a clear error.
            with pytest.raises(ReplicaUnavailable) as failure:
                await pool.resume(keys[victim])
            assert failure.value.replica == victim
            message = str(failure.value)
            assert f"lives on replica {victim} ({servers[1].url})" in message
            assert failure.value.session_id in message


async def test_a_draining_replica_takes_no_new_session_but_resumes(tmp_path: Path) -> None:
    async with three_replicas(["--drain-timeout", "120"]) as servers:
        async with pool_of(servers) as pool:
            draining = "execserver-0"
            on_it = [k for k in KEYS if pool.ranking(k)[0] == draining]
            pinned_key, idle_key, new_key = on_it[:3]
            # A session on that replica with a running process keeps the drain going.
            proc = await waiting_process(await pool.session(pinned_key), tmp_path)
            idle = await pool.session(idle_key)
            servers[0].process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                while True:
                    if (await http_get(servers[0].url, "/readyz"))[0] == 503:
                        break
                    await asyncio.sleep(0.05)

            await pool.session(new_key)
            placement = pool.placement(new_key)
            assert placement is not None
            assert placement.replica == pool.ranking(new_key)[1] != draining

            # Sessions on the draining replica can still be resumed there.
            resumed = await pool.resume(idle_key)
            assert resumed is not idle and resumed.session_id == idle.session_id
            assert await resumed.environment_status() == "ready"
            # The running process is untouched; once it is done the replica exits.
            assert await echo_line(proc, b"x\n") == b"got x\n"
            assert await asyncio.wait_for(servers[0].process.wait(), 60) == 0


async def test_no_replica_at_all_names_every_reason() -> None:
    pool = ExecutorPool(
        [Environment("gone-0", "ws://127.0.0.1:9"), Environment("gone-1", "ws://127.0.0.1:9")],
        connect_timeout=5,
        auto_reconnect=False,
    )
    async with pool:
        with pytest.raises(NoReplicaAvailable) as failure:
            await pool.session("k")
    assert "gone-0:" in str(failure.value) and "gone-1:" in str(failure.value)
    with pytest.raises(ValueError):
        ExecutorPool([])
    with pytest.raises(ValueError):
        pool.restore("k", Placement("elsewhere", "s"))


def test_statefulset_replicas_use_the_headless_service_names() -> None:
    pool = ExecutorPool.for_statefulset(
        "execserver", service="execserver", namespace="dev", replicas=3
    )
    assert pool.replica_ids() == ["execserver-0", "execserver-1", "execserver-2"]
    assert pool._replicas["execserver-2"].url == "ws://execserver-2.execserver.dev.svc:8765"
