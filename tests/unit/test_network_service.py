"""NetworkPolicyResponder: the client's answer to network/policyRequest."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from execserver.core.approvals import ApprovalRequest
from execserver.core.decisions import ReviewDecision
from execserver.core.network_approval import (
    NetworkApprovalMode,
    NetworkApprovalService,
    NetworkApprovalSpec,
)
from execserver.core.network_service import (
    ANSWER_TIMEOUT_MESSAGE,
    NetworkPolicyResponder,
    answer_deadline,
)
from execserver.core.permissions import DisabledProfile, workspace_write_profile
from execserver.core.policy import AskForApproval
from execserver.wire import methods as m


class User:
    def __init__(self, *answers: ReviewDecision, gate: asyncio.Event | None = None) -> None:
        self.answers = list(answers)
        self.requests: list[ApprovalRequest] = []
        self.gate = gate

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        self.requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        return self.answers.pop(0)


def service(
    user: User, policy: AskForApproval = AskForApproval.ON_REQUEST
) -> NetworkApprovalService:
    return NetworkApprovalService(approver=user, policy=policy, profile=workspace_write_profile())


def request(host: str = "upstream.test", port: int = 80, process_id: str = "p1") -> msgspec.Raw:
    params = {"processId": process_id, "request": {"protocol": "http", "host": host, "port": port}}
    return msgspec.Raw(msgspec.json.encode(params))


def decision_note(process_id: str, decision: str, source: str) -> msgspec.Raw:
    note = {
        "processId": process_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "scope": "domain",
        "decision": decision,
        "source": source,
        "reason": "denied",
        "protocol": "http",
        "host": "blocked.test",
        "port": 80,
        "policyOverride": False,
    }
    return msgspec.Raw(msgspec.json.encode(note))


def begin(svc: NetworkApprovalService, env: str = "env-1", process_id: str = "") -> str:
    active = svc.begin(
        NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, command="curl x"),
        environment_id=env,
        managed_network_active=True,
        process_id=process_id,
    )
    assert active is not None
    return active.registration_id


async def test_allow_once_asks_every_time_and_allows() -> None:
    user = User(ReviewDecision.APPROVED, ReviewDecision.APPROVED)
    svc = service(user)
    begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    assert await responder.answer(request()) == {"decision": {"type": "allow"}}
    assert await responder.answer(request()) == {"decision": {"type": "allow"}}
    assert len(user.requests) == 2
    assert user.requests[0].reason == 'Network access to "upstream.test" is blocked by policy.'
    assert user.requests[0].command == ("curl x",)


async def test_allow_for_session_is_cached_per_host_protocol_and_port() -> None:
    user = User(ReviewDecision.APPROVED_FOR_SESSION, ReviewDecision.DENIED)
    svc = service(user)
    begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    assert await responder.answer(request()) == {"decision": {"type": "allow"}}
    assert await responder.answer(request()) == {"decision": {"type": "allow"}}
    assert len(user.requests) == 1
    denied = await responder.answer(request(port=8080))  # another port is another key
    assert denied["decision"]["type"] == "deny"  # type: ignore[index]
    assert len(user.requests) == 2


async def test_denial_is_a_deny_with_a_reason_and_cancels_the_call() -> None:
    user = User(ReviewDecision.denied("no network for you"))
    svc = service(user)
    registration = begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    result = await responder.answer(request())
    assert result == {"decision": {"type": "deny", "reason": "no network for you"}}
    (active,) = svc.active_calls_for_environment("env-1")
    assert active.registration_id == registration and active.cancelled.is_set()


async def test_never_policy_denies_without_asking() -> None:
    user = User()
    svc = service(user, AskForApproval.NEVER)
    begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    result = await responder.answer(request())
    assert result["decision"]["type"] == "deny"  # type: ignore[index]
    assert user.requests == []


async def test_no_service_denies() -> None:
    responder = NetworkPolicyResponder(lambda: None, environment_id="env-1")
    result = await responder.answer(request())
    assert result["decision"]["type"] == "deny"  # type: ignore[index]


async def test_slow_approver_is_answered_deny_before_the_deadline_then_cached() -> None:
    gate = asyncio.Event()
    user = User(ReviewDecision.APPROVED_FOR_SESSION, gate=gate)
    svc = service(user)
    begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1", decision_timeout_ms=100)
    result = await responder.answer(request())
    assert result == {"decision": {"type": "deny", "reason": ANSWER_TIMEOUT_MESSAGE}}
    gate.set()  # the user answers late: the decision still lands in the cache
    for _ in range(100):
        if svc.session_approved_hosts:
            break
        await asyncio.sleep(0)
    assert await responder.answer(request()) == {"decision": {"type": "allow"}}
    assert len(user.requests) == 1


@pytest.mark.parametrize(
    ("timeout_ms", "expected"), [(None, None), (0, None), (1000, 0.75), (10000, 8.0)]
)
def test_answer_deadline_leaves_a_margin(timeout_ms: int | None, expected: float | None) -> None:
    assert answer_deadline(timeout_ms) == expected


async def test_bound_process_is_attributed_to_its_own_registration() -> None:
    user = User(ReviewDecision.denied("no"))
    svc = service(user)
    first, second = begin(svc), begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    responder.bind("p2", second)
    await responder.answer(request(process_id="p2"))
    assert user.requests[0].details["registration_ids"] == [second]
    cancelled = {
        a.registration_id: a.cancelled.is_set() for a in svc.active_calls_for_environment("env-1")
    }
    assert cancelled == {first: False, second: True}


async def test_policy_block_reported_for_a_bound_process_cancels_its_call() -> None:
    svc = service(User())
    registration = begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    responder.on_decision(decision_note("p1", "deny", "baseline_policy"))  # not bound: ignored
    (active,) = svc.active_calls_for_environment("env-1")
    assert not active.cancelled.is_set()
    responder.bind("p1", registration)
    responder.on_decision(decision_note("p1", "allow", "baseline_policy"))
    responder.on_decision(decision_note("p1", "deny", "decider"))  # the service saw that one
    assert not active.cancelled.is_set()
    responder.on_decision(decision_note("p1", "deny", "baseline_policy"))
    assert active.cancelled.is_set()
    denial = svc.finish_call(registration)
    assert denial is not None and "blocked.test" in denial.message


def cancelled_calls(svc: NetworkApprovalService) -> dict[str, bool]:
    return {
        a.registration_id: a.cancelled.is_set() for a in svc.active_calls_for_environment("env-1")
    }


async def test_request_is_attributed_to_the_registration_that_runs_the_process() -> None:
    user = User(ReviewDecision.denied("no"))
    svc = service(user)
    first, second = begin(svc, process_id="p1"), begin(svc, process_id="p2")
    responder = NetworkPolicyResponder(svc, environment_id="env-1")  # nothing bound
    await responder.answer(request(process_id="p2"))
    assert user.requests[0].details["registration_ids"] == [second]
    assert cancelled_calls(svc) == {first: False, second: True}


async def test_finished_registration_no_longer_claims_its_process() -> None:
    user = User(ReviewDecision.denied("no"))
    svc = service(user)
    gone, other = begin(svc, process_id="p1"), begin(svc, process_id="p2")
    svc.finish_call(gone)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    await responder.answer(request(process_id="p1"))
    # p1 is unknown now: the request falls back to the environment's active calls.
    assert user.requests[0].details["registration_ids"] == [other]


async def test_registrations_of_another_environment_do_not_claim_the_process() -> None:
    user = User(ReviewDecision.denied("no"))
    svc = service(user)
    elsewhere = begin(svc, env="env-2", process_id="p1")
    here = begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    await responder.answer(request(process_id="p1"))
    assert user.requests[0].details["registration_ids"] == [here]
    assert svc.is_active(elsewhere)


async def test_empty_process_id_is_not_pinned_on_registrations_without_one() -> None:
    user = User(ReviewDecision.denied("no"))
    svc = service(user)
    anonymous, tracked = begin(svc), begin(svc, process_id="p2")
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    responder.on_decision(decision_note("", "deny", "baseline_policy"))
    assert cancelled_calls(svc) == {anonymous: False, tracked: False}
    await responder.answer(request(process_id=""))
    assert user.requests[0].details["registration_ids"] == [anonymous, tracked]


def test_policy_block_cancels_only_the_call_that_runs_the_process() -> None:
    svc = service(User())
    first, second = begin(svc, process_id="p1"), begin(svc, process_id="p2")
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    responder.on_decision(decision_note("p3", "deny", "baseline_policy"))  # nobody's
    assert cancelled_calls(svc) == {first: False, second: False}
    responder.on_decision(decision_note("p2", "deny", "baseline_policy"))
    assert cancelled_calls(svc) == {first: False, second: True}
    denial = svc.finish_call(second)
    assert denial is not None and "blocked.test" in denial.message
    assert svc.finish_call(first) is None


def test_explicit_bind_overrides_the_registration_lookup() -> None:
    svc = service(User())
    own, chosen = begin(svc, process_id="p1"), begin(svc)
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    responder.bind("p1", chosen)
    responder.on_decision(decision_note("p1", "deny", "baseline_policy"))
    assert cancelled_calls(svc) == {own: False, chosen: True}
    responder.unbind("p1")
    responder.on_decision(decision_note("p1", "deny", "baseline_policy"))
    assert cancelled_calls(svc) == {own: True, chosen: True}


class FakeClient:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.listeners: dict[str, Any] = {}

    def handle_server_request(self, method: str, handler: Any) -> None:
        self.handlers[method] = handler

    def add_notification_listener(self, method: str, listener: Any) -> None:
        self.listeners[method] = listener


def test_attach_registers_the_request_handler_and_the_decision_listener() -> None:
    svc = NetworkApprovalService(
        approver=User(), policy=AskForApproval.ON_REQUEST, profile=DisabledProfile()
    )
    responder = NetworkPolicyResponder(svc, environment_id="env-1")
    client = FakeClient()
    responder.attach(client)
    assert client.handlers == {m.NETWORK_POLICY_REQUEST: responder.answer}
    assert client.listeners == {m.NETWORK_POLICY_DECISION: responder.on_decision}
