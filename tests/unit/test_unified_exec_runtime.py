"""The unified-exec runtime's keys, requirement and process/start params
(cases ported from the Codex runtime tests)."""

from __future__ import annotations

import msgspec

from execserver.client.connection import ExecServerClient
from execserver.client.transport import Transport
from execserver.core.approvals import ApprovalRequest
from execserver.core.attempt import SandboxAttempt, first_attempt
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment
from execserver.core.permissions import workspace_write_profile
from execserver.core.policy import (
    AskForApproval,
    NeedsApproval,
    SandboxablePreference,
    SandboxOverride,
    SandboxPermissions,
    Skip,
)
from execserver.core.runtime import ApprovalContext, TurnContext
from execserver.core.unified_exec.env import UNIFIED_EXEC_ENV
from execserver.core.unified_exec.runtime import UnifiedExecRequest, UnifiedExecRuntime
from execserver.wire.process import ExecEnvPolicy


async def _never_opened() -> Transport:
    raise AssertionError("these tests never talk to an executor")


async def _no_user(request: ApprovalRequest) -> ReviewDecision:
    raise AssertionError("no prompt expected")


RUNTIME = UnifiedExecRuntime(ExecServerClient(_never_opened))


def _turn(
    env_id: str = "exec-1", policy: AskForApproval = AskForApproval.ON_REQUEST
) -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id=env_id, cwd="/w"),
        approval_policy=policy,
        permission_profile=workspace_write_profile(),
        approver=_no_user,
    )


def _req(**kwargs: object) -> UnifiedExecRequest:
    base: dict[str, object] = {
        "process_id": 4321,
        "command": "ls",
        "argv": ("/bin/bash", "-lc", "ls"),
        "cwd": "/w/sub",
    }
    base.update(kwargs)
    return UnifiedExecRequest(**base)  # type: ignore[arg-type]


def _attempt(override: SandboxOverride = SandboxOverride.NO_OVERRIDE) -> SandboxAttempt:
    return first_attempt(
        environment=ExecutionEnvironment(environment_id="exec-1", cwd="/w"),
        profile=workspace_write_profile(),
        preference=SandboxablePreference.AUTO,
        override=override,
        managed_network=None,
        process_id_base=RUNTIME.process_id_base(_req()),
    )


def test_approval_key_includes_environment_id() -> None:
    (one,) = RUNTIME.approval_keys(_req(), _turn("exec-1"))
    (two,) = RUNTIME.approval_keys(_req(), _turn("exec-2"))
    assert one != two
    assert one.to_json()["environment_id"] == "exec-1"
    assert one.to_json()["cwd"] == "/w/sub"
    (tty,) = RUNTIME.approval_keys(_req(tty=True), _turn("exec-1"))
    assert tty != one


def test_unified_exec_uses_the_trusted_sandbox_cwd() -> None:
    """The model's workdir is not the policy cwd: the turn's is."""
    assert RUNTIME.sandbox_cwd(_req(cwd="/w/model-chosen"), _turn()) is None
    assert _attempt().sandbox_cwd == "/w"


def test_exec_server_params_use_path_uri_and_env_policy_overlay_contract() -> None:
    policy = ExecEnvPolicy(
        inherit="core", ignore_default_excludes=True, exclude=["SECRET"], set={}, include_only=[]
    )
    params = RUNTIME.start_params(_req(env_policy=policy, tty=True), _attempt())
    assert params.cwd == "file:///w/sub"
    assert params.argv == ["/bin/bash", "-lc", "ls"]
    assert params.env_policy == policy
    assert params.tty is True and params.pipe_stdin is False
    assert params.process_id.startswith("4321-") and params.process_id != "4321"
    assert msgspec.json.decode(params.sandbox) is not None  # sandboxed first attempt


def test_env_overlay_for_exec_server_keeps_runtime_changes_only() -> None:
    params = RUNTIME.start_params(_req(env={"EXTRA": "1"}), _attempt())
    assert params.env == {"EXTRA": "1", **UNIFIED_EXEC_ENV}


def test_unsandboxed_attempt_sends_no_sandbox_context() -> None:
    params = RUNTIME.start_params(_req(), _attempt(SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT))
    assert msgspec.json.decode(params.sandbox) is None


def test_requirement_from_the_unmatched_command_heuristics() -> None:
    turn = _turn()
    assert RUNTIME.exec_approval_requirement(_req(), turn) == Skip()
    assert (
        RUNTIME.exec_approval_requirement(
            _req(sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED), turn
        )
        == NeedsApproval()
    )
    dangerous = _req(command="rm -rf /tmp/x", argv=("/bin/bash", "-lc", "rm -rf /tmp/x"))
    assert isinstance(RUNTIME.exec_approval_requirement(dangerous, turn), NeedsApproval)
    verdict = Skip(bypass_sandbox=True)
    assert RUNTIME.exec_approval_requirement(_req(requirement=verdict), turn) is verdict


def test_approval_request_shows_the_command_and_reason() -> None:
    request = RUNTIME.approval_request(
        _req(justification="needs network"), _turn(), ApprovalContext(retry=True)
    )
    assert request.command == ("/bin/bash", "-lc", "ls")
    assert request.reason == "needs network"
    assert request.retry is True
    assert request.hook_names == ("Bash",)
