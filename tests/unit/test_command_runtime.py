"""The shell and unified-exec runtimes share one approval logic (CommandRuntime).

In particular both judge a ``with_additional_permissions`` call whose
permissions were all granted earlier in the session as if it asked for
nothing, as the reference does for both tools; unified exec used to skip that
and prompted (or refused) where the shell ran the command.
"""

from __future__ import annotations

from typing import Any

import pytest

from execserver.client.connection import ExecServerClient
from execserver.client.transport import Transport
from execserver.core.approvals import ApprovalRequest
from execserver.core.command_runtime import (
    CommandRuntime,
    additional_permissions_preapproved,
)
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.network_approval import NetworkApprovalMode
from execserver.core.permissions import AdditionalPermissions, workspace_write_profile
from execserver.core.policy import AskForApproval, NeedsApproval, SandboxPermissions, Skip
from execserver.core.runtime import ApprovalContext, TurnContext
from execserver.core.shell_runtime import ShellCommandRuntime, ShellRequest
from execserver.core.unified_exec.runtime import UnifiedExecRequest, UnifiedExecRuntime

WIDEN = SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS
EXTRA = AdditionalPermissions(write=("/data/out",))


async def _never_opened() -> Transport:
    raise AssertionError("these tests never talk to an executor")


async def _no_user(request: ApprovalRequest) -> ReviewDecision:
    raise AssertionError("no prompt expected")


CLIENT = ExecServerClient(_never_opened)
SHELL = ShellCommandRuntime(CLIENT)
UNIFIED = UnifiedExecRuntime(CLIENT)


def _shell(**fields: Any) -> ShellRequest:
    return ShellRequest(argv=("/bin/bash", "-c", "touch /data/out/x"), **fields)


def _unified(**fields: Any) -> UnifiedExecRequest:
    return UnifiedExecRequest(
        process_id=1000,
        command="touch /data/out/x",
        argv=("/bin/bash", "-c", "touch /data/out/x"),
        cwd="/w",
        **fields,
    )


RUNTIMES: list[tuple[CommandRuntime[Any, Any], Any]] = [(SHELL, _shell), (UNIFIED, _unified)]
IDS = ["shell", "unified_exec"]


def _turn(
    granted: AdditionalPermissions | None = None,
    policy: AskForApproval = AskForApproval.ON_REQUEST,
    managed_network: ManagedNetwork | None = None,
) -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id="exec-1", cwd="/w"),
        approval_policy=policy,
        permission_profile=workspace_write_profile(),
        approver=_no_user,
        granted_permissions=granted,
        managed_network=managed_network,
    )


@pytest.mark.parametrize(("runtime", "request_of"), RUNTIMES, ids=IDS)
def test_additional_permissions_granted_earlier_need_no_prompt(
    runtime: CommandRuntime[Any, Any], request_of: Any
) -> None:
    req = request_of(sandbox_permissions=WIDEN, additional_permissions=EXTRA)
    assert runtime.exec_approval_requirement(req, _turn(granted=EXTRA)) == Skip()
    # ...and the call still runs widened.
    assert runtime.additional_permissions(req) == EXTRA


@pytest.mark.parametrize(("runtime", "request_of"), RUNTIMES, ids=IDS)
def test_additional_permissions_not_granted_need_a_prompt(
    runtime: CommandRuntime[Any, Any], request_of: Any
) -> None:
    req = request_of(sandbox_permissions=WIDEN, additional_permissions=EXTRA)
    other = AdditionalPermissions(write=("/elsewhere",))
    assert isinstance(runtime.exec_approval_requirement(req, _turn()), NeedsApproval)
    assert isinstance(runtime.exec_approval_requirement(req, _turn(granted=other)), NeedsApproval)


def test_nothing_is_preapproved_before_anything_was_granted() -> None:
    assert not additional_permissions_preapproved(WIDEN, None, None)
    assert not additional_permissions_preapproved(WIDEN, AdditionalPermissions(), None)
    assert additional_permissions_preapproved(WIDEN, None, EXTRA)
    assert additional_permissions_preapproved(WIDEN, EXTRA, EXTRA)


@pytest.mark.parametrize(("runtime", "request_of"), RUNTIMES, ids=IDS)
def test_an_escalation_is_never_preapproved_by_earlier_grants(
    runtime: CommandRuntime[Any, Any], request_of: Any
) -> None:
    req = request_of(
        sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED, additional_permissions=EXTRA
    )
    assert isinstance(runtime.exec_approval_requirement(req, _turn(granted=EXTRA)), NeedsApproval)
    assert not additional_permissions_preapproved(
        SandboxPermissions.REQUIRE_ESCALATED, EXTRA, EXTRA
    )


@pytest.mark.parametrize(("runtime", "request_of"), RUNTIMES, ids=IDS)
def test_additional_permissions_without_the_override_widen_nothing(
    runtime: CommandRuntime[Any, Any], request_of: Any
) -> None:
    req = request_of(additional_permissions=EXTRA)  # sandbox_permissions: use_default
    assert runtime.additional_permissions(req) is None
    assert runtime.exec_approval_requirement(req, _turn()) == Skip()


@pytest.mark.parametrize(("runtime", "request_of"), RUNTIMES, ids=IDS)
def test_the_prompt_and_key_carry_the_same_request(
    runtime: CommandRuntime[Any, Any], request_of: Any
) -> None:
    req = request_of(
        sandbox_permissions=WIDEN, additional_permissions=EXTRA, justification="write output"
    )
    prompt = runtime.approval_request(req, _turn(), ApprovalContext())
    assert prompt.command == req.argv
    assert prompt.cwd == "/w"
    assert prompt.reason == "write output"
    assert prompt.additional_permissions == EXTRA
    (key,) = runtime.approval_keys(req, _turn())
    assert key.to_json()["cwd"] == "/w"


def test_what_differs_between_the_runtimes_is_named() -> None:
    network = ManagedNetwork()
    shell_spec = SHELL.network_approval_spec(_shell(), _turn(managed_network=network))
    unified_spec = UNIFIED.network_approval_spec(_unified(), _turn(managed_network=network))
    assert shell_spec is not None and shell_spec.mode is NetworkApprovalMode.IMMEDIATE
    assert unified_spec is not None and unified_spec.mode is NetworkApprovalMode.DEFERRED
    assert unified_spec.command == "touch /data/out/x"
    # Only unified exec has a tty, and it is part of the approval key.
    (plain,) = UNIFIED.approval_keys(_unified(), _turn())
    (tty,) = UNIFIED.approval_keys(_unified(tty=True), _turn())
    assert plain != tty
    # The shell shows its justification as the prompt's description too.
    shell_prompt = SHELL.approval_request(_shell(justification="why"), _turn(), ApprovalContext())
    unified_prompt = UNIFIED.approval_request(
        _unified(justification="why"), _turn(), ApprovalContext()
    )
    assert shell_prompt.description == "why"
    assert unified_prompt.description is None


def test_unified_exec_judges_the_models_command_not_the_shell_wrapper() -> None:
    dangerous = UnifiedExecRequest(
        process_id=1, command="rm -rf /w/x", argv=("/bin/bash", "-lc", "rm -rf /w/x"), cwd="/w"
    )
    assert isinstance(UNIFIED.exec_approval_requirement(dangerous, _turn()), NeedsApproval)
