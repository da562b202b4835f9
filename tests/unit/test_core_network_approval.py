"""Network approvals: registrations, dedupe, host caches, finish semantics
(cases ported from the reference's network-approval tests).

``test_invariant_N_...``: guarantee N of docs/core-guarantees.md.
"""

from __future__ import annotations

import asyncio

import pytest

from execserver.core.approvals import ApprovalRequest
from execserver.core.decisions import ReviewDecision
from execserver.core.errors import Rejected
from execserver.core.network_approval import (
    CANCELLED_BEFORE_DECISION,
    NETWORK_DENIED_MESSAGE,
    ActiveNetworkApproval,
    DenialSource,
    HostKey,
    NetworkApprovalMode,
    NetworkApprovalService,
    NetworkApprovalSpec,
    NetworkDenial,
    ProxyDecision,
    network_approval_flow_enabled,
)
from execserver.core.permissions import (
    DisabledProfile,
    ExternalProfile,
    ManagedProfile,
    NetworkAccess,
    PermissionProfile,
    UnrestrictedFs,
    read_only_profile,
    workspace_write_profile,
)
from execserver.core.policy import AskForApproval, GranularApprovalConfig

DEFERRED = NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, command="curl https://example.com")
IMMEDIATE = NetworkApprovalSpec(NetworkApprovalMode.IMMEDIATE, command="pip install x")


class ScriptedUser:
    """Stands in for the user: answers with ``answer`` once ``release`` is set."""

    def __init__(self, answer: ReviewDecision = ReviewDecision.APPROVED) -> None:
        self.answer = answer
        self.requests: list[ApprovalRequest] = []
        self.release = asyncio.Event()
        self.release.set()
        self.asked = asyncio.Event()

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        self.requests.append(request)
        self.asked.set()
        await self.release.wait()
        return self.answer


def _service(
    user: ScriptedUser,
    *,
    policy: AskForApproval = AskForApproval.ON_REQUEST,
    profile: PermissionProfile | None = None,
) -> NetworkApprovalService:
    return NetworkApprovalService(
        approver=user, policy=policy, profile=profile or workspace_write_profile()
    )


def _begin(
    service: NetworkApprovalService,
    env: str = "env-a",
    spec: NetworkApprovalSpec = DEFERRED,
) -> ActiveNetworkApproval:
    active = service.begin(spec, environment_id=env, managed_network_active=True)
    assert active is not None
    return active


def test_begin_needs_managed_network() -> None:
    service = _service(ScriptedUser())
    assert service.begin(DEFERRED, environment_id="e", managed_network_active=False) is None
    assert _begin(service).mode is NetworkApprovalMode.DEFERRED


async def test_pending_approvals_are_deduped_per_host_protocol_and_port() -> None:
    user = ScriptedUser()
    user.release.clear()
    service = _service(user)
    _begin(service)
    first = asyncio.create_task(service.on_proxy_request("env-a", "Example.com", "https", 443))
    second = asyncio.create_task(service.on_proxy_request("env-a", "example.com", "https", 443))
    await user.asked.wait()
    user.release.set()
    assert await first == await second == ProxyDecision(True)
    assert len(user.requests) == 1


async def test_pending_approvals_do_not_dedupe_across_ports() -> None:
    user = ScriptedUser()
    service = _service(user)
    await asyncio.gather(
        service.on_proxy_request("env-a", "example.com", "https", 443),
        service.on_proxy_request("env-a", "example.com", "https", 8443),
    )
    assert len(user.requests) == 2


async def test_pending_approvals_do_not_dedupe_across_environments() -> None:
    user = ScriptedUser()
    service = _service(user)
    await asyncio.gather(
        service.on_proxy_request("env-a", "example.com", "https", 443),
        service.on_proxy_request("env-b", "example.com", "https", 443),
    )
    assert len(user.requests) == 2


async def test_pending_waiters_receive_owner_decision() -> None:
    user = ScriptedUser(ReviewDecision.denied("no network today"))
    user.release.clear()
    service = _service(user)
    waiters = [
        asyncio.create_task(service.on_proxy_request("env-a", "h.example", "http", 80))
        for _ in range(5)
    ]
    await user.asked.wait()
    user.release.set()
    results = await asyncio.gather(*waiters)
    assert results == [ProxyDecision(False, "no network today")] * 5
    assert len(user.requests) == 1


async def test_session_approved_hosts_are_scoped_by_environment() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION)
    service = _service(user)
    await service.on_proxy_request("env-a", "example.com", "https", 443)
    assert service.session_approved_hosts == {HostKey("env-a", "example.com", "https", 443)}
    await service.on_proxy_request("env-a", "example.com", "https", 443)
    assert len(user.requests) == 1
    await service.on_proxy_request("env-b", "example.com", "https", 443)
    assert len(user.requests) == 2


async def test_session_approved_hosts_preserve_protocol_and_port_scope() -> None:
    user = ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION)
    service = _service(user)
    await service.on_proxy_request("env-a", "example.com", "https", 443)
    await service.on_proxy_request("env-a", "example.com", "http", 443)
    await service.on_proxy_request("env-a", "example.com", "https", 444)
    assert len(user.requests) == 3


