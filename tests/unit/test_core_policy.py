"""Policy types and the requirement rules."""

from __future__ import annotations

import pytest

from execserver.core.exec_policy import (
    RuleDecision,
    is_dangerous_command,
    requirement_from_rule,
    unmatched_command_requirement,
)
from execserver.core.permissions import (
    DisabledProfile,
    ExplicitPath,
    ExternalProfile,
    FsAccess,
    FsEntry,
    GlobPattern,
    ManagedProfile,
    NetworkAccess,
    PermissionProfile,
    UnrestrictedFs,
    read_only_profile,
    workspace_write_profile,
)
from execserver.core.policy import (
    ApprovalMode,
    AskForApproval,
    ExecApprovalRequirement,
    Forbidden,
    GranularApprovalConfig,
    NeedsApproval,
    SandboxOverride,
    SandboxPermissions,
    Skip,
    default_exec_approval_requirement,
    override_request_rejection,
    prompt_rejection_reason,
    sandbox_override_for_first_attempt,
)

GRANULAR_ON = AskForApproval.granular(GranularApprovalConfig(sandbox_approval=True, rules=True))
GRANULAR_OFF = AskForApproval.granular(GranularApprovalConfig(sandbox_approval=False, rules=True))
RESTRICTED = workspace_write_profile()
UNRESTRICTED = ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED)
EXTERNAL = ExternalProfile(NetworkAccess.RESTRICTED)
DENY_READ = workspace_write_profile(extra=[FsEntry(ExplicitPath("/secret"), FsAccess.DENY)])


# --------------------------------------------------------------------------- AskForApproval
@pytest.mark.parametrize(
    ("wire", "mode"),
    [
        ("untrusted", ApprovalMode.UNLESS_TRUSTED),
        ("on-request", ApprovalMode.ON_REQUEST),
        ("never", ApprovalMode.NEVER),
    ],
)
def test_ask_for_approval_round_trips_simple_modes(wire: str, mode: ApprovalMode) -> None:
    policy = AskForApproval.from_wire(wire)
    assert policy.mode is mode
    assert policy.to_wire() == wire


def test_on_failure_is_read_as_on_request_alias() -> None:
    policy = AskForApproval.from_wire("on-failure")
    assert policy == AskForApproval.ON_REQUEST
    assert policy.to_wire() == "on-request"


def test_granular_round_trips_and_missing_flags_are_false() -> None:
    policy = AskForApproval.from_wire({"granular": {"sandbox_approval": True, "rules": False}})
    assert policy.mode is ApprovalMode.GRANULAR
    assert policy.config == GranularApprovalConfig(sandbox_approval=True)
    assert AskForApproval.from_wire(policy.to_wire()) == policy


@pytest.mark.parametrize("bad", ["on_request", "granular", {"granular": 1}, {"x": {}}, 3])
def test_unknown_approval_policies_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        AskForApproval.from_wire(bad)


def test_granular_mode_requires_config_and_only_granular_has_one() -> None:
    with pytest.raises(ValueError):
        AskForApproval(ApprovalMode.GRANULAR)
    with pytest.raises(ValueError):
        AskForApproval(ApprovalMode.NEVER, GranularApprovalConfig())


# --------------------------------------------------------------------------- SandboxPermissions
@pytest.mark.parametrize(
    ("value", "override", "escalated"),
    [
        (SandboxPermissions.USE_DEFAULT, False, False),
        (SandboxPermissions.REQUIRE_ESCALATED, True, True),
        (SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS, True, False),
    ],
)
def test_sandbox_permissions_helpers(
    value: SandboxPermissions, override: bool, escalated: bool
) -> None:
    assert value.requests_sandbox_override() is override
    assert value.requires_escalated() is escalated
    assert SandboxPermissions(value.value) is value


# ------------------------------------------------------- requirement without an exec-policy verdict
@pytest.mark.parametrize(
    ("policy", "profile", "expected"),
    [
        (AskForApproval.NEVER, RESTRICTED, Skip()),
        (AskForApproval.NEVER, UNRESTRICTED, Skip()),
        (AskForApproval.NEVER, EXTERNAL, Skip()),
        (AskForApproval.ON_REQUEST, RESTRICTED, NeedsApproval()),
        (AskForApproval.ON_REQUEST, UNRESTRICTED, Skip()),
        (AskForApproval.ON_REQUEST, EXTERNAL, Skip()),
        (AskForApproval.ON_REQUEST, DisabledProfile(), Skip()),
        (GRANULAR_ON, RESTRICTED, NeedsApproval()),
        (GRANULAR_ON, UNRESTRICTED, Skip()),
        (GRANULAR_OFF, RESTRICTED, Forbidden("approval policy disallowed sandbox approval prompt")),
        (GRANULAR_OFF, EXTERNAL, Skip()),
        (AskForApproval.UNLESS_TRUSTED, RESTRICTED, NeedsApproval()),
        (AskForApproval.UNLESS_TRUSTED, UNRESTRICTED, NeedsApproval()),
        (AskForApproval.UNLESS_TRUSTED, EXTERNAL, NeedsApproval()),
    ],
)
def test_default_exec_approval_requirement_table(
    policy: AskForApproval, profile: PermissionProfile, expected: ExecApprovalRequirement
) -> None:
    assert default_exec_approval_requirement(policy, profile) == expected


