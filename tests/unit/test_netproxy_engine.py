"""The decision order of PolicyEngine, with a scripted decider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from execserver.netproxy import decision as d
from execserver.netproxy.engine import PolicyEngine
from execserver.netproxy.policy import NetworkPolicy
from execserver.netproxy.resolver import Resolution, Resolver
from execserver.wire.network import NetworkPolicyDecisionNotification
from tests.unit.test_netproxy_policy import config


class Decider:
    def __init__(self, answer: Any = None, *, raises: Exception | None = None, hang: bool = False):
        self.answer = answer
        self.raises = raises
        self.hang = hang
        self.asked: list[tuple[str, str, int]] = []

    async def __call__(self, protocol: str, host: str, port: int, timeout: float) -> object:
        self.asked.append((protocol, host, port))
        if self.hang:
            await asyncio.Event().wait()
        if self.raises is not None:
            raise self.raises
        return {"decision": self.answer}


def engine(
    decider: Decider | None = None, timeout_s: float | None = 5.0, **overrides: object
) -> tuple[PolicyEngine, list[NetworkPolicyDecisionNotification]]:
    notes: list[NetworkPolicyDecisionNotification] = []

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        notes.append(note)

    policy = NetworkPolicy.from_config(config(**overrides))
    resolver = Resolver({"public.test": "127.0.0.1"})
    return (
        PolicyEngine(
            policy,
            resolver,
            process_id="p",
            notify=notify,
            ask=decider,
            decision_timeout_s=timeout_s if decider is not None else None,
        ),
        notes,
    )


def http(host: str, method: str = "GET", port: int = 80) -> d.Target:
    return d.Target("http", host, port, method, "127.0.0.1:1")


async def test_allow_pattern_allows_with_one_record() -> None:
    e, notes = engine(domains={"public.test": "allow"})
    outcome = await e.check(http("Public.Test"))
    assert outcome.allowed and outcome.decision == d.BASELINE_ALLOW
    assert [(n.host, n.decision, n.source) for n in notes] == [
        ("public.test", "allow", "baseline_policy")
    ]


async def test_deny_comes_before_everything_and_never_asks() -> None:
    decider = Decider({"type": "allow"})
    e, _ = engine(decider, domains={"*.test": "deny", "public.test": "allow"})
    assert (await e.check(http("public.test"))).decision == d.DENYLIST
    assert decider.asked == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.0.0.8", "::1"])
async def test_local_destinations_are_blocked_without_asking(host: str) -> None:
    decider = Decider({"type": "allow"})
    e, _ = engine(decider, domains={"*": "allow"})
    assert (await e.check(http(host))).decision == d.NOT_ALLOWED_LOCAL
    assert decider.asked == []


async def test_exact_allow_or_local_binding_lifts_the_local_block() -> None:
    e, _ = engine(domains={"localhost": "allow"})
    assert (await e.check(http("localhost"))).allowed
    e, _ = engine(allow_local_binding=True, domains={"*": "allow"})
    assert (await e.check(http("127.0.0.1"))).allowed


async def test_hook_addresses_stand_for_public_ones() -> None:
    e, _ = engine(domains={"*.test": "allow"})
    outcome = await e.check(http("public.test"))
    assert outcome.allowed
    assert outcome.resolution is not None and outcome.resolution.from_hook


class RebindingResolver(Resolver):
    """A real-DNS stand-in whose public-looking name resolves to a private address."""

    async def resolve(self, host: str, port: int) -> Resolution:
        return Resolution(("10.1.2.3",))


async def test_a_name_resolving_to_a_private_address_is_local() -> None:
    notes: list[NetworkPolicyDecisionNotification] = []

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        notes.append(note)

    policy = NetworkPolicy.from_config(config(domains={"*.example": "allow"}))
    e = PolicyEngine(policy, RebindingResolver(), process_id="p", notify=notify)
    assert (await e.check(http("internal.example"))).decision == d.NOT_ALLOWED_LOCAL


async def test_undecided_without_decider_is_not_allowed() -> None:
    e, _ = engine(None)
    assert (await e.check(http("public.test"))).decision == d.NOT_ALLOWED


async def test_undecided_asks_with_the_request_protocol() -> None:
    decider = Decider({"type": "allow"})
    e, notes = engine(decider)
    outcome = await e.check(d.Target("https_connect", "public.test", 443, "CONNECT"))
    assert outcome.decision == d.DECIDER_ALLOW
    assert decider.asked == [("https_connect", "public.test", 443)]
    assert notes[0].policy_override is True and notes[0].protocol == "https_connect"


@pytest.mark.parametrize(
    "decider",
    [Decider(raises=RuntimeError("client error answer")), Decider(hang=True)],
)
async def test_error_answer_or_timeout_denies_as_unanswered(decider: Decider) -> None:
    e, notes = engine(decider, timeout_s=0.05)
    assert (await e.check(http("public.test"))).decision == d.DECIDER_UNANSWERED
    assert [(n.decision, n.source, n.reason) for n in notes] == [("deny", "decider", "not_allowed")]


async def test_review_domains_ask_even_when_allowed() -> None:
    decider = Decider({"type": "deny", "reason": "reviewed"})
    e, _ = engine(decider, domains={"public.test": "allow"}, review_domains=["public.test"])
    outcome = await e.check(http("public.test"))
    assert (outcome.decision.decision, outcome.decision.reason) == ("deny", "reviewed")
    assert decider.asked == [("http", "public.test", 80)]


async def test_limited_mode_guards_after_the_domain_decision() -> None:
    e, notes = engine(mode="limited", domains={"public.test": "allow"})
    assert (await e.check(http("public.test", "HEAD"))).allowed
    assert (await e.check(http("public.test", "PUT"))).decision == d.METHOD_NOT_ALLOWED
    connect = await e.check(d.Target("https_connect", "public.test", 443, "CONNECT"))
    assert connect.decision == d.MITM_REQUIRED
    socks = await e.check(d.Target("socks5_tcp", "public.test", 443))
    assert socks.decision == d.METHOD_NOT_ALLOWED
    assert [(n.scope, n.decision) for n in notes] == [
        ("domain", "allow"),
        ("domain", "allow"),
        ("non_domain", "deny"),
        ("domain", "allow"),
        ("non_domain", "deny"),
        ("non_domain", "deny"),  # SOCKS in limited mode: refused before the domain
    ]


async def test_a_failing_notifier_does_not_change_the_decision() -> None:
    async def broken(note: NetworkPolicyDecisionNotification) -> None:
        raise ConnectionError("detached")

    policy = NetworkPolicy.from_config(config(domains={"public.test": "allow"}))
    e = PolicyEngine(policy, Resolver({"public.test": "127.0.0.1"}), process_id="p", notify=broken)
    assert (await e.check(http("public.test"))).allowed
