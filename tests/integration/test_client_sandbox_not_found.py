"""A program that does not exist, started under a sandbox.

Both servers answer such a start the same way: the sandbox launcher cannot
exec the program and exits 101 with ``sandboxDenied: true``. That wire answer
stays; the client and the core must not take it for a denial: ``run`` raises
``CommandNotFound`` and the orchestrator never offers "retry without sandbox?"
for it, while a real denial keeps its flag."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import CommandNotFound, ExecServerClient, Sandbox
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment
from execserver.core.errors import ExecFailed, SandboxDenied
from execserver.core.orchestrator import ToolOrchestrator
from execserver.core.permissions import workspace_write_profile
from execserver.core.policy import AskForApproval
from execserver.core.runtime import TurnContext
from execserver.core.shell_runtime import ShellCommandRuntime, ShellRequest
from tests.support.approver import ScriptedUser
from tests.support.servers import RunningServer, start_server


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


async def test_missing_program_on_path_under_a_sandbox_raises_command_not_found(
    client: ExecServerClient, workspace: Path
) -> None:
    with pytest.raises(CommandNotFound) as info:
        await client.run(
            ["no-such-tool-7f3a"], cwd=workspace, sandbox=Sandbox.workspace_write(workspace)
        )
    assert info.value.program == "no-such-tool-7f3a"


async def test_missing_program_by_path_under_a_sandbox_raises_command_not_found(
    client: ExecServerClient, workspace: Path
) -> None:
    with pytest.raises(CommandNotFound):
        await client.run(["./bin/no-such-tool"], cwd=workspace, sandbox=Sandbox.read_only())


async def test_missing_program_on_the_requests_own_path_raises_command_not_found(
    client: ExecServerClient, workspace: Path
) -> None:
    """The lookup uses the child's PATH (the env overlay here), not the executor's:
    ``true`` exists in /bin, but not in the only directory the request names."""
    with pytest.raises(CommandNotFound):
        await client.run(
            ["true"],
            cwd=workspace,
            env={"PATH": str(workspace)},
            sandbox=Sandbox.workspace_write(workspace),
        )


async def test_an_existing_program_the_sandbox_hides_stays_a_denial(
    client: ExecServerClient, workspace: Path
) -> None:
    """A program under a deny_read path exists: its failed exec is the sandbox's doing."""
    hidden = workspace / "hidden"
    hidden.mkdir()
    shutil.copy("/bin/true", hidden / "tool")
    sandbox = Sandbox.workspace_write(workspace, deny_read=[hidden])
    result = await client.run([str(hidden / "tool")], cwd=workspace, sandbox=sandbox)
    assert result.exit_code != 0
    assert result.sandbox_denied


async def test_the_orchestrator_never_offers_escalation_for_a_missing_program(
    client: ExecServerClient, workspace: Path
) -> None:
    user = ScriptedUser(ReviewDecision.APPROVED)
    turn = TurnContext(
        environment=ExecutionEnvironment(environment_id="executor-1", cwd=str(workspace)),
        approval_policy=AskForApproval.ON_REQUEST,
        permission_profile=workspace_write_profile(),
        approver=user,
    )
    runtime = ShellCommandRuntime(client, prompt_retry_on_request=True)
    request = ShellRequest(
        argv=("no-such-tool-7f3a", "--version"),
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        timeout=60,
    )
    with pytest.raises(ExecFailed) as info:
        await ToolOrchestrator(turn).run(runtime, request)
    assert not isinstance(info.value, SandboxDenied)
    assert isinstance(info.value.__cause__, CommandNotFound)
    assert "no-such-tool-7f3a" in info.value.message
    assert user.requests == []


async def test_the_daemon_log_names_the_requested_program(tmp_path: Path, workspace: Path) -> None:
    log_file = tmp_path / "daemon.log"
    with log_file.open("wb") as sink:
        async with (
            start_server("execserver", ["--log-level", "INFO"], stderr=sink) as server,
            await ExecServerClient.connect(server.url) as c,
        ):
            await c.run(["true"], cwd=workspace, sandbox=Sandbox.workspace_write(workspace))
    closed = [line for line in log_file.read_text().splitlines() if " closed: exit=" in line]
    assert closed, log_file.read_text()
    assert "program=true " in closed[-1], closed[-1]
