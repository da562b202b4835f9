"""ToolOrchestrator.run without an executor (approval, attempts, retry gates).

The runtime here is a scripted in-memory ToolRuntime: each attempt returns or
raises what the test lists, so every path of the state diagram can be driven,
including network denials no real executor produces on demand. The same paths
run against a real executor in tests/integration/test_core_orchestrator.py.

``test_invariant_N_...``: guarantee N of docs/core-guarantees.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from execserver.client.errors import ExecServerTransportClosed
from execserver.core import TurnContext
from execserver.core.approval_cache import ApprovalKey, ExecApprovalKey
from execserver.core.approvals import ApprovalRequest
from execserver.core.attempt import SandboxAttempt, SandboxType, sandbox_context
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.errors import (
    ExecFailed,
    NetworkPolicyDecisionPayload,
    Rejected,
    SandboxDenied,
    SandboxSignal,
    SandboxTimeout,
    ToolError,
    TurnAborted,
)
from execserver.core.network_approval import (
    NetworkApprovalMode,
    NetworkApprovalService,
    NetworkApprovalSpec,
)
from execserver.core.orchestrator import OWNER_POLICY_ESCALATION, ToolOrchestrator
from execserver.core.permissions import (
    DisabledProfile,
    ExplicitPath,
    FsAccess,
    FsEntry,
    ManagedProfile,
    NetworkAccess,
    PermissionProfile,
    UnrestrictedFs,
    workspace_write_profile,
)
from execserver.core.policy import (
    AskForApproval,
    ExecApprovalRequirement,
    Forbidden,
    GranularApprovalConfig,
    NeedsApproval,
    SandboxPermissions,
    Skip,
)
from execserver.core.runtime import ApprovalContext, BaseToolRuntime

ENV = ExecutionEnvironment(environment_id="env-1", cwd="/work")
RESTRICTED = workspace_write_profile()
DENY_READ = workspace_write_profile(extra=[FsEntry(ExplicitPath("/secret"), FsAccess.DENY)])
FULL_ACCESS = ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED)
ASK = NetworkPolicyDecisionPayload("ask", "decider", host="example.com", protocol="https")
GRANULAR_ON = AskForApproval.granular(GranularApprovalConfig(sandbox_approval=True))
GRANULAR_OFF = AskForApproval.granular(GranularApprovalConfig(sandbox_approval=False))

Outcome = str | BaseException


@dataclass
class Call:
    """One tool call: what each attempt does, in order."""

    outcomes: list[Outcome]
    requirement: ExecApprovalRequirement | None = None
    sandbox_permissions: SandboxPermissions = SandboxPermissions.USE_DEFAULT
    network_spec: NetworkApprovalSpec | None = None
    attempts: list[SandboxAttempt] = field(default_factory=list)


class ScriptedRuntime(BaseToolRuntime[Call, str]):
    tool_name = "scripted"

    def __init__(
        self, *, wants_retry_on_request: bool = False, wants_under_never: bool = False
    ) -> None:
        self.wants_retry_on_request = wants_retry_on_request
        self.wants_under_never = wants_under_never
        self.fail_request = False

    def approval_keys(self, req: Call, turn: TurnContext) -> Sequence[ApprovalKey]:
        return [ExecApprovalKey(turn.environment.environment_id, ("cmd",), "/work", False)]

    def approval_request(
        self, req: Call, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest:
        if self.fail_request:
            raise ValueError("no command line")
        return ApprovalRequest(
            tool_name=self.tool_name,
            environment_id=turn.environment.environment_id,
            reason=ctx.reason,
            retry=ctx.retry,
            review_only=ctx.review_only,
            network_context=ctx.network_context,
        )

    def exec_approval_requirement(
        self, req: Call, turn: TurnContext
    ) -> ExecApprovalRequirement | None:
        return req.requirement

    def sandbox_permissions(self, req: Call) -> SandboxPermissions:
        return req.sandbox_permissions

    def wants_no_sandbox_approval(self, policy: AskForApproval) -> bool:
        if self.wants_retry_on_request and policy == AskForApproval.ON_REQUEST:
            return True
        if self.wants_under_never and policy == AskForApproval.NEVER:
            return True
        return super().wants_no_sandbox_approval(policy)

    def network_approval_spec(self, req: Call, turn: TurnContext) -> NetworkApprovalSpec | None:
        return req.network_spec

    async def run(self, req: Call, attempt: SandboxAttempt, turn: TurnContext) -> str:
        req.attempts.append(attempt)
        outcome = req.outcomes[len(req.attempts) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class ScriptedUser:
    """The only stand-in for a person: answers prompts from a list."""

    def __init__(self, *answers: ReviewDecision) -> None:
        self.answers = list(answers)
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else ReviewDecision.DENIED


def _turn(
    user: ScriptedUser,
    policy: AskForApproval,
    profile: PermissionProfile = RESTRICTED,
    **kwargs: object,
) -> TurnContext:
    return TurnContext(
        environment=ENV,
        approval_policy=policy,
        permission_profile=profile,
        approver=user,
        **kwargs,  # type: ignore[arg-type]
    )


def denied(payload: NetworkPolicyDecisionPayload | None = None) -> SandboxDenied:
    return SandboxDenied("touch: cannot touch '/etc/x': Read-only file system", exit_code=1,
                         network_policy_decision=payload)  # fmt: skip


# --------------------------------------------------------------------------- step 1
async def test_forbidden_is_rejected_without_asking_or_running() -> None:
    user = ScriptedUser()
    call = Call(["ok"], requirement=Forbidden("`rm -rf /` rejected: blocked by policy"))
    with pytest.raises(Rejected, match="blocked by policy"):
        await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST)).run(ScriptedRuntime(), call)
    assert user.requests == [] and call.attempts == []


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (ReviewDecision.DENIED, Rejected, "exec command rejected by user"),
        (ReviewDecision.denied("not that"), Rejected, "not that"),
        (ReviewDecision.TIMED_OUT, Rejected, "automatic approval review timed out"),
        (ReviewDecision.ABORT, TurnAborted, "turn aborted"),
    ],
)
async def test_refused_approval_ends_the_call_before_any_attempt(
    answer: ReviewDecision, error: type[ToolError], message: str
) -> None:
    call = Call(["ok"])
    turn = _turn(ScriptedUser(answer), AskForApproval.UNLESS_TRUSTED)
    with pytest.raises(error, match=message):
        await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert call.attempts == []


async def test_invariant_7_never_policy_never_prompts_even_if_a_runtime_asks() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED)
    call = Call(["ok"], requirement=NeedsApproval())
    with pytest.raises(Rejected, match="AskForApproval is set to Never"):
        await ToolOrchestrator(_turn(user, AskForApproval.NEVER)).run(ScriptedRuntime(), call)
    assert user.requests == []


async def test_approval_request_that_cannot_be_built_is_rejected() -> None:
    runtime = ScriptedRuntime()
    runtime.fail_request = True
    with pytest.raises(Rejected, match="could not prepare approval action: no command line"):
        await ToolOrchestrator(_turn(ScriptedUser(), AskForApproval.UNLESS_TRUSTED)).run(
            runtime, Call(["ok"])
        )


async def test_strict_auto_review_sends_skipped_calls_for_review() -> None:
    user = ScriptedUser(ReviewDecision.denied("reviewer says no"))
    turn = _turn(user, AskForApproval.ON_REQUEST, strict_auto_review=True)
    call = Call(["ok"], requirement=Skip())
    with pytest.raises(Rejected, match="reviewer says no"):
        await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert [r.review_only for r in user.requests] == [True]
    assert call.attempts == []


async def test_approved_amendments_are_persisted() -> None:
    seen: list[tuple[str, ...]] = []
    user = ScriptedUser(ReviewDecision.approved_execpolicy_amendment(("make",)))
    turn = _turn(user, AskForApproval.UNLESS_TRUSTED, on_execpolicy_amendment=seen.append)
    result = await ToolOrchestrator(turn).run(ScriptedRuntime(), Call(["ok"]))
    assert result.output == "ok"
    assert seen == [("make",)]


# --------------------------------------------------------------------------- first attempt
async def test_skip_runs_sandboxed_without_asking() -> None:
    user = ScriptedUser()
    call = Call(["ok"])
    result = await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST, FULL_ACCESS)).run(
        ScriptedRuntime(), call
    )
    assert result.output == "ok" and user.requests == []
    assert len(result.attempts) == 1


async def test_invariant_10_deny_read_profile_keeps_the_sandbox_on_explicit_escalation() -> None:
    call = Call(["ok"], sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED)
    turn = _turn(ScriptedUser(ReviewDecision.APPROVED), AskForApproval.ON_REQUEST, DENY_READ)
    result = await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert result.attempt.sandbox_requested is True
    assert sandbox_context(result.attempt) is not None


async def test_explicit_escalation_bypasses_the_sandbox_on_the_first_attempt() -> None:
    call = Call(["ok"], sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED)
    turn = _turn(ScriptedUser(ReviewDecision.APPROVED), AskForApproval.ON_REQUEST)
    result = await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert result.attempt.sandbox_requested is False
    assert result.attempt.is_escalated()


async def test_invariant_10_owner_network_policy_refuses_escalation() -> None:
    call = Call(["ok"], sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED)
    turn = _turn(
        ScriptedUser(ReviewDecision.APPROVED),
        AskForApproval.ON_REQUEST,
        managed_network=ManagedNetwork(owner_policy=True),
    )
    with pytest.raises(Rejected) as info:
        await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert info.value.message == OWNER_POLICY_ESCALATION
    assert call.attempts == []


# --------------------------------------------------------------------------- retry
async def test_invariant_8_retry_prompt_is_skipped_for_an_already_approved_call() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED)
    call = Call([denied(), "retried"])
    result = await ToolOrchestrator(_turn(user, AskForApproval.UNLESS_TRUSTED)).run(
        ScriptedRuntime(), call
    )
    assert result.output == "retried"
    assert len(user.requests) == 1 and not user.requests[0].retry
    first, second = result.attempts
    assert first.sandbox_requested and not second.sandbox_requested
    assert second.sandbox is SandboxType.NONE and not second.first_attempt
    assert first.process_id != second.process_id  # invariant 2


async def test_invariant_8_strict_auto_review_forces_a_fresh_retry_prompt() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED, ReviewDecision.APPROVED)
    turn = _turn(user, AskForApproval.UNLESS_TRUSTED, strict_auto_review=True)
    result = await ToolOrchestrator(turn).run(ScriptedRuntime(), Call([denied(), "retried"]))
    assert result.output == "retried"
    assert [r.retry for r in user.requests] == [False, True]
    assert user.requests[1].reason == "command failed; retry without sandbox?"


async def test_invariant_8_network_context_forces_a_fresh_retry_prompt() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED)
    turn = _turn(user, AskForApproval.ON_REQUEST, managed_network=ManagedNetwork())
    call = Call([denied(ASK), "ok"], requirement=Skip())
    result = await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert result.output == "ok"
    (prompt,) = user.requests
    assert prompt.retry
    assert prompt.reason == 'Network access to "example.com" is blocked by policy.'
    assert prompt.network_context is not None and prompt.network_context.host == "example.com"


async def test_retry_prompt_denied_returns_rejected_and_no_second_attempt() -> None:
    runtime = ScriptedRuntime(wants_retry_on_request=True)
    user = ScriptedUser(ReviewDecision.DENIED)
    call = Call([denied(), "never"], requirement=Skip())
    with pytest.raises(Rejected, match="exec command rejected by user"):
        await ToolOrchestrator(_turn(user, AskForApproval.ON_REQUEST)).run(runtime, call)
    assert len(call.attempts) == 1


async def test_retry_prompt_goes_through_the_session_cache() -> None:
    runtime = ScriptedRuntime(wants_retry_on_request=True)
    user = ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION)
    turn = _turn(user, AskForApproval.ON_REQUEST)
    orchestrator = ToolOrchestrator(turn)
    await orchestrator.run(runtime, Call([denied(), "ok"], requirement=Skip()))
    await orchestrator.run(runtime, Call([denied(), "ok"], requirement=Skip()))
    assert len(user.requests) == 1


async def test_invariant_7_never_with_a_tool_override_retries_without_prompting() -> None:
    user = ScriptedUser()
    call = Call([denied(), "ok"])
    result = await ToolOrchestrator(_turn(user, AskForApproval.NEVER)).run(
        ScriptedRuntime(wants_under_never=True), call
    )
    assert result.output == "ok" and user.requests == []


async def test_invariant_7_never_does_not_prompt_for_a_network_context_retry() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED)
    turn = _turn(user, AskForApproval.NEVER, managed_network=ManagedNetwork())
    with pytest.raises(SandboxDenied):
        await ToolOrchestrator(turn).run(
            ScriptedRuntime(wants_under_never=True), Call([denied(ASK), "ok"])
        )
    assert user.requests == []


@pytest.mark.parametrize(
    "error",
    [
        Rejected("no"),
        ExecFailed("executor gone"),
        SandboxTimeout("slow"),
        SandboxSignal(9),
        TurnAborted("stop"),
    ],
)
async def test_invariant_6_only_sandbox_denials_retry(error: ToolError) -> None:
    user = ScriptedUser(ReviewDecision.APPROVED, ReviewDecision.APPROVED)
    call = Call([error, "never"])
    with pytest.raises(type(error)):
        await ToolOrchestrator(_turn(user, AskForApproval.UNLESS_TRUSTED)).run(
            ScriptedRuntime(), call
        )
    assert len(call.attempts) == 1
    assert [r.retry for r in user.requests] == [False]


async def test_invariant_6_there_is_never_a_third_attempt() -> None:
    call = Call([denied(), denied(), "never"])
    turn = _turn(ScriptedUser(ReviewDecision.APPROVED), AskForApproval.UNLESS_TRUSTED)
    with pytest.raises(SandboxDenied):
        await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert len(call.attempts) == 2


async def test_invariant_4_transport_loss_during_an_attempt_is_final() -> None:
    """A start that may or may not have happened is not replayed, not even as a retry."""
    call = Call([ExecServerTransportClosed("JSON-RPC transport closed"), "never"])
    turn = _turn(ScriptedUser(ReviewDecision.APPROVED), AskForApproval.UNLESS_TRUSTED)
    with pytest.raises(ExecFailed, match="transport closed"):
        await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    assert len(call.attempts) == 1


# ------------------------------------------------------------------ property over the space
POLICIES = [
    AskForApproval.NEVER,
    AskForApproval.ON_REQUEST,
    AskForApproval.UNLESS_TRUSTED,
    GRANULAR_ON,
    GRANULAR_OFF,
]
PROFILES = [RESTRICTED, DENY_READ, FULL_ACCESS, DisabledProfile()]
DENIALS: list[Outcome] = [
    "ok",
    "denial",
    "network-denial",
    Rejected("no"),
    ExecFailed("x"),
    SandboxTimeout(),
]


@pytest.mark.parametrize(
    ("policy", "patch_like", "profile", "first", "approved", "strict"),
    list(
        itertools.product(POLICIES, [False, True], PROFILES, DENIALS, [False, True], [False, True])
    ),
)
async def test_invariant_6_7_10_orchestrator_property(
    policy: AskForApproval,
    patch_like: bool,
    profile: PermissionProfile,
    first: Outcome,
    approved: bool,
    strict: bool,
) -> None:
    """At most two attempts; Rejected never retried; the retry carries a sandbox
    context only for a network-context retry under a deny-read profile; under
    NEVER nothing is asked after the first step."""
    managed = ManagedNetwork() if first == "network-denial" else None
    outcome: Outcome
    if first == "denial":
        outcome = denied()
    elif first == "network-denial":
        outcome = denied(ASK)
    else:
        outcome = first
    requirement = NeedsApproval() if approved else Skip()
    call = Call([outcome, "second", "third"], requirement=requirement)
    user = ScriptedUser(*[ReviewDecision.APPROVED] * 3)
    turn = _turn(user, policy, profile, strict_auto_review=strict, managed_network=managed)
    runtime = ScriptedRuntime(wants_retry_on_request=patch_like)
    try:
        await ToolOrchestrator(turn).run(runtime, call)
    except ToolError:
        pass
    assert len(call.attempts) <= 2
    if isinstance(outcome, Rejected | ExecFailed | SandboxTimeout) or outcome == "ok":
        assert len(call.attempts) <= 1
    if len(call.attempts) == 2:
        retry = call.attempts[1]
        assert retry.sandbox is SandboxType.NONE
        keeps_context = retry.sandbox_requested
        assert keeps_context == (profile == DENY_READ and first == "network-denial")
        assert call.attempts[0].process_id != retry.process_id
    if policy == AskForApproval.NEVER:
        assert not any(r.retry for r in user.requests)


# ------------------------------------------------------------------ network approvals in run
def _network_turn(user: ScriptedUser) -> tuple[TurnContext, NetworkApprovalService]:
    service = NetworkApprovalService(
        approver=user, policy=AskForApproval.ON_REQUEST, profile=RESTRICTED
    )
    turn = _turn(
        user, AskForApproval.ON_REQUEST, managed_network=ManagedNetwork(), network_approvals=service
    )
    return turn, service


class DenyingRuntime(ScriptedRuntime):
    """Asks the proxy about a host during its run, like a command reaching out."""

    async def run(self, req: Call, attempt: SandboxAttempt, turn: TurnContext) -> str:
        assert turn.network_approvals is not None
        decision = await turn.network_approvals.on_proxy_request(
            ENV.environment_id, "blocked.example", "https", 443
        )
        assert not decision.allowed
        assert attempt.network_denial_cancellation is not None
        assert attempt.network_denial_cancellation.is_set()
        return await super().run(req, attempt, turn)


async def test_deferred_success_hands_back_the_registration() -> None:
    turn, service = _network_turn(ScriptedUser())
    spec = NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, "curl x")
    call = Call(["ok"], requirement=Skip(), network_spec=spec)
    result = await ToolOrchestrator(turn).run(ScriptedRuntime(), call)
    deferred = result.deferred_network_approval
    assert deferred is not None and service.is_active(deferred.registration_id)
    assert service.registrations_for_process(ENV.environment_id, result.attempt.process_id) == [
        deferred.registration_id
    ]
    assert await deferred.finish() is None
    assert not service.is_active(deferred.registration_id)


async def test_immediate_success_with_a_network_denial_fails_the_call() -> None:
    turn, service = _network_turn(ScriptedUser(ReviewDecision.DENIED))
    spec = NetworkApprovalSpec(NetworkApprovalMode.IMMEDIATE, "pip install x")
    with pytest.raises(Rejected, match="rejected by user"):
        await ToolOrchestrator(turn).run(
            DenyingRuntime(), Call(["ok"], requirement=Skip(), network_spec=spec)
        )
    assert service.active_calls_for_environment(ENV.environment_id) == []


async def test_network_denial_replaces_the_attempt_error() -> None:
    turn, service = _network_turn(ScriptedUser(ReviewDecision.DENIED))
    spec = NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, "curl x")
    with pytest.raises(Rejected, match="rejected by user"):
        await ToolOrchestrator(turn).run(
            DenyingRuntime(), Call([ExecFailed("exit 6")], requirement=Skip(), network_spec=spec)
        )
    assert service.active_calls_for_environment(ENV.environment_id) == []


async def test_failed_attempt_without_network_denial_keeps_its_error_and_unregisters() -> None:
    turn, service = _network_turn(ScriptedUser())
    spec = NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, "curl x")
    with pytest.raises(ExecFailed, match="exit 6"):
        await ToolOrchestrator(turn).run(
            ScriptedRuntime(), Call([ExecFailed("exit 6")], requirement=Skip(), network_spec=spec)
        )
    assert service.active_calls_for_environment(ENV.environment_id) == []
