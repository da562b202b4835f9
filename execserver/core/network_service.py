"""The client half of the executor's managed network: answer the exec-server's
``network/policyRequest`` through the orchestrator's
:class:`~execserver.core.network_approval.NetworkApprovalService`.

One responder per exec-server connection (= one environment). A request about
``(host, protocol, port)`` for process P is put to the service, attributed to
the registration of the attempt that runs P, else to every active call of the
environment; the service dedupes, uses its session
caches, or asks the approver. The answer is ``{"decision": {"type": "allow"}}``
or ``{"type": "deny", "reason": ...}``.

Attribution needs no wiring in the runtimes: the orchestrator registers each
attempt with its processId *before* ``process/start`` (processIds are chosen
client-side), so even a request the process makes at once finds its call, and
finishing or unregistering the approval ends the attribution with it. An
explicit :meth:`bind` overrides that lookup for callers whose registrations
carry no processId.

Deadline: the server forgets its request after ``policyDecisionTimeoutMs``
and then *drops the connection* on a late answer. So the responder
answers "deny" on its own before that deadline when the approver is slower;
the approver's eventual decision still lands in the session caches (an
"allow for session" then lets the child's retry through).

Decisions the proxy reports (``network/policyDecision``) that block a known
process's request by policy are recorded on its registration, which cancels
its token so the unified-exec watcher terminates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from execserver.core.network_approval import (
    NETWORK_DENIED_MESSAGE,
    NetworkApprovalService,
    ProxyDecision,
)
from execserver.wire import methods as m
from execserver.wire.network import NetworkPolicyDecisionNotification, NetworkPolicyRequestParams

__all__ = [
    "ANSWER_TIMEOUT_MESSAGE",
    "NetworkPolicyResponder",
    "answer_deadline",
    "decision_result",
]

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_MESSAGE = "network approval did not finish before the executor's deadline"
# Answer this much before the server's deadline (transport latency, loop lag).
MIN_MARGIN_S = 0.25
MARGIN_FRACTION = 0.2

ServiceSource = NetworkApprovalService | Callable[[], NetworkApprovalService | None]


class ServerRequestClient(Protocol):
    """What the responder needs from ExecServerClient (kept narrow for tests)."""

    def handle_server_request(self, method: str, handler: Any) -> None: ...

    def add_notification_listener(self, method: str, listener: Any) -> None: ...


def answer_deadline(decision_timeout_ms: int | None) -> float | None:
    """Seconds the responder may take; None when the server sets no deadline."""
    if not decision_timeout_ms:
        return None
    timeout = decision_timeout_ms / 1000
    return max(timeout - max(MIN_MARGIN_S, timeout * MARGIN_FRACTION), timeout / 2)


def decision_result(decision: ProxyDecision) -> dict[str, object]:
    if decision.allowed:
        return {"decision": {"type": "allow"}}
    return {"decision": {"type": "deny", "reason": decision.reason or NETWORK_DENIED_MESSAGE}}


class NetworkPolicyResponder:
    def __init__(
        self,
        service: ServiceSource,
        *,
        environment_id: str,
        decision_timeout_ms: int | None = None,
    ) -> None:
        self._service = service
        self.environment_id = environment_id
        self._deadline = answer_deadline(decision_timeout_ms)
        self._bound: dict[str, str] = {}  # processId -> registration id
        self.answered = 0

    def attach(self, client: ServerRequestClient) -> None:
        client.handle_server_request(m.NETWORK_POLICY_REQUEST, self.answer)
        client.add_notification_listener(m.NETWORK_POLICY_DECISION, self.on_decision)

    def bind(self, process_id: str, registration_id: str) -> None:
        """Attribute ``process_id``'s requests to exactly this registration
        (overrides the lookup by the registrations' own processIds)."""
        self._bound[process_id] = registration_id

    def unbind(self, process_id: str) -> None:
        self._bound.pop(process_id, None)

    def _owners(self, service: NetworkApprovalService, process_id: str) -> list[str] | None:
        """The registrations ``process_id``'s traffic belongs to; None when it is
        unknown (the service then considers every active call of the environment)."""
        bound = self._bound.get(process_id)
        if bound is not None:
            return [bound]
        if not process_id:
            # Registrations begun without a processId have "" - that must not
            # make an anonymous request theirs.
            return None
        return service.registrations_for_process(self.environment_id, process_id) or None

    def _current_service(self) -> NetworkApprovalService | None:
        if isinstance(self._service, NetworkApprovalService):
            return self._service
        return self._service()

    async def answer(self, raw: msgspec.Raw) -> dict[str, object]:
        """The result for one ``network/policyRequest`` (always exactly one)."""
        self.answered += 1
        params = msgspec.json.decode(raw, type=NetworkPolicyRequestParams)
        service = self._current_service()
        if service is None:  # no managed network this turn: nobody may allow
            return decision_result(ProxyDecision(False, NETWORK_DENIED_MESSAGE))
        target = params.request
        pending = service.on_proxy_request(
            self.environment_id,
            target.host,
            target.protocol,
            target.port,
            self._owners(service, params.process_id),
        )
        try:
            async with asyncio.timeout(self._deadline):
                decision = await pending
        except TimeoutError:
            decision = ProxyDecision(False, ANSWER_TIMEOUT_MESSAGE)
        return decision_result(decision)

    def on_decision(self, raw: msgspec.Raw) -> None:
        """A policy block of a known process ends its call's approval (the
        decider's own denials were already recorded by the service when it
        answered). A block of an unknown process is not pinned on every call:
        that would terminate processes that never touched the host."""
        try:
            note = msgspec.json.decode(raw, type=NetworkPolicyDecisionNotification)
        except msgspec.DecodeError:
            return
        if note.decision == "allow" or note.source == "decider":
            return
        service = self._current_service()
        if service is None:
            return
        message = f'Network access to "{note.host}" was blocked: {note.reason}'
        for owner in self._owners(service, note.process_id) or ():
            with contextlib.suppress(Exception):
                service.record_blocked_request(owner, message)