async def test_sync_session_approved_hosts_to_replaces_existing_target_hosts() -> None:
    source = _service(ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION))
    target = _service(ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION))
    await source.on_proxy_request("env-a", "new.example", "https", 443)
    await target.on_proxy_request("env-a", "old.example", "https", 443)
    source.sync_session_approved_hosts_to(target)
    assert target.session_approved_hosts == {HostKey("env-a", "new.example", "https", 443)}


async def test_allow_once_and_allow_for_session_both_allow_network() -> None:
    once, session = (
        ScriptedUser(ReviewDecision.APPROVED),
        ScriptedUser(ReviewDecision.APPROVED_FOR_SESSION),
    )
    once_service, session_service = _service(once), _service(session)
    assert await once_service.on_proxy_request("e", "h", "http", 80) == ProxyDecision(True)
    assert await session_service.on_proxy_request("e", "h", "http", 80) == ProxyDecision(True)
    assert once_service.session_approved_hosts == frozenset()
    assert session_service.session_approved_hosts == {HostKey("e", "h", "http", 80)}


async def test_network_policy_amendments_are_cached_both_ways() -> None:
    allow = _service(ScriptedUser(ReviewDecision.network_policy_amendment("h", "allow")))
    assert await allow.on_proxy_request("e", "h", "http", 80) == ProxyDecision(True)
    assert allow.session_approved_hosts == {HostKey("e", "h", "http", 80)}
    user = ScriptedUser(ReviewDecision.network_policy_amendment("h", "deny"))
    deny = _service(user)
    assert not (await deny.on_proxy_request("e", "h", "http", 80)).allowed
    assert not (await deny.on_proxy_request("e", "h", "http", 80)).allowed
    assert len(user.requests) == 1
    assert deny.session_denied_hosts == {HostKey("e", "h", "http", 80)}


@pytest.mark.parametrize(
    ("policy", "enabled"),
    [
        (AskForApproval.NEVER, False),
        (AskForApproval.ON_REQUEST, True),
        (AskForApproval.UNLESS_TRUSTED, True),
        (AskForApproval.granular(GranularApprovalConfig()), True),
    ],
)
async def test_only_never_policy_disables_network_approval_flow(
    policy: AskForApproval, enabled: bool
) -> None:
    assert network_approval_flow_enabled(policy, workspace_write_profile()) is enabled
    user = ScriptedUser()
    service = _service(user, policy=policy)
    decision = await service.on_proxy_request("e", "h", "http", 80)
    assert decision.allowed is enabled
    assert len(user.requests) == (1 if enabled else 0)


@pytest.mark.parametrize(
    ("profile", "enabled"),
    [
        (read_only_profile(), True),
        (workspace_write_profile(), True),
        (ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED), False),
        (DisabledProfile(), False),
        (ExternalProfile(), False),
    ],
)
def test_network_approval_flow_is_limited_to_restricted_sandbox_modes(
    profile: PermissionProfile, enabled: bool
) -> None:
    assert network_approval_flow_enabled(AskForApproval.ON_REQUEST, profile) is enabled


async def test_active_call_preserves_triggering_command_context() -> None:
    user = ScriptedUser()
    service = _service(user)
    active = _begin(service)
    assert active.command == "curl https://example.com"
    await service.on_proxy_request("env-a", "example.com", "https", 443)
    assert user.requests[0].command == ("curl https://example.com",)
    assert user.requests[0].reason == 'Network access to "example.com" is blocked by policy.'


def test_active_call_attribution_returns_all_matching_environment_candidates() -> None:
    service = _service(ScriptedUser())
    a1, a2 = _begin(service, "env-a"), _begin(service, "env-a")
    _begin(service, "env-b")
    candidates = service.active_calls_for_environment("env-a")
    assert {c.registration_id for c in candidates} == {a1.registration_id, a2.registration_id}


def test_record_blocked_request_sets_policy_outcome_for_owner_call() -> None:
    service = _service(ScriptedUser())
    active = _begin(service)
    service.record_blocked_request(active.registration_id)
    assert active.outcome == NetworkDenial(DenialSource.POLICY, NETWORK_DENIED_MESSAGE)
    assert active.cancelled.is_set()


def test_blocked_request_policy_does_not_override_user_denial_outcome() -> None:
    service = _service(ScriptedUser())
    active = _begin(service)
    user_denial = NetworkDenial(DenialSource.USER, "rejected by user")
    service.record_call_outcome(active.registration_id, user_denial)
    service.record_blocked_request(active.registration_id)
    assert active.outcome == user_denial


def test_finish_call_returns_denial_and_unregisters_active_call() -> None:
    service = _service(ScriptedUser())
    active = _begin(service)
    service.record_blocked_request(active.registration_id)
    assert service.finish_call(active.registration_id) == active.outcome
    assert not service.is_active(active.registration_id)
    assert service.finish_call(active.registration_id) is None


