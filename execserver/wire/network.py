"""Managed-network traffic from server to client."""

from __future__ import annotations

from typing import Literal

from execserver.wire.base import OptionalFieldsStruct, WireStruct

__all__ = [
    "NetworkPolicyDecisionNotification",
    "NetworkPolicyRequestParams",
    "NetworkPolicyRequestResult",
    "NetworkRequestTarget",
]


class NetworkRequestTarget(WireStruct):
    protocol: str
    host: str
    port: int


class NetworkPolicyRequestParams(WireStruct):
    process_id: str
    request: NetworkRequestTarget


class NetworkDecision(OptionalFieldsStruct):
    type: Literal["allow", "deny", "ask"] | str
    reason: str | None = None


class NetworkPolicyRequestResult(WireStruct):
    decision: NetworkDecision


class NetworkPolicyDecisionNotification(OptionalFieldsStruct):
    process_id: str
    timestamp: str
    scope: str
    decision: str
    source: str
    reason: str
    protocol: str
    host: str
    port: int
    policy_override: bool
    method: str | None = None
    client: str | None = None
