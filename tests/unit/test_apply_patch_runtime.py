"""The apply_patch runtime's policy surface (cases ported from
the Codex runtime tests)."""

from __future__ import annotations

import errno

import pytest

from execserver.client.connection import ExecServerClient
from execserver.client.transport import Transport
from execserver.core.apply_patch.delta import AddChange, AppliedPatchDelta, DeleteChange
from execserver.core.apply_patch.fs import os_error_text
from execserver.core.apply_patch.parser import parse_patch
from execserver.core.apply_patch.runtime import (
    APPLY_PATCH_HOOK_NAMES,
    ApplyPatchRequest,
    ApplyPatchRuntime,
    is_likely_patch_denial,
)
from execserver.core.apply_patch.safety import OUTSIDE_WRITABLE_ROOTS, patch_approval_requirement
from execserver.core.approval_cache import PatchApprovalKey
from execserver.core.approvals import ApprovalRequest
from execserver.core.attempt import first_attempt, sandbox_context
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment
from execserver.core.permissions import (
    DisabledProfile,
    ExplicitPath,
    FsAccess,
    FsEntry,
    read_only_profile,
    workspace_write_profile,
)
from execserver.core.policy import (
    AskForApproval,
    Forbidden,
    GranularApprovalConfig,
    NeedsApproval,
    SandboxablePreference,
    SandboxOverride,
    Skip,
)
from execserver.core.runtime import ApprovalContext, TurnContext

PATCH = (
    "*** Begin Patch\n*** Add File: new.txt\n+x\n"
    "*** Update File: src/a.py\n*** Move to: src/b.py\n@@\n-a\n+b\n"
    "*** Delete File: /abs/old.txt\n*** End Patch"
)


async def _never_opened() -> Transport:
    raise AssertionError("these tests never talk to an executor")


def _runtime() -> ApplyPatchRuntime:
    return ApplyPatchRuntime(ExecServerClient(_never_opened).fs)


async def _no_user(request: ApprovalRequest) -> ReviewDecision:
    raise AssertionError("no prompt expected")


def _turn(env_id: str = "exec-1", cwd: str = "/w") -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id=env_id, cwd=cwd),
        approval_policy=AskForApproval.ON_REQUEST,
        permission_profile=workspace_write_profile(),
        approver=_no_user,
    )


def _req(cwd: str = "/w") -> ApplyPatchRequest:
    return ApplyPatchRequest(parse_patch(PATCH), cwd)


def test_approval_keys_include_environment_id() -> None:
    runtime = _runtime()
    keys = runtime.approval_keys(_req(), _turn("exec-1"))
    assert keys == [
        PatchApprovalKey("exec-1", "/w/new.txt"),
        PatchApprovalKey("exec-1", "/w/src/a.py"),
        PatchApprovalKey("exec-1", "/w/src/b.py"),
        PatchApprovalKey("exec-1", "/abs/old.txt"),
    ]
    assert runtime.approval_keys(_req(), _turn("exec-2")) != keys


def test_permission_request_payload_uses_apply_patch_hook_name_and_aliases() -> None:
    request = _runtime().approval_request(_req(), _turn(), ApprovalContext(reason="why"))
    assert request.tool_name == "apply_patch"
    assert request.hook_names == APPLY_PATCH_HOOK_NAMES == ("apply_patch", "Write", "Edit")
    assert request.reason == "why"
    assert request.details["patch"] == PATCH


def test_sandbox_cwd_uses_patch_action_cwd() -> None:
    assert _runtime().sandbox_cwd(_req("/w/sub"), _turn()) == "/w/sub"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (AskForApproval.NEVER, False),
        (AskForApproval.ON_REQUEST, True),
        (AskForApproval.UNLESS_TRUSTED, True),
        (AskForApproval.granular(GranularApprovalConfig(sandbox_approval=True)), True),
        (AskForApproval.granular(GranularApprovalConfig(sandbox_approval=False)), False),
    ],
)
def test_wants_no_sandbox_approval_granular_respects_sandbox_flag(
    policy: AskForApproval, expected: bool
) -> None:
    assert _runtime().wants_no_sandbox_approval(policy) is expected


