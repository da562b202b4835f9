"""The core's client-facing guarantees (numbered as in the test names and in
docs/core-guarantees.md), checked with tool calls through the orchestrator
against real exec-servers (ours and the reference). The only stand-in is the
scripted user.

Invariants 1, 3, 4, 5 are the client's; here they are checked end to end,
through the orchestrator. 12 and 14 are checked at the orchestrator's seam
(it never kills a process; a network denial terminates one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client.connection import ExecServerClient
from execserver.client.events import Closed, Exited
from execserver.core import TurnContext
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment
from execserver.core.errors import ExecFailed
from execserver.core.network_approval import (
    DenialSource,
    NetworkApprovalMode,
    NetworkApprovalService,
    NetworkApprovalSpec,
)
from execserver.core.orchestrator import ToolOrchestrator
from execserver.core.permissions import workspace_write_profile
from execserver.core.policy import AskForApproval
from execserver.core.shell_runtime import ShellCommandRuntime, ShellRequest
from tests.support.approver import ScriptedUser
from tests.support.servers import RunningServer

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
# Generous bound for a marker file to appear; only a hang would reach it.
WAIT_LIMIT = 30.0


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as connected:
        yield connected


def _turn(user: ScriptedUser, workspace: Path) -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id="executor-1", cwd=str(workspace)),
        approval_policy=AskForApproval.ON_REQUEST,
        permission_profile=workspace_write_profile(),
        approver=user,
    )


def _sh(script: str) -> ShellRequest:
    return ShellRequest(argv=("/bin/sh", "-c", script), env=ENV, timeout=60)


async def _wait_for(path: Path) -> None:
    # The marker is written by the executor's child; there is no event to await.
    async with asyncio.timeout(WAIT_LIMIT):
        while not await asyncio.to_thread(path.exists):  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_invariant_1_route_before_start_no_early_event_is_lost(
    client: ExecServerClient, workspace: Path
) -> None:
    """Many concurrent calls: events that beat the start response still arrive."""
    orchestrator = ToolOrchestrator(_turn(ScriptedUser(), workspace))
    runtime = ShellCommandRuntime(client)
    results = await asyncio.gather(
        *(orchestrator.run(runtime, _sh(f"echo call-{i}")) for i in range(40))
    )
    assert [r.output.stdout for r in results] == [f"call-{i}\n".encode() for i in range(40)]
    assert all(r.output.exit_code == 0 for r in results)


async def test_invariant_3_output_is_ordered_and_exactly_once(
    client: ExecServerClient, workspace: Path
) -> None:
    orchestrator = ToolOrchestrator(_turn(ScriptedUser(), workspace))
    result = await orchestrator.run(ShellCommandRuntime(client), _sh("seq 1 20000"))
    expected = "".join(f"{i}\n" for i in range(1, 20001)).encode()
    assert result.output.stdout == expected


async def test_invariant_4_a_start_on_a_lost_transport_fails_and_is_not_retried(
    any_server: RunningServer, workspace: Path
) -> None:
    user = ScriptedUser()
    client = await ExecServerClient.connect(any_server.url, auto_reconnect=False)
    try:
        connection = client.connection
        assert connection is not None
        connection.abort("test: transport lost")
        with pytest.raises(ExecFailed):
            await ToolOrchestrator(_turn(user, workspace)).run(
                ShellCommandRuntime(client), _sh(f"touch {workspace}/ran")
            )
    finally:
        await client.close()
    assert user.requests == []
    assert not (workspace / "ran").exists()


# Resumes a detached session (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_invariant_4_5_call_survives_a_transport_loss_through_resume(
    client: ExecServerClient, workspace: Path
) -> None:
    """The connection drops while the command runs: the client resumes the same
    session, reconciles with process/read, and the call returns its whole
    output exactly once; nothing but reads is re-sent (a re-sent start would
    have been refused as a duplicate processId)."""
    session = client.session_id
    started, go = workspace / "started", workspace / "go"
    confirmed = asyncio.Event()
    call = asyncio.create_task(
        ToolOrchestrator(_turn(ScriptedUser(), workspace)).run(
            ShellCommandRuntime(client, on_started=lambda _: confirmed.set()),
            _sh(
                f"echo before; touch {started}; "
                f"while [ ! -e {go} ]; do sleep 0.02; done; echo after"
            ),
        )
    )
    # Drop the transport only once the start was answered: an unanswered
    # start fails instead (the test above), by design.
    await confirmed.wait()
    await _wait_for(started)
    connection = client.connection
    assert connection is not None
    connection.abort("test: transport lost")
    go.touch()
    result = await call
    assert result.output.stdout == b"before\nafter\n"
    assert result.output.exit_code == 0
    assert len(result.attempts) == 1
    assert client.session_id == session
    assert client.reconnects >= 1


async def test_invariant_12_interrupting_the_call_does_not_kill_the_process(
    client: ExecServerClient, workspace: Path
) -> None:
    """A turn interrupt cancels the waiting call; the orchestrator never
    terminates the executor's process."""
    started, go, finished = workspace / "started", workspace / "go", workspace / "finished"
    call = asyncio.create_task(
        ToolOrchestrator(_turn(ScriptedUser(), workspace)).run(
            ShellCommandRuntime(client),
            _sh(f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done; touch {finished}"),
        )
    )
    await _wait_for(started)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    go.touch()
    await _wait_for(finished)


async def test_invariant_14_network_denial_terminates_the_process_and_ends_once(
    client: ExecServerClient, workspace: Path
) -> None:
    user = ScriptedUser(ReviewDecision.denied("no downloads"))
    service = NetworkApprovalService(
        approver=user, policy=AskForApproval.ON_REQUEST, profile=workspace_write_profile()
    )
    active = service.begin(
        NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, "curl https://example.com"),
        environment_id="executor-1",
        managed_network_active=True,
    )
    assert active is not None
    deferred = service.into_deferred(active)
    proc = await client.start_process(["/bin/sleep", "60"], cwd=str(workspace), env=ENV)
    watcher = deferred.watch(proc.terminate)
    decision = await service.on_proxy_request("executor-1", "example.com", "https", 443)
    assert not decision.allowed
    await watcher
    events = [event async for event in proc]
    exits = [e for e in events if isinstance(e, Exited)]
    assert len(exits) == 1 and exits[0].exit_code != 0
    assert isinstance(events[-1], Closed)
    outcome = await deferred.finish()
    assert outcome is not None and outcome.source is DenialSource.USER
    assert outcome.message == "no downloads"
    assert await deferred.finish() == outcome
    assert not service.is_active(deferred.registration_id)
    assert [r.tool_name for r in user.requests] == ["network"]