def test_external_sandbox_skips_exec_approval_on_request() -> None:
    assert default_exec_approval_requirement(AskForApproval.ON_REQUEST, EXTERNAL) == Skip()


def test_restricted_sandbox_requires_exec_approval_on_request() -> None:
    requirement = default_exec_approval_requirement(AskForApproval.ON_REQUEST, read_only_profile())
    assert isinstance(requirement, NeedsApproval)


def test_default_exec_approval_requirement_rejects_sandbox_prompt_when_granular_disables_it() -> (
    None
):
    requirement = default_exec_approval_requirement(GRANULAR_OFF, RESTRICTED)
    assert requirement == Forbidden("approval policy disallowed sandbox approval prompt")


def test_default_exec_approval_requirement_keeps_prompt_when_granular_allows_sandbox_approval() -> (
    None
):
    assert isinstance(default_exec_approval_requirement(GRANULAR_ON, RESTRICTED), NeedsApproval)


# ------------------------------------------------------------ deny-read profiles are never bypassed
def test_additional_permissions_allow_bypass_sandbox_first_attempt_when_execpolicy_skips() -> None:
    override = sandbox_override_for_first_attempt(
        SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS, Skip(bypass_sandbox=True), RESTRICTED
    )
    assert override is SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT


def test_additional_permissions_alone_do_not_bypass_the_sandbox() -> None:
    override = sandbox_override_for_first_attempt(
        SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS, NeedsApproval(), RESTRICTED
    )
    assert override is SandboxOverride.NO_OVERRIDE


def test_guardian_bypasses_sandbox_for_explicit_escalation_on_first_attempt() -> None:
    override = sandbox_override_for_first_attempt(
        SandboxPermissions.REQUIRE_ESCALATED, NeedsApproval(), RESTRICTED
    )
    assert override is SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT


@pytest.mark.parametrize(
    ("permissions", "requirement"),
    [
        (SandboxPermissions.REQUIRE_ESCALATED, NeedsApproval()),
        (SandboxPermissions.USE_DEFAULT, Skip(bypass_sandbox=True)),
        (SandboxPermissions.REQUIRE_ESCALATED, Skip(bypass_sandbox=True)),
    ],
)
def test_deny_read_blocks_explicit_escalation_and_policy_bypass(
    permissions: SandboxPermissions, requirement: ExecApprovalRequirement
) -> None:
    """Invariant 10: a deny-read profile is never bypassed on the first attempt."""
    assert sandbox_override_for_first_attempt(permissions, requirement, DENY_READ) is (
        SandboxOverride.NO_OVERRIDE
    )


def test_deny_read_glob_counts_as_deny_read_for_the_first_attempt() -> None:
    """Invariant 10 with a glob deny entry."""
    profile = workspace_write_profile(extra=[FsEntry(GlobPattern("**/*.env"), FsAccess.DENY)])
    override = sandbox_override_for_first_attempt(
        SandboxPermissions.REQUIRE_ESCALATED, NeedsApproval(), profile
    )
    assert override is SandboxOverride.NO_OVERRIDE


# --------------------------------------------------------------------------- handler gate
@pytest.mark.parametrize(
    ("policy", "name"),
    [
        (AskForApproval.NEVER, "Never"),
        (AskForApproval.UNLESS_TRUSTED, "UnlessTrusted"),
        (GRANULAR_ON, None),
    ],
)
def test_override_requests_are_refused_unless_on_request(
    policy: AskForApproval, name: str | None
) -> None:
    message = override_request_rejection(policy, SandboxPermissions.REQUIRE_ESCALATED)
    assert message is not None
    debug = name or policy.debug()
    assert message == (
        f"approval policy is {debug}; reject command — you cannot ask for escalated "
        f"permissions if the approval policy is {debug}"
    )


def test_override_requests_pass_the_gate_under_on_request_or_when_preapproved() -> None:
    assert (
        override_request_rejection(AskForApproval.ON_REQUEST, SandboxPermissions.REQUIRE_ESCALATED)
        is None
    )
    assert (
        override_request_rejection(
            AskForApproval.NEVER,
            SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS,
            additional_permissions_preapproved=True,
        )
        is None
    )
    assert override_request_rejection(AskForApproval.NEVER, SandboxPermissions.USE_DEFAULT) is None


def test_granular_debug_spelling() -> None:
    assert GRANULAR_OFF.debug() == (
        "Granular(GranularApprovalConfig { sandbox_approval: false, rules: true, "
        "skill_approval: false, request_permissions: false, mcp_elicitations: false })"
    )


