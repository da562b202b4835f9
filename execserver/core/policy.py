"""Approval policy, the model's sandbox override request, and the approval
requirement rules that do not depend on an exec-policy verdict.

Everything here is pure: values in, a verdict out. The orchestrator and the
tool handlers consult it; nothing here talks to an executor.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar

from execserver.core.permissions import PermissionProfile, has_deny_read, is_restricted_fs

__all__ = [
    "ApprovalMode",
    "AskForApproval",
    "ExecApprovalRequirement",
    "Forbidden",
    "GranularApprovalConfig",
    "NeedsApproval",
    "SandboxOverride",
    "SandboxPermissions",
    "SandboxablePreference",
    "Skip",
    "default_exec_approval_requirement",
    "override_request_rejection",
    "prompt_rejection_reason",
    "sandbox_override_for_first_attempt",
]


class ApprovalMode(enum.Enum):
    UNLESS_TRUSTED = "untrusted"
    ON_REQUEST = "on-request"
    GRANULAR = "granular"
    NEVER = "never"


@dataclass(frozen=True)
class GranularApprovalConfig:
    """Which kinds of prompt a GRANULAR policy still allows."""

    sandbox_approval: bool = False
    rules: bool = False
    skill_approval: bool = False
    request_permissions: bool = False
    mcp_elicitations: bool = False

    def to_wire(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, value: Mapping[str, object]) -> GranularApprovalConfig:
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, bool] = {}
        for key, item in value.items():
            if key in known:
                if not isinstance(item, bool):
                    raise ValueError(f"granular.{key} must be a boolean, got {item!r}")
                kwargs[key] = item
        return cls(**kwargs)

    def debug(self) -> str:
        parts = ", ".join(f"{f.name}: {str(getattr(self, f.name)).lower()}" for f in fields(self))
        return f"GranularApprovalConfig {{ {parts} }}"


@dataclass(frozen=True)
class AskForApproval:
    """The turn's approval policy. Use the class constants or :meth:`granular`.

    There is no on-failure mode: the wire value ``on-failure`` is read as
    ON_REQUEST, as the reference does since it dropped that mode.
    """

    mode: ApprovalMode
    config: GranularApprovalConfig | None = None

    UNLESS_TRUSTED: ClassVar[AskForApproval]
    ON_REQUEST: ClassVar[AskForApproval]
    NEVER: ClassVar[AskForApproval]

    def __post_init__(self) -> None:
        if (self.mode is ApprovalMode.GRANULAR) != (self.config is not None):
            raise ValueError("a granular config goes with the GRANULAR mode, and only with it")

    @classmethod
    def granular(cls, config: GranularApprovalConfig) -> AskForApproval:
        return cls(ApprovalMode.GRANULAR, config)

    @classmethod
    def from_wire(cls, value: object) -> AskForApproval:
        if value == "on-failure":
            return cls.ON_REQUEST
        if isinstance(value, str):
            for mode in ApprovalMode:
                if mode.value == value and mode is not ApprovalMode.GRANULAR:
                    return cls(mode)
            raise ValueError(f"unknown approval policy {value!r}")
        if isinstance(value, Mapping) and set(value) == {"granular"}:
            inner = value["granular"]
            if not isinstance(inner, Mapping):
                raise ValueError("granular approval policy needs an object")
            return cls.granular(GranularApprovalConfig.from_wire(inner))
        raise ValueError(f"unknown approval policy {value!r}")

    def to_wire(self) -> str | dict[str, dict[str, bool]]:
        if self.config is not None:
            return {"granular": self.config.to_wire()}
        return self.mode.value

    def debug(self) -> str:
        """Rust's ``{:?}`` spelling, used in the handler gate's message."""
        names = {
            ApprovalMode.UNLESS_TRUSTED: "UnlessTrusted",
            ApprovalMode.ON_REQUEST: "OnRequest",
            ApprovalMode.NEVER: "Never",
        }
        if self.config is not None:
            return f"Granular({self.config.debug()})"
        return names[self.mode]

    @property
    def allows_sandbox_prompt(self) -> bool:
        """False when a prompt caused by the sandbox must turn into a refusal."""
        if self.mode is ApprovalMode.NEVER:
            return False
        if self.config is not None:
            return self.config.sandbox_approval
        return True


AskForApproval.UNLESS_TRUSTED = AskForApproval(ApprovalMode.UNLESS_TRUSTED)
AskForApproval.ON_REQUEST = AskForApproval(ApprovalMode.ON_REQUEST)
AskForApproval.NEVER = AskForApproval(ApprovalMode.NEVER)


class SandboxPermissions(enum.Enum):
    """The per-call override the model asked for."""

    USE_DEFAULT = "use_default"
    REQUIRE_ESCALATED = "require_escalated"
    WITH_ADDITIONAL_PERMISSIONS = "with_additional_permissions"

    def requests_sandbox_override(self) -> bool:
        return self is not SandboxPermissions.USE_DEFAULT

    def requires_escalated(self) -> bool:
        return self is SandboxPermissions.REQUIRE_ESCALATED


class SandboxablePreference(enum.Enum):
    AUTO = "auto"
    REQUIRE = "require"
    FORBID = "forbid"


class SandboxOverride(enum.Enum):
    NO_OVERRIDE = "noOverride"
    BYPASS_SANDBOX_FIRST_ATTEMPT = "bypassSandboxFirstAttempt"


@dataclass(frozen=True)
class Skip:
    """Run without asking. ``bypass_sandbox``: exec-policy rules explicitly allow
    every part of the command, so the first attempt may run unsandboxed."""

    bypass_sandbox: bool = False
    proposed_execpolicy_amendment: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NeedsApproval:
    reason: str | None = None
    proposed_execpolicy_amendment: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Forbidden:
    reason: str


ExecApprovalRequirement = Skip | NeedsApproval | Forbidden

GRANULAR_SANDBOX_REJECTION = "approval policy disallowed sandbox approval prompt"


def default_exec_approval_requirement(
    policy: AskForApproval, profile: PermissionProfile
) -> ExecApprovalRequirement:
    """The requirement for a runtime without an exec-policy verdict.

    Only a restricted file-system profile makes ON_REQUEST/GRANULAR ask: with
    unrestricted, external or disabled profiles the sandbox has nothing to
    deny, so there is nothing to approve.
    """
    restricted = is_restricted_fs(profile)
    if policy.mode is ApprovalMode.NEVER:
        return Skip()
    if policy.mode is ApprovalMode.UNLESS_TRUSTED:
        return NeedsApproval()
    if not restricted:
        return Skip()
    if policy.config is not None and not policy.config.sandbox_approval:
        return Forbidden(GRANULAR_SANDBOX_REJECTION)
    return NeedsApproval()


NEVER_PROMPT_REJECTION = "approval required by policy, but AskForApproval is set to Never"
GRANULAR_SANDBOX_PROMPT_REJECTION = (
    "approval required by policy, but AskForApproval::Granular.sandbox_approval is false"
)
GRANULAR_RULES_PROMPT_REJECTION = (
    "approval required by policy rule, but AskForApproval::Granular.rules is false"
)


def prompt_rejection_reason(policy: AskForApproval, *, from_rule: bool) -> str | None:
    """Why a prompt must become Forbidden under ``policy``, or None if it may ask.

    ``from_rule``: the prompt was demanded by an exec-policy ``prompt`` rule
    rather than by the sandbox heuristics.
    """
    if policy.mode is ApprovalMode.NEVER:
        return NEVER_PROMPT_REJECTION
    if policy.config is not None:
        if from_rule and not policy.config.rules:
            return GRANULAR_RULES_PROMPT_REJECTION
        if not from_rule and not policy.config.sandbox_approval:
            return GRANULAR_SANDBOX_PROMPT_REJECTION
    return None


def override_request_rejection(
    policy: AskForApproval,
    sandbox_permissions: SandboxPermissions,
    *,
    additional_permissions_preapproved: bool = False,
) -> str | None:
    """The handler gate: the model may only ask for an override under
    ON_REQUEST. Returns the error text for the model, or None to go on."""
    if not sandbox_permissions.requests_sandbox_override():
        return None
    if additional_permissions_preapproved:
        return None
    if policy.mode is ApprovalMode.ON_REQUEST:
        return None
    name = policy.debug()
    return (
        f"approval policy is {name}; reject command — you cannot ask for escalated "
        f"permissions if the approval policy is {name}"
    )


def sandbox_override_for_first_attempt(
    sandbox_permissions: SandboxPermissions,
    requirement: ExecApprovalRequirement,
    profile: PermissionProfile,
) -> SandboxOverride:
    """A profile that denies reads is never bypassed: dropping the sandbox
    would expose exactly the files the profile hides."""
    if has_deny_read(profile):
        return SandboxOverride.NO_OVERRIDE
    if isinstance(requirement, Skip) and requirement.bypass_sandbox:
        return SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT
    if sandbox_permissions.requires_escalated():
        return SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT
    return SandboxOverride.NO_OVERRIDE
