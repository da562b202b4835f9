"""May a sandbox-denied attempt be retried without the sandbox?

The gates are checked in the reference's order and the first that fails ends
the call with the denial.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from execserver.core.attempt import unsandboxed_execution_allowed
from execserver.core.environment import ManagedNetwork
from execserver.core.errors import NetworkPolicyDecisionPayload
from execserver.core.network_context import NetworkApprovalContext, build_denial_reason
from execserver.core.permissions import PermissionProfile
from execserver.core.policy import (
    ApprovalMode,
    AskForApproval,
    NeedsApproval,
    default_exec_approval_requirement,
)

__all__ = ["Gate", "RetryVerdict", "can_retry_without_sandbox", "evaluate_retry_gates"]


class Gate(enum.Enum):
    G1_NETWORK_CONTEXT = "G1"
    G2_ESCALATE_ON_FAILURE = "G2"
    G3_APPROVAL_POLICY = "G3"
    G4_UNSANDBOXED_ALLOWED = "G4"


@dataclass(frozen=True)
class RetryVerdict:
    failed_gate: Gate | None
    network_context: NetworkApprovalContext | None
    reason: str  # text of the retry prompt

    @property
    def allowed(self) -> bool:
        return self.failed_gate is None


def evaluate_retry_gates(
    *,
    policy: AskForApproval,
    profile: PermissionProfile,
    managed_network: ManagedNetwork | None,
    network_policy_decision: NetworkPolicyDecisionPayload | None,
    escalate_on_failure: bool,
    wants_no_sandbox_approval: bool,
) -> RetryVerdict:
    active = managed_network is not None
    reason, context = build_denial_reason(network_policy_decision, managed_network_active=active)

    def fail(gate: Gate) -> RetryVerdict:
        return RetryVerdict(gate, context, reason)

    # G1: a network block the decider did not mark as "ask" is not the user's to lift.
    if network_policy_decision is not None and active and context is None:
        return fail(Gate.G1_NETWORK_CONTEXT)
    if not escalate_on_failure:
        return fail(Gate.G2_ESCALATE_ON_FAILURE)
    if not wants_no_sandbox_approval:
        on_request_network_prompt = (
            policy.mode is ApprovalMode.ON_REQUEST
            and context is not None
            and isinstance(default_exec_approval_requirement(policy, profile), NeedsApproval)
        )
        if not on_request_network_prompt:
            return fail(Gate.G3_APPROVAL_POLICY)
    if not (unsandboxed_execution_allowed(profile, managed_network) or context is not None):
        return fail(Gate.G4_UNSANDBOXED_ALLOWED)
    return RetryVerdict(None, context, reason)


def can_retry_without_sandbox(
    *,
    policy: AskForApproval,
    profile: PermissionProfile,
    managed_network: ManagedNetwork | None,
    network_policy_decision: NetworkPolicyDecisionPayload | None,
    escalate_on_failure: bool = True,
    wants_no_sandbox_approval: bool,
) -> bool:
    return evaluate_retry_gates(
        policy=policy,
        profile=profile,
        managed_network=managed_network,
        network_policy_decision=network_policy_decision,
        escalate_on_failure=escalate_on_failure,
        wants_no_sandbox_approval=wants_no_sandbox_approval,
    ).allowed
