"""Network approvals for attempts that run behind a managed-network proxy.

Lifecycle of one attempt's registration::

    begin -> ActiveNetworkApproval
        attempt failed              -> finish now (a denial replaces the error)
        attempt ok, IMMEDIATE mode  -> finish now (a denial fails the call)
        attempt ok, DEFERRED mode   -> DeferredNetworkApproval, kept with the live
                                       process, finished exactly once later

The proxy asks :meth:`NetworkApprovalService.on_proxy_request` about each
(host, protocol, port). Concurrent questions about the same key share one
prompt; session caches are scoped by environment, protocol and port. A denial
cancels the registration's token, and a watcher terminates the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from execserver.aio.tasks import TaskSet
from execserver.core.approvals import ApprovalRequest, Approver
from execserver.core.decisions import DecisionKind, ReviewDecision
from execserver.core.errors import Rejected
from execserver.core.network_context import NetworkApprovalContext
from execserver.core.permissions import PermissionProfile, is_restricted_fs
from execserver.core.policy import ApprovalMode, AskForApproval

__all__ = [
    "ActiveNetworkApproval",
    "DeferredNetworkApproval",
    "HostKey",
    "NetworkApprovalMode",
    "NetworkApprovalService",
    "NetworkApprovalSpec",
    "NetworkDenial",
    "ProxyDecision",
    "network_approval_flow_enabled",
]

NETWORK_DENIED_MESSAGE = "Network access was denied by the Codex sandbox network proxy."
CANCELLED_BEFORE_DECISION = "network approval was cancelled before a decision was returned"
DENIED_BY_USER = "rejected by user"


class NetworkApprovalMode(enum.Enum):
    IMMEDIATE = "immediate"  # the tool finishes before returning (one-shot shell, apply_patch)
    DEFERRED = "deferred"  # the process outlives the call (unified exec)


@dataclass(frozen=True)
class NetworkApprovalSpec:
    mode: NetworkApprovalMode
    command: str = ""  # the triggering command, shown in prompts


@dataclass(frozen=True)
class HostKey:
    environment_id: str
    host: str
    protocol: str
    port: int

    @classmethod
    def of(cls, environment_id: str, host: str, protocol: str, port: int) -> HostKey:
        return cls(environment_id, host.lower(), protocol, port)


class DenialSource(enum.Enum):
    USER = "user"
    POLICY = "policy"


@dataclass(frozen=True)
class NetworkDenial:
    source: DenialSource
    message: str


@dataclass(frozen=True)
class ProxyDecision:
    allowed: bool
    reason: str | None = None


@dataclass
class ActiveNetworkApproval:
    registration_id: str
    mode: NetworkApprovalMode
    environment_id: str
    command: str
    # The executor's processId of the attempt, for attributing its proxy's
    # network/policyRequest to this registration.
    process_id: str = ""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    outcome: NetworkDenial | None = None


def network_approval_flow_enabled(policy: AskForApproval, profile: PermissionProfile) -> bool:
    """Prompts for hosts only happen under a restricted managed profile and a
    policy that may ask at all."""
    return policy.mode is not ApprovalMode.NEVER and is_restricted_fs(profile)


@dataclass
class _Pending:
    future: asyncio.Future[ProxyDecision]
    owners: tuple[str, ...]
    task: asyncio.Task[None] | None = None


class NetworkApprovalService:
    """One per session: registrations, pending prompts and host caches."""

    def __init__(
        self, *, approver: Approver, policy: AskForApproval, profile: PermissionProfile
    ) -> None:
        self._approver = approver
        self.policy = policy
        self.profile = profile
        self._active: dict[str, ActiveNetworkApproval] = {}
        self._pending: dict[HostKey, _Pending] = {}
        self._approved: set[HostKey] = set()
        self._denied: set[HostKey] = set()
        # One prompt per host at a time, shared by every waiter for that host.
        self._decisions = TaskSet("network-approval")

    async def aclose(self) -> None:
        """End the session's prompts still pending: each waiter is told
        ``CANCELLED_BEFORE_DECISION``, and the prompts are awaited."""
        await self._decisions.aclose()

    # -- registrations ---------------------------------------------------

    def begin(
        self,
        spec: NetworkApprovalSpec,
        *,
        environment_id: str,
        managed_network_active: bool,
        process_id: str = "",
    ) -> ActiveNetworkApproval | None:
        if not managed_network_active:
            return None
        active = ActiveNetworkApproval(
            registration_id=str(uuid.uuid4()),
            mode=spec.mode,
            environment_id=environment_id,
            command=spec.command,
            process_id=process_id,
        )
        self._active[active.registration_id] = active
        return active

    def is_active(self, registration_id: str) -> bool:
        return registration_id in self._active

    def active_calls_for_environment(self, environment_id: str) -> list[ActiveNetworkApproval]:
        return [a for a in self._active.values() if a.environment_id == environment_id]

    def registrations_for_process(self, environment_id: str, process_id: str) -> list[str]:
        """Registration ids of the live attempt that runs ``process_id``."""
        return [
            a.registration_id
            for a in self._active.values()
            if a.environment_id == environment_id and a.process_id == process_id
        ]

    def record_blocked_request(self, registration_id: str, message: str | None = None) -> None:
        """The policy blocked a request of this call: remember it (a user's
        denial stays the stronger outcome) and cancel the call's token."""
        active = self._active.get(registration_id)
        if active is None:
            return
        if active.outcome is None or active.outcome.source is not DenialSource.USER:
            active.outcome = NetworkDenial(DenialSource.POLICY, message or NETWORK_DENIED_MESSAGE)
        active.cancelled.set()

    def record_call_outcome(self, registration_id: str, denial: NetworkDenial) -> None:
        active = self._active.get(registration_id)
        if active is None:
            return  # finished already: nothing left to deny
        active.outcome = denial
        active.cancelled.set()

    def finish_call(self, registration_id: str) -> NetworkDenial | None:
        """Unregister and return the call's denial, if any. Prompts still pending
        for this call alone are abandoned."""
        active = self._active.pop(registration_id, None)
        self._abandon_pending_of(registration_id)
        return None if active is None else active.outcome

    def finish_immediate(self, active: ActiveNetworkApproval) -> None:
        denial = self.finish_call(active.registration_id)
        if denial is not None:
            raise Rejected(denial.message)

    def into_deferred(self, active: ActiveNetworkApproval) -> DeferredNetworkApproval:
        return DeferredNetworkApproval(self, active)

    def _abandon_pending_of(self, registration_id: str) -> None:
        for key, pending in list(self._pending.items()):
            if pending.owners != (registration_id,):
                continue
            del self._pending[key]
            if pending.task is not None:
                pending.task.cancel()
            if not pending.future.done():
                pending.future.set_result(ProxyDecision(False, CANCELLED_BEFORE_DECISION))

    # -- session host caches -----------------------------------------------

    @property
    def session_approved_hosts(self) -> frozenset[HostKey]:
        return frozenset(self._approved)

    @property
    def session_denied_hosts(self) -> frozenset[HostKey]:
        return frozenset(self._denied)

    def sync_session_approved_hosts_to(self, other: NetworkApprovalService) -> None:
        """Make ``other``'s approved set equal to ours (its old entries go)."""
        other._approved = set(self._approved)

    # -- proxy questions -----------------------------------------------------

    async def on_proxy_request(
        self,
        environment_id: str,
        host: str,
        protocol: str,
        port: int,
        registration_ids: Sequence[str] | None = None,
    ) -> ProxyDecision:
        key = HostKey.of(environment_id, host, protocol, port)
        if key in self._denied:
            return ProxyDecision(False, DENIED_BY_USER)
        if key in self._approved:
            return ProxyDecision(True)
        owners = self._attribute(environment_id, registration_ids)
        if not network_approval_flow_enabled(self.policy, self.profile):
            for owner in owners:
                self.record_blocked_request(owner)
            return ProxyDecision(False, NETWORK_DENIED_MESSAGE)
        pending = self._pending.get(key)
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = _Pending(loop.create_future(), owners)
            self._pending[key] = pending
            pending.task = self._decisions.spawn(self._decide(key, pending), name=f"ask {host}")
        # shield: a waiter that goes away must not cancel the shared decision.
        return await asyncio.shield(pending.future)

    def _attribute(
        self, environment_id: str, registration_ids: Sequence[str] | None
    ) -> tuple[str, ...]:
        if registration_ids is not None:
            return tuple(r for r in registration_ids if r in self._active)
        return tuple(a.registration_id for a in self.active_calls_for_environment(environment_id))

    async def _decide(self, key: HostKey, pending: _Pending) -> None:
        try:
            decision = await self._ask(key, pending.owners)
            result = self._apply(key, decision, pending.owners)
        except asyncio.CancelledError:
            result = ProxyDecision(False, CANCELLED_BEFORE_DECISION)
            if not pending.future.done():
                pending.future.set_result(result)
            raise
        except Exception as exc:  # an approver failure must not leave waiters hanging
            result = ProxyDecision(False, f"network approval failed: {exc}")
        finally:
            if self._pending.get(key) is pending:
                del self._pending[key]
        if not pending.future.done():
            pending.future.set_result(result)

    async def _ask(self, key: HostKey, owners: tuple[str, ...]) -> ReviewDecision:
        command = ""
        for owner in owners:
            active = self._active.get(owner)
            if active is not None and active.command:
                command = active.command
                break
        request = ApprovalRequest(
            tool_name="network",
            environment_id=key.environment_id,
            command=(command,) if command else None,
            reason=f'Network access to "{key.host}" is blocked by policy.',
            network_context=NetworkApprovalContext(key.host, key.protocol),
            details={"port": key.port, "registration_ids": list(owners)},
        )
        return await self._approver(request)

    def _apply(
        self, key: HostKey, decision: ReviewDecision, owners: tuple[str, ...]
    ) -> ProxyDecision:
        if decision.kind is DecisionKind.APPROVED:
            return ProxyDecision(True)  # allow once: not cached
        if decision.kind is DecisionKind.APPROVED_FOR_SESSION:
            self._approved.add(key)
            return ProxyDecision(True)
        if decision.kind is DecisionKind.NETWORK_POLICY_AMENDMENT and decision.is_approval:
            self._approved.add(key)
            return ProxyDecision(True)
        if decision.kind is DecisionKind.NETWORK_POLICY_AMENDMENT:
            self._denied.add(key)
        message = decision.rejection or DENIED_BY_USER
        for owner in owners:
            self.record_call_outcome(owner, NetworkDenial(DenialSource.USER, message))
        return ProxyDecision(False, message)


