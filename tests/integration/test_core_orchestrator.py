"""The orchestrator against a real exec-server with a real sandbox:
approval, the attempts and their retries, and the sandbox each attempt gets.

Everything is real — server process, sandbox, client, processes — except the
user, who is a scripted approver. Each test runs against our execserver and
the reference ``codex exec-server``.

``test_invariant_N_...``: guarantee N of docs/core-guarantees.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client.connection import ExecServerClient
from execserver.core import TurnContext
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment
from execserver.core.errors import SandboxDenied
from execserver.core.orchestrator import ToolOrchestrator
from execserver.core.permissions import (
    AdditionalPermissions,
    DisabledProfile,
    ExplicitPath,
    FsAccess,
    FsEntry,
    PermissionProfile,
    workspace_write_profile,
)
from execserver.core.policy import AskForApproval, SandboxPermissions
from execserver.core.shell_runtime import ShellCommandRuntime, ShellRequest
from tests.support.approver import ScriptedUser
from tests.support.servers import RunningServer

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as connected:
        yield connected


def _turn(
    user: ScriptedUser,
    policy: AskForApproval,
    workspace: Path,
    profile: PermissionProfile | None = None,
    environment_id: str = "executor-1",
) -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id=environment_id, cwd=str(workspace)),
        approval_policy=policy,
        permission_profile=profile or workspace_write_profile(),
        approver=user,
    )


def _sh(script: str, **kwargs: object) -> ShellRequest:
    return ShellRequest(argv=("/bin/sh", "-c", script), env=ENV, timeout=60, **kwargs)  # type: ignore[arg-type]


async def test_sandbox_denial_under_on_request_is_retried_unsandboxed_after_approval(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """Invariants 2, 6, 9: one denied sandboxed attempt, one approved unsandboxed
    retry with a fresh processId and no sandbox context."""
    user = ScriptedUser(ReviewDecision.APPROVED)
    runtime = ShellCommandRuntime(client, prompt_retry_on_request=True)
    target = outside / "note.txt"
    result = await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST, workspace)).run(
        runtime, _sh(f"echo hello > {target} && cat {target}")
    )
    assert result.output.exit_code == 0
    assert result.output.stdout == b"hello\n"
    assert target.read_text() == "hello\n"
    (prompt,) = user.requests
    assert prompt.retry is True
    assert prompt.reason == "command failed; retry without sandbox?"
    assert prompt.cwd == str(workspace)
    first, second = result.attempts
    assert first.sandbox_requested and not second.sandbox_requested
    assert first.process_id != second.process_id
    assert result.output.process_id == second.process_id
    assert result.output.sandbox_type == "none"


async def test_default_shell_under_on_request_returns_the_denial_without_asking(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """The reference's shell does not offer a retry for a plain fs denial under
    ON_REQUEST; the denial reaches the caller."""
    user = ScriptedUser()
    with pytest.raises(SandboxDenied) as info:
        await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST, workspace)).run(
            ShellCommandRuntime(client), _sh(f"echo hi > {outside}/f")
        )
    assert "Read-only file system" in info.value.output
    assert user.requests == []
    assert not (outside / "f").exists()


async def test_invariant_7_under_never_a_denial_is_not_retried_and_its_text_reaches_the_caller(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    user = ScriptedUser()
    runtime = ShellCommandRuntime(client, prompt_retry_on_request=True)
    with pytest.raises(SandboxDenied) as info:
        await ToolOrchestrator(_turn(user, AskForApproval.NEVER, workspace)).run(
            runtime, _sh(f"echo hi > {outside}/f")
        )
    assert "Read-only file system" in info.value.output
    assert info.value.exit_code not in (None, 0)
    assert user.requests == []
    assert not (outside / "f").exists()


async def test_invariant_10_deny_read_profile_blocks_the_unsandboxed_retry(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    secret = workspace / "secret.txt"
    secret.write_text("top secret\n")
    profile = workspace_write_profile(extra=[FsEntry(ExplicitPath(str(secret)), FsAccess.DENY)])
    user = ScriptedUser(ReviewDecision.APPROVED)
    turn = _turn(user, AskForApproval.UNLESS_TRUSTED, workspace, profile)
    with pytest.raises(SandboxDenied):
        await ToolOrchestrator(turn).run(
            ShellCommandRuntime(client), _sh(f"cat {secret}; echo x > {outside}/f")
        )
    # Asked once, for the call itself; never for a retry without the sandbox.
    assert [r.retry for r in user.requests] == [False]
    assert not (outside / "f").exists()


async def test_invariant_10_escalation_request_under_deny_read_profile_stays_sandboxed(
    client: ExecServerClient, workspace: Path
) -> None:
    secret = workspace / "secret.txt"
    secret.write_text("top secret\n")
    profile = workspace_write_profile(extra=[FsEntry(ExplicitPath(str(secret)), FsAccess.DENY)])
    user = ScriptedUser(ReviewDecision.APPROVED)
    turn = _turn(user, AskForApproval.ON_REQUEST, workspace, profile)
    with pytest.raises(SandboxDenied) as info:
        await ToolOrchestrator(turn).run(
            ShellCommandRuntime(client, prompt_retry_on_request=True),
            _sh(f"cat {secret}", sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED),
        )
    assert "Permission denied" in info.value.output
    assert "top secret" not in info.value.output
    # The escalation was approved, yet the executor still applied the profile.
    assert [r.retry for r in user.requests] == [False]


async def test_invariant_11_session_approval_is_not_asked_again_but_is_for_another_cwd(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    user = ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION, ReviewDecision.APPROVED)
    turn = _turn(user, AskForApproval.UNLESS_TRUSTED, workspace)
    orchestrator = ToolOrchestrator(turn)
    runtime = ShellCommandRuntime(client)
    first = await orchestrator.run(runtime, _sh("pwd"))
    again = await orchestrator.run(runtime, _sh("pwd"))
    assert first.output.stdout == again.output.stdout == f"{workspace}\n".encode()
    assert len(user.requests) == 1
    elsewhere = await orchestrator.run(runtime, _sh("pwd", cwd=str(outside)))
    assert elsewhere.output.stdout == f"{outside}\n".encode()
    assert [r.cwd for r in user.requests] == [str(workspace), str(outside)]


async def test_invariant_11_session_approval_does_not_leak_to_another_executor(
    client: ExecServerClient, workspace: Path
) -> None:
    user = ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION, ReviewDecision.DENIED)
    turn = _turn(user, AskForApproval.UNLESS_TRUSTED, workspace)
    await ToolOrchestrator(turn).run(ShellCommandRuntime(client), _sh("true"))
    other = _turn(user, AskForApproval.UNLESS_TRUSTED, workspace, environment_id="executor-2")
    other.approval_store = turn.approval_store  # same session, another executor
    with pytest.raises(Exception, match="rejected by user"):
        await ToolOrchestrator(other).run(ShellCommandRuntime(client), _sh("true"))
    assert len(user.requests) == 2


async def test_invariant_9_context_sent_iff_sandbox_requested_as_seen_by_the_executor(
    client: ExecServerClient, workspace: Path
) -> None:
    """The executor answers sandboxType linuxSeccomp exactly when a context came."""
    runtime = ShellCommandRuntime(client)
    sandboxed = await ToolOrchestrator(
        _turn(ScriptedUser(), AskForApproval.ON_REQUEST, workspace)
    ).run(runtime, _sh("echo hi > inside.txt"))
    assert sandboxed.attempt.sandbox_requested
    assert sandboxed.output.sandbox_type == "linuxSeccomp"
    assert (workspace / "inside.txt").read_text() == "hi\n"
    escalated = await ToolOrchestrator(
        _turn(ScriptedUser(ReviewDecision.APPROVED), AskForApproval.ON_REQUEST, workspace)
    ).run(runtime, _sh("true", sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED))
    assert not escalated.attempt.sandbox_requested
    assert escalated.output.sandbox_type == "none"
    disabled = await ToolOrchestrator(
        _turn(ScriptedUser(), AskForApproval.ON_REQUEST, workspace, DisabledProfile())
    ).run(runtime, _sh("true"))
    assert disabled.output.sandbox_type == "none"


async def test_invariant_8_approved_call_is_retried_without_a_second_prompt(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """UNLESS_TRUSTED: the call was approved in step 1, so the retry runs
    without asking again."""
    user = ScriptedUser(ReviewDecision.APPROVED)
    result = await ToolOrchestrator(_turn(user, AskForApproval.UNLESS_TRUSTED, workspace)).run(
        ShellCommandRuntime(client), _sh(f"echo hi > {outside}/f")
    )
    assert len(result.attempts) == 2
    assert [r.retry for r in user.requests] == [False]
    assert (outside / "f").read_text() == "hi\n"


async def test_invariant_13_only_the_executor_flag_counts_as_a_denial(
    client: ExecServerClient, workspace: Path
) -> None:
    """Core applies no denial heuristics of its own to a remote process: an
    unsandboxed failure whose text looks like a denial, and a sandboxed plain
    failure, are ordinary results (the executor did not flag them)."""
    user = ScriptedUser()
    runtime = ShellCommandRuntime(client, prompt_retry_on_request=True)
    lookalike = await ToolOrchestrator(
        _turn(user, AskForApproval.ON_REQUEST, workspace, DisabledProfile())
    ).run(runtime, _sh("echo 'Operation not permitted: sandbox landlock seccomp' >&2; exit 1"))
    assert lookalike.output.exit_code == 1
    assert b"Operation not permitted" in lookalike.output.stderr
    plain = await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST, workspace)).run(
        runtime, _sh("exit 3")
    )
    assert plain.attempt.sandbox_requested
    assert plain.output.exit_code == 3
    assert len(lookalike.attempts) == len(plain.attempts) == 1
    assert user.requests == []


async def test_additional_permissions_widen_the_sandbox_after_approval(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """with_additional_permissions runs sandboxed with the profile widened; a
    grant from earlier in the session makes the prompt unnecessary."""
    extra = AdditionalPermissions(write=(str(outside),))
    request = _sh(
        f"echo widened > {outside}/w && cat {outside}/w",
        sandbox_permissions=SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS,
        additional_permissions=extra,
    )
    user = ScriptedUser(ReviewDecision.APPROVED)
    asked = await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST, workspace)).run(
        ShellCommandRuntime(client), request
    )
    assert asked.output.stdout == b"widened\n"
    assert asked.attempt.sandbox_requested and asked.output.sandbox_type == "linuxSeccomp"
    assert len(user.requests) == 1
    assert user.requests[0].additional_permissions == extra
    granted = _turn(user, AskForApproval.ON_REQUEST, workspace)
    granted.granted_permissions = extra
    again = await ToolOrchestrator(granted).run(ShellCommandRuntime(client), request)
    assert again.output.exit_code == 0
    assert again.output.sandbox_type == "linuxSeccomp"
    assert len(user.requests) == 1


async def test_without_the_widening_the_same_write_is_denied(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """The control for the test above: additional permissions only count
    together with with_additional_permissions."""
    request = _sh(
        f"echo widened > {outside}/w",
        additional_permissions=AdditionalPermissions(write=(str(outside),)),
    )
    with pytest.raises(SandboxDenied):
        await ToolOrchestrator(_turn(ScriptedUser(), AskForApproval.ON_REQUEST, workspace)).run(
            ShellCommandRuntime(client), request
        )
