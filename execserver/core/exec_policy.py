"""The approval requirement of a shell command when no exec-policy rule matched,
and the prompt-rejection conversions.

Prefix rules loaded from ``.rules`` files are not modelled here; a caller that
has a rule verdict passes it to :func:`requirement_from_rule`.
"""

from __future__ import annotations

import enum
import posixpath
from collections.abc import Sequence

from execserver.core.permissions import PermissionProfile, is_restricted_fs
from execserver.core.policy import (
    ApprovalMode,
    AskForApproval,
    ExecApprovalRequirement,
    Forbidden,
    NeedsApproval,
    SandboxPermissions,
    Skip,
    prompt_rejection_reason,
)

__all__ = [
    "RuleDecision",
    "is_dangerous_command",
    "requirement_from_rule",
    "unmatched_command_requirement",
]


class RuleDecision(enum.Enum):
    ALLOW = "allow"
    PROMPT = "prompt"
    FORBIDDEN = "forbidden"


def is_dangerous_command(argv: Sequence[str]) -> bool:
    """Forced recursive deletes: ``rm`` with both a recursive and a force flag."""
    if not argv or posixpath.basename(argv[0]) != "rm":
        return False
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
    long_flags = {a for a in argv[1:] if a.startswith("--")}
    recursive = "r" in flags or "R" in flags or "--recursive" in long_flags
    force = "f" in flags or "--force" in long_flags
    return recursive and force


def unmatched_command_requirement(
    policy: AskForApproval,
    profile: PermissionProfile,
    sandbox_permissions: SandboxPermissions,
    *,
    dangerous: bool = False,
    additional_permissions_preapproved: bool = False,
) -> ExecApprovalRequirement:
    """The heuristics table for a command no rule matched."""
    override = sandbox_permissions.requests_sandbox_override() and not (
        sandbox_permissions is SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS
        and additional_permissions_preapproved
    )
    if policy.mode is ApprovalMode.UNLESS_TRUSTED:
        prompt = True
    elif dangerous:
        prompt = True
    elif not is_restricted_fs(profile):
        prompt = False
    else:
        # Restricted profile: only an override request needs a prompt (under
        # NEVER the handler gate has already refused override requests).
        prompt = override and policy.mode is not ApprovalMode.NEVER
    if not prompt:
        return Skip()
    rejection = prompt_rejection_reason(policy, from_rule=False)
    return Forbidden(rejection) if rejection is not None else NeedsApproval()


def requirement_from_rule(
    decision: RuleDecision,
    policy: AskForApproval,
    *,
    command: str,
    justification: str | None = None,
    every_segment_allowed: bool = False,
) -> ExecApprovalRequirement:
    """The requirement for a command a rule matched (forbidden, prompt, allow)."""
    if decision is RuleDecision.FORBIDDEN:
        return Forbidden(f"`{command}` rejected: {justification or 'blocked by policy'}")
    if decision is RuleDecision.PROMPT:
        rejection = prompt_rejection_reason(policy, from_rule=True)
        return Forbidden(rejection) if rejection is not None else NeedsApproval(justification)
    return Skip(bypass_sandbox=every_segment_allowed)