# --------------------------------------------------------------------- prompt-rejection conversions
@pytest.mark.parametrize(
    ("policy", "from_rule", "expected"),
    [
        (
            AskForApproval.NEVER,
            False,
            "approval required by policy, but AskForApproval is set to Never",
        ),
        (
            AskForApproval.NEVER,
            True,
            "approval required by policy, but AskForApproval is set to Never",
        ),
        (
            GRANULAR_OFF,
            False,
            "approval required by policy, but AskForApproval::Granular.sandbox_approval is false",
        ),
        (GRANULAR_OFF, True, None),
        (
            AskForApproval.granular(GranularApprovalConfig(sandbox_approval=True, rules=False)),
            True,
            "approval required by policy rule, but AskForApproval::Granular.rules is false",
        ),
        (AskForApproval.ON_REQUEST, False, None),
        (AskForApproval.UNLESS_TRUSTED, True, None),
    ],
)
def test_prompt_rejection_reasons(
    policy: AskForApproval, from_rule: bool, expected: str | None
) -> None:
    assert prompt_rejection_reason(policy, from_rule=from_rule) == expected


# --------------------------------------------------------------------------- heuristics table
NEVER_TEXT = "approval required by policy, but AskForApproval is set to Never"
NV, OR, UT = AskForApproval.NEVER, AskForApproval.ON_REQUEST, AskForApproval.UNLESS_TRUSTED
DEF = SandboxPermissions.USE_DEFAULT
ESC = SandboxPermissions.REQUIRE_ESCALATED
ADD = SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS


@pytest.mark.parametrize(
    ("policy", "profile", "permissions", "dangerous", "expected"),
    [
        # dangerous command
        (NV, RESTRICTED, DEF, True, Forbidden(NEVER_TEXT)),
        (OR, RESTRICTED, DEF, True, NeedsApproval()),
        (UT, RESTRICTED, DEF, True, NeedsApproval()),
        # unrestricted / external profile
        (NV, UNRESTRICTED, DEF, False, Skip()),
        (OR, EXTERNAL, DEF, False, Skip()),
        (UT, UNRESTRICTED, DEF, False, NeedsApproval()),
        # restricted profile, override requested
        (NV, RESTRICTED, ESC, False, Skip()),
        (OR, RESTRICTED, ESC, False, NeedsApproval()),
        (GRANULAR_ON, RESTRICTED, ADD, False, NeedsApproval()),
        (UT, RESTRICTED, ESC, False, NeedsApproval()),
        # restricted profile, use_default
        (NV, RESTRICTED, DEF, False, Skip()),
        (OR, RESTRICTED, DEF, False, Skip()),
        (GRANULAR_OFF, RESTRICTED, DEF, False, Skip()),
        (UT, RESTRICTED, DEF, False, NeedsApproval()),
    ],
)
def test_unmatched_command_heuristics_table(
    policy: AskForApproval,
    profile: PermissionProfile,
    permissions: SandboxPermissions,
    dangerous: bool,
    expected: ExecApprovalRequirement,
) -> None:
    assert unmatched_command_requirement(policy, profile, permissions, dangerous=dangerous) == (
        expected
    )


def test_preapproved_additional_permissions_are_evaluated_as_use_default() -> None:
    requirement = unmatched_command_requirement(
        AskForApproval.ON_REQUEST,
        RESTRICTED,
        SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS,
        additional_permissions_preapproved=True,
    )
    assert requirement == Skip()


def test_granular_without_sandbox_approval_turns_the_prompt_into_forbidden() -> None:
    requirement = unmatched_command_requirement(
        GRANULAR_OFF, RESTRICTED, SandboxPermissions.REQUIRE_ESCALATED
    )
    assert requirement == Forbidden(
        "approval required by policy, but AskForApproval::Granular.sandbox_approval is false"
    )


@pytest.mark.parametrize(
    ("argv", "dangerous"),
    [
        (["rm", "-rf", "/tmp/x"], True),
        (["/bin/rm", "-r", "-f", "x"], True),
        (["rm", "--recursive", "--force", "x"], True),
        (["rm", "-r", "x"], False),
        (["rm", "x"], False),
        (["ls", "-rf"], False),
        ([], False),
    ],
)
def test_is_dangerous_command(argv: list[str], dangerous: bool) -> None:
    assert is_dangerous_command(argv) is dangerous


def test_rule_verdicts() -> None:
    assert requirement_from_rule(
        RuleDecision.FORBIDDEN, AskForApproval.ON_REQUEST, command="git push"
    ) == Forbidden("`git push` rejected: blocked by policy")
    assert requirement_from_rule(
        RuleDecision.PROMPT, AskForApproval.ON_REQUEST, command="git push", justification="why"
    ) == NeedsApproval("why")
    assert requirement_from_rule(
        RuleDecision.PROMPT, AskForApproval.NEVER, command="git push"
    ) == Forbidden(NEVER_TEXT)
    assert requirement_from_rule(
        RuleDecision.ALLOW, AskForApproval.ON_REQUEST, command="ls", every_segment_allowed=True
    ) == Skip(bypass_sandbox=True)
