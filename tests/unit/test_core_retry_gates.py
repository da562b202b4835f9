"""Retry gates after a sandbox denial.

``test_invariant_N_...``: guarantee N of docs/core-guarantees.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from execserver.core import TurnContext
from execserver.core.approval_cache import ApprovalKey
from execserver.core.approvals import ApprovalRequest
from execserver.core.attempt import SandboxAttempt
from execserver.core.environment import ManagedNetwork
from execserver.core.errors import NetworkPolicyDecisionPayload
from execserver.core.network_context import (
    NetworkApprovalContext,
    build_denial_reason,
    extract_network_approval_context,
    extract_network_approval_context_from_json,
)
from execserver.core.permissions import (
    ExplicitPath,
    FsAccess,
    FsEntry,
    ManagedProfile,
    NetworkAccess,
    PermissionProfile,
    UnrestrictedFs,
    workspace_write_profile,
)
from execserver.core.policy import AskForApproval, GranularApprovalConfig
from execserver.core.retry_gates import Gate, can_retry_without_sandbox, evaluate_retry_gates
from execserver.core.runtime import ApprovalContext, BaseToolRuntime

RESTRICTED = workspace_write_profile()
DENY_READ = workspace_write_profile(extra=[FsEntry(ExplicitPath("/secret"), FsAccess.DENY)])
FULL_ACCESS = ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED)
GRANULAR_ON = AskForApproval.granular(GranularApprovalConfig(sandbox_approval=True))
GRANULAR_OFF = AskForApproval.granular(GranularApprovalConfig(sandbox_approval=False))
ASK = NetworkPolicyDecisionPayload("ask", "decider", host="example.com", protocol="https", port=443)


class _Runtime(BaseToolRuntime[None, None]):
    """Only the defaults matter here; apply_patch differs under ON_REQUEST."""

    def __init__(self, patch_like: bool) -> None:
        self.patch_like = patch_like

    def approval_keys(self, req: None, turn: TurnContext) -> Sequence[ApprovalKey]:
        return ()

    def approval_request(
        self, req: None, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest:
        return ApprovalRequest(tool_name="t", environment_id="e")

    async def run(self, req: None, attempt: SandboxAttempt, turn: TurnContext) -> None:
        return None

    def wants_no_sandbox_approval(self, policy: AskForApproval) -> bool:
        if self.patch_like and policy == AskForApproval.ON_REQUEST:
            return True
        return super().wants_no_sandbox_approval(policy)


SHELL, PATCH = _Runtime(False), _Runtime(True)


@pytest.mark.parametrize(
    ("policy", "shell", "patch"),
    [
        (AskForApproval.NEVER, False, False),
        (AskForApproval.ON_REQUEST, False, True),
        (AskForApproval.UNLESS_TRUSTED, True, True),
        (GRANULAR_ON, True, True),
        (GRANULAR_OFF, False, False),
    ],
)
def test_wants_no_sandbox_approval_defaults(
    policy: AskForApproval, shell: bool, patch: bool
) -> None:
    assert SHELL.wants_no_sandbox_approval(policy) is shell
    assert PATCH.wants_no_sandbox_approval(policy) is patch


def test_wants_no_sandbox_approval_granular_respects_sandbox_flag() -> None:
    assert PATCH.wants_no_sandbox_approval(GRANULAR_ON) is True
    assert PATCH.wants_no_sandbox_approval(GRANULAR_OFF) is False


def test_should_bypass_approval_defaults() -> None:
    assert SHELL.should_bypass_approval(AskForApproval.ON_REQUEST, True)
    assert not SHELL.should_bypass_approval(AskForApproval.ON_REQUEST, False)
    assert SHELL.should_bypass_approval(AskForApproval.NEVER, False)


# --------------------------------------------------------------------------- decision table
SITUATIONS = {
    "plain": (RESTRICTED, None, None),
    "plain_deny_read": (DENY_READ, None, None),
    "network_restricted": (RESTRICTED, ASK, ManagedNetwork()),
    "network_full_access": (FULL_ACCESS, ASK, ManagedNetwork()),
}

TABLE = [
    # policy, runtime, plain, plain+deny-read, network restricted, network full access
    (AskForApproval.NEVER, SHELL, False, False, False, False),
    (AskForApproval.NEVER, PATCH, False, False, False, False),
    (AskForApproval.ON_REQUEST, SHELL, False, False, True, False),
    (AskForApproval.ON_REQUEST, PATCH, True, False, True, True),
    (AskForApproval.UNLESS_TRUSTED, SHELL, True, False, True, True),
    (GRANULAR_ON, SHELL, True, False, True, True),
    (GRANULAR_OFF, SHELL, False, False, False, False),
    (GRANULAR_OFF, PATCH, False, False, False, False),
]


@pytest.mark.parametrize(
    ("policy", "runtime", "situation", "allowed"),
    [
        (policy, runtime, situation, allowed)
        for policy, runtime, *row in TABLE
        for situation, allowed in zip(SITUATIONS, row, strict=True)
    ],
)
def test_invariant_7_retry_gate_decision_table(
    policy: AskForApproval, runtime: _Runtime, situation: str, allowed: bool
) -> None:
    profile, payload, managed = SITUATIONS[situation]
    verdict = evaluate_retry_gates(
        policy=policy,
        profile=profile,
        managed_network=managed,
        network_policy_decision=payload,
        escalate_on_failure=runtime.escalate_on_failure(),
        wants_no_sandbox_approval=runtime.wants_no_sandbox_approval(policy),
    )
    assert verdict.allowed is allowed


def test_invariant_10_deny_read_fails_the_last_gate_for_a_plain_denial() -> None:
    verdict = evaluate_retry_gates(
        policy=AskForApproval.UNLESS_TRUSTED,
        profile=DENY_READ,
        managed_network=None,
        network_policy_decision=None,
        escalate_on_failure=True,
        wants_no_sandbox_approval=True,
    )
    assert verdict.failed_gate is Gate.G4_UNSANDBOXED_ALLOWED


def test_invariant_10_owner_network_policy_fails_the_last_gate() -> None:
    verdict = evaluate_retry_gates(
        policy=AskForApproval.UNLESS_TRUSTED,
        profile=RESTRICTED,
        managed_network=ManagedNetwork(owner_policy=True),
        network_policy_decision=None,
        escalate_on_failure=True,
        wants_no_sandbox_approval=True,
    )
    assert verdict.failed_gate is Gate.G4_UNSANDBOXED_ALLOWED


def test_invariant_7_gates_are_checked_in_order() -> None:
    """Every gate fails here; the first one is reported."""
    deny = NetworkPolicyDecisionPayload("deny", "baseline_policy", host="h")
    common = {"profile": DENY_READ, "managed_network": ManagedNetwork()}
    g1 = evaluate_retry_gates(
        policy=AskForApproval.NEVER,
        network_policy_decision=deny,
        escalate_on_failure=False,
        wants_no_sandbox_approval=False,
        **common,  # type: ignore[arg-type]
    )
    assert g1.failed_gate is Gate.G1_NETWORK_CONTEXT
    g2 = evaluate_retry_gates(
        policy=AskForApproval.NEVER,
        network_policy_decision=None,
        escalate_on_failure=False,
        wants_no_sandbox_approval=False,
        **common,  # type: ignore[arg-type]
    )
    assert g2.failed_gate is Gate.G2_ESCALATE_ON_FAILURE
    g3 = evaluate_retry_gates(
        policy=AskForApproval.NEVER,
        network_policy_decision=None,
        escalate_on_failure=True,
        wants_no_sandbox_approval=False,
        **common,  # type: ignore[arg-type]
    )
    assert g3.failed_gate is Gate.G3_APPROVAL_POLICY
    g4 = evaluate_retry_gates(
        policy=AskForApproval.NEVER,
        network_policy_decision=None,
        escalate_on_failure=True,
        wants_no_sandbox_approval=True,
        **common,  # type: ignore[arg-type]
    )
    assert g4.failed_gate is Gate.G4_UNSANDBOXED_ALLOWED


def test_network_payload_without_managed_network_is_a_plain_denial() -> None:
    verdict = evaluate_retry_gates(
        policy=AskForApproval.UNLESS_TRUSTED,
        profile=RESTRICTED,
        managed_network=None,
        network_policy_decision=NetworkPolicyDecisionPayload("deny", "baseline_policy"),
        escalate_on_failure=True,
        wants_no_sandbox_approval=True,
    )
    assert verdict.allowed
    assert verdict.network_context is None
    assert verdict.reason == "command failed; retry without sandbox?"


# --------------------------------------------------------------------------- reference names
def test_can_retry_without_sandbox_respects_default_on_request_gate() -> None:
    assert not can_retry_without_sandbox(
        policy=AskForApproval.ON_REQUEST,
        profile=RESTRICTED,
        managed_network=None,
        network_policy_decision=None,
        wants_no_sandbox_approval=SHELL.wants_no_sandbox_approval(AskForApproval.ON_REQUEST),
    )


def test_can_retry_without_sandbox_allows_on_request_for_network_context() -> None:
    assert can_retry_without_sandbox(
        policy=AskForApproval.ON_REQUEST,
        profile=RESTRICTED,
        managed_network=ManagedNetwork(),
        network_policy_decision=ASK,
        wants_no_sandbox_approval=False,
    )


def test_can_retry_without_sandbox_blocks_on_request_for_network_context_in_danger_full_access() -> (  # noqa: E501
    None
):
    assert not can_retry_without_sandbox(
        policy=AskForApproval.ON_REQUEST,
        profile=FULL_ACCESS,
        managed_network=ManagedNetwork(),
        network_policy_decision=ASK,
        wants_no_sandbox_approval=False,
    )


def test_can_retry_without_sandbox_still_blocks_never_without_tool_override() -> None:
    for payload, managed in ((None, None), (ASK, ManagedNetwork())):
        assert not can_retry_without_sandbox(
            policy=AskForApproval.NEVER,
            profile=RESTRICTED,
            managed_network=managed,
            network_policy_decision=payload,
            wants_no_sandbox_approval=SHELL.wants_no_sandbox_approval(AskForApproval.NEVER),
        )


def test_build_denial_reason_extracts_network_context_when_enabled() -> None:
    reason, context = build_denial_reason(ASK, managed_network_active=True)
    assert reason == 'Network access to "example.com" is blocked by policy.'
    assert context == NetworkApprovalContext("example.com", "https")


def test_build_denial_reason_skips_network_context_when_disabled() -> None:
    reason, context = build_denial_reason(ASK, managed_network_active=False)
    assert reason == "command failed; retry without sandbox?"
    assert context is None


def test_extract_network_approval_context_ignores_non_ask_payloads() -> None:
    for decision in ("deny", "allow"):
        payload = NetworkPolicyDecisionPayload(decision, "decider", host="h", protocol="http")
        assert extract_network_approval_context(payload) is None


def test_extract_network_approval_context_ignores_non_decider_payloads() -> None:
    payload = NetworkPolicyDecisionPayload("ask", "baseline_policy", host="h", protocol="http")
    assert extract_network_approval_context(payload) is None


def test_extract_network_approval_context_from_json_blocked_response() -> None:
    body = (
        '{"decision":"ask","source":"decider","protocol":"http","host":"pypi.org",'
        '"port":80,"reason":"not_allowed"}'
    )
    assert extract_network_approval_context_from_json(body) == NetworkApprovalContext(
        "pypi.org", "http"
    )
    assert extract_network_approval_context_from_json("<html>403</html>") is None
    assert extract_network_approval_context_from_json('{"decision":"ask"}') is None


@pytest.mark.parametrize("profile", [RESTRICTED])
def test_g2_runtimes_that_do_not_escalate_never_retry(profile: PermissionProfile) -> None:
    verdict = evaluate_retry_gates(
        policy=AskForApproval.UNLESS_TRUSTED,
        profile=profile,
        managed_network=None,
        network_policy_decision=None,
        escalate_on_failure=False,
        wants_no_sandbox_approval=True,
    )
    assert verdict.failed_gate is Gate.G2_ESCALATE_ON_FAILURE
