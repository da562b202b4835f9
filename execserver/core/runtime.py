"""The contract between the orchestrator and a tool runtime,
and the turn context both read.

A runtime (unified exec, apply_patch, the one-shot shell) supplies what only it
knows — approval keys, the exec-policy verdict, how to build its approval
request, how to run one attempt — and inherits the reference's defaults for
the rest from :class:`BaseToolRuntime`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from execserver.core.approval_cache import ApprovalKey, ApprovalStore
from execserver.core.approvals import ApprovalRequest, Approver
from execserver.core.attempt import SandboxAttempt
from execserver.core.decisions import NetworkPolicyAmendment
from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.network_approval import NetworkApprovalService, NetworkApprovalSpec
from execserver.core.network_context import NetworkApprovalContext
from execserver.core.permissions import AdditionalPermissions, PermissionProfile
from execserver.core.policy import (
    ApprovalMode,
    AskForApproval,
    ExecApprovalRequirement,
    SandboxablePreference,
    SandboxPermissions,
)

__all__ = ["ApprovalContext", "BaseToolRuntime", "ToolRuntime", "TurnContext"]

ReqT = TypeVar("ReqT", contravariant=True)
OutT = TypeVar("OutT", covariant=True)
Req = TypeVar("Req")
Out = TypeVar("Out")


@dataclass
class TurnContext:
    """What every call of one turn shares: where it runs, under which policy and
    profile, who answers prompts, and the session's caches."""

    environment: ExecutionEnvironment
    approval_policy: AskForApproval
    permission_profile: PermissionProfile
    approver: Approver
    approval_store: ApprovalStore = field(default_factory=ApprovalStore)
    strict_auto_review: bool = False
    managed_network: ManagedNetwork | None = None
    network_approvals: NetworkApprovalService | None = None
    # Additional permissions granted earlier in the session (request_permissions).
    granted_permissions: AdditionalPermissions | None = None
    on_execpolicy_amendment: Callable[[tuple[str, ...]], None] | None = None
    on_network_policy_amendment: Callable[[NetworkPolicyAmendment], None] | None = None


@dataclass(frozen=True)
class ApprovalContext:
    """Why the orchestrator is asking (first prompt or retry prompt)."""

    reason: str | None = None
    retry: bool = False
    review_only: bool = False
    network_context: NetworkApprovalContext | None = None
    proposed_execpolicy_amendment: tuple[str, ...] | None = None

    def command_request(
        self,
        *,
        tool_name: str,
        environment_id: str,
        command: tuple[str, ...],
        cwd: str,
        justification: str | None,
        sandbox_permissions: SandboxPermissions,
        additional_permissions: AdditionalPermissions | None,
        call_id: str = "",
        description: str | None = None,
    ) -> ApprovalRequest:
        """The prompt for running a command: this context's why, the call's what.
        Shared by every command runtime so their prompts cannot drift apart."""
        return ApprovalRequest(
            tool_name=tool_name,
            environment_id=environment_id,
            call_id=call_id,
            command=command,
            cwd=cwd,
            reason=self.reason or justification,
            retry=self.retry,
            review_only=self.review_only,
            network_context=self.network_context,
            proposed_execpolicy_amendment=self.proposed_execpolicy_amendment,
            sandbox_permissions=sandbox_permissions,
            additional_permissions=additional_permissions,
            hook_names=("Bash",),
            description=description,
        )


class ToolRuntime(Protocol[ReqT, OutT]):
    """What the orchestrator needs from a runtime. ``run`` raises
    :class:`~execserver.core.errors.ToolError`; only ``SandboxDenied`` may
    lead to a retry."""

    @property
    def tool_name(self) -> str: ...

    @property
    def rejected_by_user(self) -> str: ...

    def approval_keys(self, req: ReqT, turn: TurnContext) -> Sequence[ApprovalKey]: ...

    def exec_approval_requirement(
        self, req: ReqT, turn: TurnContext
    ) -> ExecApprovalRequirement | None: ...

    def sandbox_permissions(self, req: ReqT) -> SandboxPermissions: ...

    def additional_permissions(self, req: ReqT) -> AdditionalPermissions | None: ...

    def sandbox_preference(self) -> SandboxablePreference: ...

    def sandbox_cwd(self, req: ReqT, turn: TurnContext) -> str | None: ...

    def process_id_base(self, req: ReqT) -> str: ...

    def escalate_on_failure(self) -> bool: ...

    def wants_no_sandbox_approval(self, policy: AskForApproval) -> bool: ...

    def should_bypass_approval(self, policy: AskForApproval, already_approved: bool) -> bool: ...

    def network_approval_spec(self, req: ReqT, turn: TurnContext) -> NetworkApprovalSpec | None: ...

    def approval_request(
        self, req: ReqT, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest: ...

    async def run(self, req: ReqT, attempt: SandboxAttempt, turn: TurnContext) -> OutT: ...


class BaseToolRuntime(abc.ABC, Generic[Req, Out]):
    """The reference's defaults; subclasses override what differs."""

    tool_name: str = "tool"
    rejected_by_user: str = "exec command rejected by user"

    @abc.abstractmethod
    def approval_keys(self, req: Req, turn: TurnContext) -> Sequence[ApprovalKey]: ...

    @abc.abstractmethod
    def approval_request(
        self, req: Req, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest: ...

    @abc.abstractmethod
    async def run(self, req: Req, attempt: SandboxAttempt, turn: TurnContext) -> Out: ...

    def exec_approval_requirement(
        self, req: Req, turn: TurnContext
    ) -> ExecApprovalRequirement | None:
        return None  # use default_exec_approval_requirement

    def sandbox_permissions(self, req: Req) -> SandboxPermissions:
        return SandboxPermissions.USE_DEFAULT

    def additional_permissions(self, req: Req) -> AdditionalPermissions | None:
        return None

    def sandbox_preference(self) -> SandboxablePreference:
        return SandboxablePreference.AUTO

    def sandbox_cwd(self, req: Req, turn: TurnContext) -> str | None:
        return None  # the turn's trusted cwd

    def process_id_base(self, req: Req) -> str:
        return self.tool_name

    def escalate_on_failure(self) -> bool:
        return True

    def wants_no_sandbox_approval(self, policy: AskForApproval) -> bool:
        """Whether a sandbox denial may be followed by a "retry without sandbox?"
        step. Shell-like runtimes: only under UNLESS_TRUSTED (and GRANULAR with
        sandbox approval); apply_patch also under ON_REQUEST."""
        if policy.config is not None:
            return policy.config.sandbox_approval
        return policy.mode is ApprovalMode.UNLESS_TRUSTED

    def should_bypass_approval(self, policy: AskForApproval, already_approved: bool) -> bool:
        return already_approved or policy.mode is ApprovalMode.NEVER

    def network_approval_spec(self, req: Req, turn: TurnContext) -> NetworkApprovalSpec | None:
        return None
