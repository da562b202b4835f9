"""ToolOrchestrator.run: approval, first attempt, retry gates, second attempt.

::

    APPROVAL --Forbidden/denied--> Rejected | TurnAborted
       |
    ATTEMPT 1 --ok--> output        --other error--> that error
       | SandboxDenied
    RETRY GATES --any fails--> the denial
       |
    RETRY APPROVAL (skipped for an already approved call) --no--> Rejected
       |
    ATTEMPT 2 (host sandbox NONE, fresh processId) --> its result, whatever it is

There is never a third attempt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Generic, TypeVar

from execserver.client.errors import ExecServerError
from execserver.core.approval_cache import with_cached_approval
from execserver.core.approvals import check_decision
from execserver.core.attempt import SandboxAttempt, first_attempt, retry_attempt
from execserver.core.decisions import DecisionKind, ReviewDecision
from execserver.core.errors import ExecFailed, Rejected, SandboxDenied
from execserver.core.network_approval import DeferredNetworkApproval, NetworkApprovalMode
from execserver.core.permissions import PermissionProfile, effective_profile
from execserver.core.policy import (
    NEVER_PROMPT_REJECTION,
    ApprovalMode,
    ExecApprovalRequirement,
    Forbidden,
    NeedsApproval,
    SandboxOverride,
    default_exec_approval_requirement,
    sandbox_override_for_first_attempt,
)
from execserver.core.retry_gates import evaluate_retry_gates
from execserver.core.runtime import ApprovalContext, ToolRuntime, TurnContext

__all__ = ["OrchestratorResult", "ToolOrchestrator"]

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Out = TypeVar("Out")

OWNER_POLICY_ESCALATION = "attachment-owned network policy cannot be bypassed by sandbox escalation"


@dataclass
class OrchestratorResult(Generic[Out]):
    output: Out
    # Every attempt that ran, in order (one or two).
    attempts: tuple[SandboxAttempt, ...]
    # Present when a DEFERRED-mode attempt succeeded: the caller keeps it with
    # the live process and finishes it exactly once.
    deferred_network_approval: DeferredNetworkApproval | None = None

    @property
    def attempt(self) -> SandboxAttempt:
        """The attempt that produced the output."""
        return self.attempts[-1]


class ToolOrchestrator:
    def __init__(self, turn: TurnContext) -> None:
        self.turn = turn

    async def run(self, runtime: ToolRuntime[Req, Out], req: Req) -> OrchestratorResult[Out]:
        turn = self.turn
        policy = turn.approval_policy
        profile = effective_profile(turn.permission_profile, runtime.additional_permissions(req))
        requirement = runtime.exec_approval_requirement(req, turn)
        if requirement is None:
            requirement = default_exec_approval_requirement(policy, profile)

        already_approved = await self._approve(runtime, req, requirement)

        override = sandbox_override_for_first_attempt(
            runtime.sandbox_permissions(req), requirement, profile
        )
        managed = turn.managed_network
        if (
            override is SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT
            and managed is not None
            and managed.owner_policy
        ):
            raise Rejected(OWNER_POLICY_ESCALATION)
        first = first_attempt(
            environment=turn.environment,
            profile=profile,
            preference=runtime.sandbox_preference(),
            override=override,
            managed_network=managed,
            process_id_base=runtime.process_id_base(req),
            sandbox_cwd=runtime.sandbox_cwd(req, turn),
        )
        try:
            output, deferred = await self._run_attempt(runtime, req, first)
        except SandboxDenied as denial:
            return await self._after_denial(runtime, req, profile, first, denial, already_approved)
        return OrchestratorResult(output, (first,), deferred)

    # -- step 1 ----------------------------------------------------------------

    async def _approve(
        self, runtime: ToolRuntime[Req, Out], req: Req, requirement: ExecApprovalRequirement
    ) -> bool:
        """Returns ``already_approved``: whether a prompt was answered yes."""
        turn = self.turn
        if isinstance(requirement, Forbidden):
            raise Rejected(requirement.reason)
        if isinstance(requirement, NeedsApproval):
            if turn.approval_policy.mode is ApprovalMode.NEVER:
                # Under NEVER nothing is ever asked.
                raise Rejected(NEVER_PROMPT_REJECTION)
            ctx = ApprovalContext(
                reason=requirement.reason,
                proposed_execpolicy_amendment=requirement.proposed_execpolicy_amendment,
            )
            await self._ask(runtime, req, ctx, cached=True)
            return True
        if turn.strict_auto_review:
            await self._ask(runtime, req, ApprovalContext(review_only=True), cached=False)
        return False

    async def _ask(
        self, runtime: ToolRuntime[Req, Out], req: Req, ctx: ApprovalContext, *, cached: bool
    ) -> ReviewDecision:
        turn = self.turn
        try:
            request = runtime.approval_request(req, turn, ctx)
        except (ValueError, TypeError, KeyError) as exc:
            raise Rejected(f"could not prepare approval action: {exc}") from exc

        async def ask() -> ReviewDecision:
            return await turn.approver(request)

        if cached:
            decision = await with_cached_approval(
                turn.approval_store, runtime.approval_keys(req, turn), ask
            )
        else:
            decision = await ask()
        check_decision(decision, rejected_by_user=runtime.rejected_by_user)
        self._persist_amendments(decision)
        return decision

    def _persist_amendments(self, decision: ReviewDecision) -> None:
        turn = self.turn
        if (
            decision.kind is DecisionKind.APPROVED_EXECPOLICY_AMENDMENT
            and decision.execpolicy_amendment is not None
            and turn.on_execpolicy_amendment is not None
        ):
            turn.on_execpolicy_amendment(decision.execpolicy_amendment)
        if (
            decision.kind is DecisionKind.NETWORK_POLICY_AMENDMENT
            and decision.network_amendment is not None
            and turn.on_network_policy_amendment is not None
        ):
            turn.on_network_policy_amendment(decision.network_amendment)

    # -- steps 3 and 4 -----------------------------------------------------------

    async def _after_denial(
        self,
        runtime: ToolRuntime[Req, Out],
        req: Req,
        profile: PermissionProfile,
        first: SandboxAttempt,
        denial: SandboxDenied,
        already_approved: bool,
    ) -> OrchestratorResult[Out]:
        turn = self.turn
        policy = turn.approval_policy
        verdict = evaluate_retry_gates(
            policy=policy,
            profile=profile,
            managed_network=turn.managed_network,
            network_policy_decision=denial.network_policy_decision,
            escalate_on_failure=runtime.escalate_on_failure(),
            wants_no_sandbox_approval=runtime.wants_no_sandbox_approval(policy),
        )
        if not verdict.allowed:
            log.debug("no retry for %s: gate %s failed", runtime.tool_name, verdict.failed_gate)
            raise denial
        skip_prompt = (
            not turn.strict_auto_review
            and runtime.should_bypass_approval(policy, already_approved)
            and verdict.network_context is None
        )
        if not skip_prompt:
            if policy.mode is ApprovalMode.NEVER:
                raise denial  # a prompt would be needed, and NEVER never prompts
            ctx = ApprovalContext(
                reason=verdict.reason, retry=True, network_context=verdict.network_context
            )
            await self._ask(runtime, req, ctx, cached=True)
        second = retry_attempt(
            environment=turn.environment,
            profile=profile,
            preference=runtime.sandbox_preference(),
            managed_network=turn.managed_network,
            process_id_base=runtime.process_id_base(req),
            sandbox_cwd=runtime.sandbox_cwd(req, turn),
        )
        output, deferred = await self._run_attempt(runtime, req, second)
        return OrchestratorResult(output, (first, second), deferred)

    # -- one attempt ---------------------------------------------------------------

    async def _run_attempt(
        self, runtime: ToolRuntime[Req, Out], req: Req, attempt: SandboxAttempt
    ) -> tuple[Out, DeferredNetworkApproval | None]:
        turn = self.turn
        service = turn.network_approvals
        spec = runtime.network_approval_spec(req, turn)
        active = None
        if service is not None and spec is not None:
            active = service.begin(
                spec,
                environment_id=turn.environment.environment_id,
                managed_network_active=turn.managed_network is not None,
                process_id=attempt.process_id,
            )
        if active is not None:
            attempt.network_denial_cancellation = active.cancelled
        try:
            output = await runtime.run(req, attempt, turn)
        except BaseException as exc:
            if service is not None and active is not None:
                finished = service.finish_call(active.registration_id)
                if finished is not None and isinstance(exc, Exception):
                    # The network denial explains the failure better than the
                    # attempt's own error.
                    raise Rejected(finished.message) from exc
            if isinstance(exc, ExecServerError):
                raise ExecFailed(str(exc)) from exc
            raise
        if service is None or active is None:
            return output, None
        if active.mode is NetworkApprovalMode.DEFERRED:
            return output, service.into_deferred(active)
        service.finish_immediate(active)
        return output, None
