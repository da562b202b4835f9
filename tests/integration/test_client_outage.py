"""Outages: the client keeps resuming for as long as the server holds the session
(its TTL, 80 s on both servers) unless told otherwise, reports every state
change to listeners, and after giving up the session can still be resumed by
hand (``connect(resume_session_id=)`` + ``read(after_seq=)``). An executor pool
replica that is gone fails its session's calls at once, with ReplicaUnavailable."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from execserver.client import ClientState, ExecServerClient, ExecServerUnavailable
from execserver.client.connection import RECOVERY_DEADLINE, SESSION_TTL
from execserver.client.environments import Environment
from execserver.client.pool import ExecutorPool, ReplicaUnavailable
from tests.support.client_peers import TcpProxy
from tests.support.servers import RunningServer, start_server

# The tests kill or stop the daemon and resume sessions: a daemon of their own.
pytestmark = pytest.mark.fresh_daemon


async def wait_for_file(path: Path) -> None:
    while not await asyncio.to_thread(path.exists):  # noqa: ASYNC110
        await asyncio.sleep(0.02)


def test_the_default_recovery_deadline_is_the_servers_session_ttl() -> None:
    assert SESSION_TTL == 80.0
    assert RECOVERY_DEADLINE == SESSION_TTL


async def test_state_changes_are_reported_and_a_long_outage_is_ridden_out(
    execserver: RunningServer, tmp_path: Path
) -> None:
    changes: list[tuple[ClientState, str | None]] = []
    recovering = asyncio.Event()
    async with TcpProxy(execserver.url) as proxy:
        client = await ExecServerClient.connect(proxy.url)
        assert client.recovery_deadline == SESSION_TTL

        def listener(state: ClientState, reason: str | None) -> None:
            changes.append((state, reason))
            if state is ClientState.RECOVERING:
                recovering.set()

        client.add_state_listener(listener)
        try:
            proc = await client.start_process(
                ["sh", "-c", "while [ ! -e go ]; do sleep 0.02; done; echo after"], cwd=tmp_path
            )
            proxy.refusing = True
            proxy.drop()
            await recovering.wait()
            # Several refused attempts in a row: the outage goes on for a while.
            accepted = proxy.accepted
            for _ in range(3):
                await asyncio.sleep(0.3)
            (tmp_path / "go").touch()
            proxy.refusing = False
            out = b"".join([getattr(e, "data", b"") async for e in proc])
            assert out == b"after\n"
            assert proxy.accepted > accepted
        finally:
            await client.close()
    states = [state for state, _ in changes]
    assert states == [ClientState.RECOVERING, ClientState.CONNECTED, ClientState.CLOSED]
    assert changes[0][1]  # why it is recovering


async def test_after_giving_up_the_session_is_resumed_by_hand(
    execserver: RunningServer, tmp_path: Path
) -> None:
    failed = asyncio.Event()
    async with TcpProxy(execserver.url) as proxy:
        client = await ExecServerClient.connect(proxy.url, recovery_deadline=0.5)
        client.add_state_listener(
            lambda state, _reason: failed.set() if state is ClientState.FAILED else None
        )
        script = "echo before; while [ ! -e go ]; do sleep 0.02; done; echo after"
        proc = await client.start_process(["sh", "-c", script], cwd=tmp_path)
        seen = b""
        with pytest.raises(ExecServerUnavailable):
            async for event in proc.events(raise_on_failure=False):
                seen += getattr(event, "data", b"")
                if seen == b"before\n":
                    proxy.refusing = True
                    proxy.drop()
                    await failed.wait()
                    await client.environment_status()
        cursor = proc.last_seq
        (tmp_path / "go").touch()
        await wait_for_file(tmp_path / "go")
        proxy.refusing = False
        async with await ExecServerClient.connect(
            proxy.url, resume_session_id=client.session_id, wait=5
        ) as again:
            rest = b""
            while True:
                read = await again.read(proc.process_id, after_seq=cursor, wait_ms=2000)
                rest += b"".join(chunk.chunk for chunk in read.chunks)
                cursor = read.next_seq - 1
                if read.closed:
                    break
        await client.close()
    assert seen == b"before\n"
    assert rest == b"after\n"


async def test_a_pool_session_on_a_dead_replica_fails_at_once_with_replica_unavailable(
    tmp_path: Path,
) -> None:
    async with start_server("execserver") as server:
        # A long deadline: only the replica being gone may end the wait quickly.
        pool = ExecutorPool([Environment("replica-0", server.url)], recovery_deadline=600)
        async with pool:
            client = await pool.session("conversation-1")
            session = client.session_id
            server.process.send_signal(signal.SIGKILL)
            await server.process.wait()
            async with asyncio.timeout(60):  # a bound for a broken build, not a measure
                with pytest.raises(ReplicaUnavailable) as info:
                    while True:  # until the client notices the drop
                        await client.environment_status()
                        await asyncio.sleep(0.05)
                assert info.value.replica == "replica-0"
                assert info.value.session_id == session
                assert isinstance(info.value, ExecServerUnavailable)
                with pytest.raises(ReplicaUnavailable):
                    await pool.session("conversation-1")


async def test_a_call_waiting_on_a_cancelled_recovery_fails_instead_of_spinning(
    execserver: RunningServer, tmp_path: Path
) -> None:
    # A recovery attempt cancelled from outside (its event loop closing: a test's
    # teardown, an application's asyncio.run ending) once left the client RECOVERING
    # with no attempt running, and every waiting call spun on the CPU forever.
    async with TcpProxy(execserver.url) as proxy:
        client = await ExecServerClient.connect(proxy.url, recovery_deadline=60)
        recovering = asyncio.Event()
        client.add_state_listener(
            lambda state, _: recovering.set() if state is ClientState.RECOVERING else None
        )
        try:
            proxy.refusing = True
            proxy.drop()
            await recovering.wait()
            waiting = asyncio.create_task(client.environment_status())
            await asyncio.sleep(0.1)
            assert not waiting.done()
            attempt = client._recovery._attempt
            assert attempt is not None
            attempt.cancel()
            async with asyncio.timeout(10):
                with pytest.raises(ExecServerUnavailable, match="cancelled"):
                    await waiting
            assert client.state is ClientState.FAILED
        finally:
            await client.close()