def test_record_call_outcome_ignores_inactive_call() -> None:
    service = _service(ScriptedUser())
    active = _begin(service)
    service.finish_call(active.registration_id)
    service.record_call_outcome(active.registration_id, NetworkDenial(DenialSource.USER, "no"))
    assert active.outcome is None
    assert not active.cancelled.is_set()


async def test_user_denial_cancels_the_owner_call_token() -> None:
    service = _service(ScriptedUser(ReviewDecision.DENIED))
    active = _begin(service)
    assert not (await service.on_proxy_request("env-a", "h", "http", 80)).allowed
    assert active.cancelled.is_set()
    assert active.outcome == NetworkDenial(DenialSource.USER, "rejected by user")


async def test_never_policy_blocks_and_cancels_without_prompting() -> None:
    user = ScriptedUser()
    service = _service(user, policy=AskForApproval.NEVER)
    active = _begin(service)
    await service.on_proxy_request("env-a", "h", "http", 80)
    assert active.cancelled.is_set()
    assert user.requests == []


async def test_finishing_abandons_a_pending_decision() -> None:
    user = ScriptedUser()
    user.release.clear()
    service = _service(user)
    active = _begin(service)
    request = asyncio.create_task(service.on_proxy_request("env-a", "h", "http", 80))
    await user.asked.wait()
    service.finish_call(active.registration_id)
    assert await request == ProxyDecision(False, CANCELLED_BEFORE_DECISION)


# --------------------------------------------------------------------------- finish semantics
async def test_deferred_finish_reuses_denial_result_after_first_consumer() -> None:
    """Invariant 14: finished exactly once; later consumers see the same result."""
    service = _service(ScriptedUser())
    deferred = service.into_deferred(_begin(service))
    service.record_blocked_request(deferred.registration_id)
    first = await deferred.finish()
    assert first is not None and first.source is DenialSource.POLICY
    assert await deferred.finish() == first
    assert not service.is_active(deferred.registration_id)


async def test_invariant_14_unregister_after_finish_is_a_no_op_and_vice_versa() -> None:
    service = _service(ScriptedUser())
    deferred = service.into_deferred(_begin(service))
    deferred.unregister()
    assert deferred.done
    assert await deferred.finish() is None
    other = service.into_deferred(_begin(service))
    assert await other.finish() is None
    other.unregister()
    assert other.done


async def test_invariant_14_finish_grace_observes_a_denial_landing_after_exit() -> None:
    service = _service(ScriptedUser())
    deferred = service.into_deferred(_begin(service))

    async def late_denial() -> None:
        await asyncio.sleep(0)
        service.record_blocked_request(deferred.registration_id)

    task = asyncio.create_task(late_denial())
    outcome = await deferred.finish(grace=5.0)
    await task
    assert outcome is not None and outcome.message == NETWORK_DENIED_MESSAGE


async def test_invariant_14_denial_runs_the_watcher_exactly_once() -> None:
    service = _service(ScriptedUser(ReviewDecision.DENIED))
    deferred = service.into_deferred(_begin(service))
    terminations: list[str] = []

    async def terminate() -> None:
        terminations.append(deferred.registration_id)

    watcher = deferred.watch(terminate)
    assert deferred.watch(terminate) is watcher
    await service.on_proxy_request("env-a", "h", "http", 80)
    await watcher
    await deferred.finish()
    assert terminations == [deferred.registration_id]


async def test_watcher_is_stopped_when_finished_without_denial() -> None:
    service = _service(ScriptedUser())
    deferred = service.into_deferred(_begin(service))
    terminations: list[str] = []

    async def terminate() -> None:
        terminations.append("x")

    watcher = deferred.watch(terminate)
    await deferred.finish()
    with pytest.raises(asyncio.CancelledError):
        await watcher
    assert terminations == []


def test_immediate_finish_turns_a_denial_into_rejected() -> None:
    service = _service(ScriptedUser())
    ok = _begin(service, spec=IMMEDIATE)
    service.finish_immediate(ok)
    denied = _begin(service, spec=IMMEDIATE)
    service.record_blocked_request(denied.registration_id)
    with pytest.raises(Rejected, match="denied by the Codex sandbox network proxy"):
        service.finish_immediate(denied)


def test_registrations_are_found_by_the_attempt_process_id() -> None:
    service = _service(ScriptedUser())
    active = service.begin(
        DEFERRED, environment_id="env-a", managed_network_active=True, process_id="7-abc"
    )
    assert active is not None
    _begin(service)
    assert service.registrations_for_process("env-a", "7-abc") == [active.registration_id]
    assert service.registrations_for_process("env-b", "7-abc") == []
    service.finish_call(active.registration_id)
    assert service.registrations_for_process("env-a", "7-abc") == []


async def test_user_denial_is_recorded_only_for_the_attributed_call() -> None:
    service = _service(ScriptedUser(ReviewDecision.DENIED))
    asking = _begin(service)
    bystander = _begin(service)
    await service.on_proxy_request(
        "env-a", "h", "http", 80, registration_ids=[asking.registration_id]
    )
    assert asking.cancelled.is_set()
    assert not bystander.cancelled.is_set()