Terminate = Callable[[], Awaitable[object]]


class DeferredNetworkApproval:
    """A successful deferred attempt's registration, travelling with its live
    process. It ends exactly once: :meth:`finish` (idempotent; later callers
    get the first result) or :meth:`unregister`."""

    def __init__(self, service: NetworkApprovalService, active: ActiveNetworkApproval) -> None:
        self._service = service
        self._active = active
        self._done = False
        self._result: NetworkDenial | None = None
        self._watcher: asyncio.Task[None] | None = None
        # The watcher lives until the call finishes (finish/unregister stop it).
        self._tasks = TaskSet(f"network-approval {active.registration_id}")

    @property
    def registration_id(self) -> str:
        return self._active.registration_id

    @property
    def cancelled(self) -> asyncio.Event:
        return self._active.cancelled

    @property
    def done(self) -> bool:
        return self._done

    def watch(self, terminate: Terminate) -> asyncio.Task[None]:
        """Terminate the process as soon as the network approval is denied."""
        if self._watcher is None:
            self._watcher = self._tasks.spawn(self._watch(terminate), name="watch")
        return self._watcher

    async def _watch(self, terminate: Terminate) -> None:
        await self._active.cancelled.wait()
        await terminate()

    async def finish(self, *, grace: float = 0.0) -> NetworkDenial | None:
        """Finish after the process exited. ``grace`` waits that long for a denial
        still on its way (the reference uses 100 ms after exit)."""
        if not self._done and grace > 0 and not self._active.cancelled.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self._active.cancelled.wait()
        if not self._done:
            self._done = True
            self._result = self._service.finish_call(self._active.registration_id)
            self._stop_watcher()
        return self._result

    def unregister(self) -> None:
        """Drop the registration without a decision (prune, clean, shutdown)."""
        if self._done:
            return
        self._done = True
        self._service.finish_call(self._active.registration_id)
        self._stop_watcher()

    def _stop_watcher(self) -> None:
        # A watcher that has seen the denial is left to finish terminating.
        if self._watcher is not None and not self._active.cancelled.is_set():
            self._watcher.cancel()