@pytest.mark.parametrize(
    ("requested_override", "has_context"),
    [(SandboxOverride.NO_OVERRIDE, True), (SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT, False)],
)
def test_file_system_sandbox_context_respects_sandbox_request(
    requested_override: SandboxOverride, has_context: bool
) -> None:
    attempt = first_attempt(
        environment=ExecutionEnvironment(environment_id="e", cwd="/w"),
        profile=workspace_write_profile(),
        preference=SandboxablePreference.AUTO,
        override=requested_override,
        managed_network=None,
        process_id_base="apply_patch",
        sandbox_cwd="/w/sub",
    )
    assert (sandbox_context(attempt) is not None) is has_context
    # Unsandboxed although the profile would sandbox: symlinks must not be followed.
    assert attempt.follow_symlinks is has_context


def test_denial_keywords_classify_a_failed_sandboxed_attempt() -> None:
    assert is_likely_patch_denial("Failed to write file /x/y\n")
    assert is_likely_patch_denial("Read-only file system (os error 30)")
    assert not is_likely_patch_denial("Failed to find expected lines in /x:\nfoo")
    assert not is_likely_patch_denial("Failed to remove original /x")


@pytest.mark.parametrize(
    ("policy", "paths", "expected"),
    [
        (AskForApproval.ON_REQUEST, ["/w/a"], Skip()),
        (AskForApproval.ON_REQUEST, ["/w/a", "/elsewhere/b"], NeedsApproval()),
        (AskForApproval.UNLESS_TRUSTED, ["/w/a"], NeedsApproval()),
        (AskForApproval.NEVER, ["/w/a"], Skip()),
        (AskForApproval.NEVER, ["/elsewhere/b"], Forbidden(OUTSIDE_WRITABLE_ROOTS)),
        (
            AskForApproval.granular(GranularApprovalConfig(sandbox_approval=False)),
            ["/elsewhere/b"],
            Forbidden(OUTSIDE_WRITABLE_ROOTS),
        ),
    ],
)
def test_patch_safety_requirement(
    policy: AskForApproval, paths: list[str], expected: object
) -> None:
    assert patch_approval_requirement(policy, workspace_write_profile(), paths, ["/w"]) == expected


def test_safety_respects_deny_entries_and_unrestricted_profiles() -> None:
    deny = workspace_write_profile(extra=[FsEntry(ExplicitPath("/w/secret"), FsAccess.DENY)])
    on_request = AskForApproval.ON_REQUEST
    assert patch_approval_requirement(on_request, deny, ["/w/secret/x"], ["/w"]) == NeedsApproval()
    assert patch_approval_requirement(on_request, read_only_profile(), ["/w/a"], ["/w"]) == (
        NeedsApproval()
    )
    assert patch_approval_requirement(on_request, DisabledProfile(), ["/any"], ["/w"]) == Skip()


def test_delta_append_accumulates_changes_and_exactness() -> None:
    committed = AppliedPatchDelta()
    first = AppliedPatchDelta()
    first.record("/w/a", AddChange("a\n"))
    second = AppliedPatchDelta(exact=False)
    second.record("/w/b", DeleteChange("b\n"))
    committed.append(first)
    committed.append(second)
    assert [c.path for c in committed.changes] == ["/w/a", "/w/b"]
    assert committed.exact is False


def test_os_errors_are_worded_like_the_reference() -> None:
    assert os_error_text(FileNotFoundError(errno.ENOENT, "No such file or directory", "/x")) == (
        "No such file or directory (os error 2)"
    )
    assert os_error_text(OSError(errno.EROFS, "Read-only file system", "/x")) == (
        "Read-only file system (os error 30)"
    )
    # An executor refusal without an OS error behind it keeps the executor's words.
    assert os_error_text(OSError(errno.EINVAL, "path contains a symbolic link", "/x")) == (
        "path contains a symbolic link"
    )
