"""Decide one request: baseline policy, local-address block, the client's
decider, then the mode guard. Each final decision is reported once.

Order (observed on the reference):

1. SOCKS in limited mode: ``mode_guard`` deny before anything else;
   (ours) a host outside a tenant's ``network_allow`` ceiling: ``not_allowed``,
   the decider never asked;
2. a ``deny`` pattern: ``denied``;
3. a local/private destination without ``allowLocalBinding``, unless the host
   is allowed by an exact pattern: ``not_allowed_local`` (the decider is not
   asked: a user cannot lift this block);
4. an ``allow`` pattern: allowed, unless the host is in ``reviewDomains``;
5. otherwise the decider when ``policyDecisionTimeoutMs`` is set (no answer in
   time / an error answer: deny ``not_allowed``), else ``not_allowed``;
6. once allowed, limited mode refuses methods other than GET/HEAD/OPTIONS and
   CONNECT tunnels (a second, ``non_domain`` record).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from execserver.netproxy import decision as d
from execserver.netproxy.policy import LOCAL_NAMES, NetworkPolicy, is_local_address, normalize_host
from execserver.netproxy.resolver import Resolution, ResolveError, Resolver
from execserver.wire.network import NetworkPolicyDecisionNotification

if TYPE_CHECKING:
    from execserver.netproxy.credentials import CredentialVault
    from execserver.netproxy.upstream import UpstreamProxies

__all__ = ["Asker", "Notifier", "PolicyEngine"]

log = logging.getLogger(__name__)

# Asks the client about (request protocol, host, port); returns the JSON result.
Asker = Callable[[str, str, int, float], Awaitable[object]]
Notifier = Callable[[NetworkPolicyDecisionNotification], Awaitable[None]]


class PolicyEngine:
    def __init__(
        self,
        policy: NetworkPolicy,
        resolver: Resolver,
        *,
        process_id: str,
        notify: Notifier,
        ask: Asker | None = None,
        decision_timeout_s: float | None = None,
    ) -> None:
        self.policy = policy
        self._resolver = resolver
        self._process_id = process_id
        self._notify = notify
        self._ask = ask if decision_timeout_s else None
        self._timeout = decision_timeout_s or 0.0
        # allowUpstreamProxy: how allowed connections leave (netproxy.upstream).
        self.upstream: UpstreamProxies | None = None
        # enableSocks5Udp: SOCKS UDP ASSOCIATE is served (netproxy.socks_udp).
        self.udp_associate = False
        # A tenant's proxy: the uid whose sockets alone may use its SOCKS5 UDP relay
        # (netproxy.peers; None: the daemon's own proxy, any local sender).
        self.udp_owner: int | None = None
        # credentialMasking: the secrets swapped into allowed requests.
        self.credentials: CredentialVault | None = None

    async def check(self, target: d.Target) -> d.Outcome:
        target = d.Target(
            target.protocol, normalize_host(target.host), target.port, target.method, target.client
        )
        outcome = await self._domain_decision(target)
        await self._report(target, outcome.decision)
        if not outcome.allowed:
            return outcome
        guard = self._mode_guard(target)
        if guard is not None:
            await self._report(target, guard)
            return d.Outcome(guard)
        return outcome

    async def report_unix_socket(self, target: d.Target, allowed: bool) -> None:
        await self._report(target, d.BASELINE_ALLOW if allowed else d.UNIX_SOCKET_DENIED)

    def method_guard(self, target: d.Target) -> d.Decision | None:
        """The limited-mode refusal for ``target`` (None when it may proceed)."""
        return self._mode_guard(target)

    async def report_guard(self, target: d.Target, decision: d.Decision) -> None:
        await self._report(target, decision)

    async def _domain_decision(self, target: d.Target) -> d.Outcome:
        policy, host = self.policy, target.host
        if target.protocol in ("socks5_tcp", "socks5_udp") and policy.mode == "limited":
            return d.Outcome(d.METHOD_NOT_ALLOWED)
        if policy.outside_ceiling(host):
            return d.Outcome(d.OUTSIDE_CEILING)
        if policy.denied(host):
            return d.Outcome(d.DENYLIST)
        resolution: Resolution | None = None
        decided = False
        if not policy.allow_local_binding and not policy.explicitly_allowed(host):
            resolution = await self._resolve(target)
            decided = True
            if _is_local(host, resolution):
                return d.Outcome(d.NOT_ALLOWED_LOCAL)
        if policy.allowed(host) and not policy.needs_review(host):
            return d.Outcome(d.BASELINE_ALLOW, resolution, decided)
        if self._ask is None:
            return d.Outcome(d.NOT_ALLOWED)
        answer = await self._ask_client(target)
        return d.Outcome(answer, resolution, decided)

    async def _ask_client(self, target: d.Target) -> d.Decision:
        assert self._ask is not None
        try:
            async with asyncio.timeout(self._timeout):
                result = await self._ask(target.protocol, target.host, target.port, self._timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # timeout, error answer, detached session: deny
            log.info("policy request for %s:%s denied: %r", target.host, target.port, exc)
            return d.DECIDER_UNANSWERED
        decision = result.get("decision") if isinstance(result, dict) else None
        return d.decider_answer(decision)

    def _mode_guard(self, target: d.Target) -> d.Decision | None:
        if self.policy.mode != "limited":
            return None
        if target.protocol == "https_connect":
            return d.MITM_REQUIRED
        if target.method is not None and not self.policy.method_allowed(target.method):
            return d.METHOD_NOT_ALLOWED
        return None

    async def _resolve(self, target: d.Target) -> Resolution | None:
        try:
            return await self._resolver.resolve(target.host, target.port)
        except ResolveError:
            return None  # decided by name; connecting will fail later (502)

    async def resolve_for_connect(self, outcome: d.Outcome, target: d.Target) -> Resolution:
        """Where to connect: the addresses the decision was made on. A name that
        failed to resolve at decision time is not looked up again (a second
        answer could be a local address the block never saw)."""
        if outcome.resolution is not None:
            return outcome.resolution
        if outcome.addresses_decided:
            raise ResolveError(f"{target.host} did not resolve when the request was checked")
        return await self._resolver.resolve(target.host, target.port)

    async def _report(self, target: d.Target, decision: d.Decision) -> None:
        try:
            await self._notify(d.notification(self._process_id, target, decision))
        except Exception:  # an audit record is best effort
            log.debug("policyDecision notification dropped", exc_info=True)


def _is_local(host: str, resolution: Resolution | None) -> bool:
    if host in LOCAL_NAMES or is_local_address(host):
        return True
    if resolution is None or resolution.from_hook:
        return False
    return any(is_local_address(a) for a in resolution.addresses)
