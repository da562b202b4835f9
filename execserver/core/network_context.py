"""From a blocked network request to an approval context and a retry reason.

Only an ``ask`` decision produced by the policy decider means "a human may
allow this"; a baseline-policy deny or an allow record carries no context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from execserver.core.errors import NetworkPolicyDecisionPayload

__all__ = [
    "NetworkApprovalContext",
    "build_denial_reason",
    "extract_network_approval_context",
    "extract_network_approval_context_from_json",
    "parse_network_policy_decision",
]

RETRY_WITHOUT_SANDBOX_REASON = "command failed; retry without sandbox?"


@dataclass(frozen=True)
class NetworkApprovalContext:
    host: str
    protocol: str


def extract_network_approval_context(
    payload: NetworkPolicyDecisionPayload,
) -> NetworkApprovalContext | None:
    if payload.decision != "ask" or payload.source != "decider":
        return None
    if not payload.host:
        return None
    return NetworkApprovalContext(payload.host, payload.protocol or "http")


def parse_network_policy_decision(value: object) -> NetworkPolicyDecisionPayload | None:
    """A decision record from plain JSON values; None when it is not one."""
    if not isinstance(value, dict):
        return None
    decision, source = value.get("decision"), value.get("source")
    if not isinstance(decision, str) or not isinstance(source, str):
        return None
    host, protocol, port, reason = (
        value.get("host"),
        value.get("protocol"),
        value.get("port"),
        value.get("reason"),
    )
    return NetworkPolicyDecisionPayload(
        decision=decision,
        source=source,
        host=host if isinstance(host, str) else None,
        protocol=protocol if isinstance(protocol, str) else None,
        port=port if isinstance(port, int) and not isinstance(port, bool) else None,
        reason=reason if isinstance(reason, str) else None,
    )


def extract_network_approval_context_from_json(text: str) -> NetworkApprovalContext | None:
    """The proxy answers a blocked request with a JSON body describing the
    decision; read the context from it (malformed bodies give none)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    payload = parse_network_policy_decision(value)
    return None if payload is None else extract_network_approval_context(payload)


def build_denial_reason(
    payload: NetworkPolicyDecisionPayload | None, *, managed_network_active: bool
) -> tuple[str, NetworkApprovalContext | None]:
    """The prompt text for the retry approval, and the network context when the
    denial was a network block that a user may lift."""
    context = None
    if payload is not None and managed_network_active:
        context = extract_network_approval_context(payload)
    if context is not None:
        return f'Network access to "{context.host}" is blocked by policy.', context
    return RETRY_WITHOUT_SANDBOX_REASON, None
