"""What the proxy decided about one request, and how that is reported.

Every final decision goes out as ``network/policyDecision``; a
blocked HTTP request is answered ``403`` with the reference's JSON body and
``x-proxy-error`` header. Texts and codes below were observed on 0.169.0
(``mitm_required``'s message and the unix-socket texts are ours: [I]).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from execserver.wire.network import NetworkPolicyDecisionNotification

if TYPE_CHECKING:
    from execserver.netproxy.resolver import Resolution

__all__ = [
    "BASELINE_ALLOW",
    "DECIDER_ALLOW",
    "DECIDER_UNANSWERED",
    "DENYLIST",
    "METHOD_NOT_ALLOWED",
    "MITM_REQUIRED",
    "NOT_ALLOWED",
    "NOT_ALLOWED_LOCAL",
    "OUTSIDE_CEILING",
    "UNIX_SOCKET_DENIED",
    "Decision",
    "Outcome",
    "Target",
    "blocked_response",
    "decider_answer",
    "notification",
    "simple_response",
    "timestamp",
]

# Protocol labels, the same in policyRequest and policyDecision (observed).
Protocol = Literal["http", "https_connect", "socks5_tcp", "socks5_udp"]


@dataclass(frozen=True)
class Decision:
    decision: str  # "allow" | "deny" | "ask"
    source: str  # "baseline_policy" | "decider" | "mode_guard"
    reason: str
    scope: str = "domain"  # "domain" | "non_domain"
    policy_override: bool = False
    # For blocked requests: the 403's x-proxy-error header and message.
    header: str = ""
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"


BASELINE_ALLOW = Decision("allow", "baseline_policy", "allow")
DECIDER_ALLOW = Decision("allow", "decider", "not_allowed", policy_override=True)
DENYLIST = Decision(
    "deny",
    "baseline_policy",
    "denied",
    header="blocked-by-denylist",
    message="Domain denied by the sandbox policy.",
)
NOT_ALLOWED_LOCAL = Decision(
    "deny",
    "baseline_policy",
    "not_allowed_local",
    header="blocked-by-allowlist",
    message="Sandbox policy blocks local/private network addresses.",
)
NOT_ALLOWED = Decision(
    "deny",
    "baseline_policy",
    "not_allowed",
    header="blocked-by-allowlist",
    message="Domain not in allowlist.",
)
# A host outside the tenant's network_allow (ours: the reference has no tenants).
# The decider is not asked: no client answer lifts a ceiling the operator set.
OUTSIDE_CEILING = Decision(
    "deny",
    "baseline_policy",
    "not_allowed",
    header="blocked-by-allowlist",
    message="Domain outside the tenant's network_allow ceiling.",
)
# No answer in time, an error answer, or no client attached: deny.
DECIDER_UNANSWERED = Decision(
    "deny",
    "decider",
    "not_allowed",
    header="blocked-by-allowlist",
    message="Domain not in allowlist.",
)
METHOD_NOT_ALLOWED = Decision(
    "deny",
    "mode_guard",
    "method_not_allowed",
    scope="non_domain",
    header="blocked-by-method-policy",
    message="Method not allowed in limited mode.",
)
MITM_REQUIRED = Decision(
    "deny",
    "mode_guard",
    "mitm_required",
    scope="non_domain",
    header="blocked-by-method-policy",
    message="HTTPS tunnels need inspection in limited mode.",
)
UNIX_SOCKET_DENIED = Decision(
    "deny",
    "baseline_policy",
    "unix_socket_not_allowed",
    scope="non_domain",
    header="blocked-by-unix-socket-policy",
    message="Unix socket not allowed by the sandbox policy.",
)


def decider_answer(decision: object) -> Decision:
    """The client's ``decision`` object. ``allow`` allows; ``deny``/``ask`` with a
    string ``reason`` block with that reason; anything else (unknown type, no
    reason) is an unusable answer and denies as if none came (observed)."""
    if not isinstance(decision, dict):
        return DECIDER_UNANSWERED
    kind, reason = decision.get("type"), decision.get("reason")
    if kind == "allow":
        return DECIDER_ALLOW
    if kind not in ("deny", "ask") or not isinstance(reason, str):
        return DECIDER_UNANSWERED
    return Decision(
        kind,
        "decider",
        reason,
        header="blocked-by-policy",
        message="Request blocked by network policy.",
    )


@dataclass(frozen=True)
class Target:
    protocol: str  # a Protocol label
    host: str
    port: int
    method: str | None = None
    client: str | None = None  # "ip:port" of the child's connection to the proxy


@dataclass(frozen=True)
class Outcome:
    """A checked request: its decision and, when allowed, where to connect (shared by
    the policy engine, which makes it, and the front ends and upstream, which use it)."""

    decision: Decision
    resolution: Resolution | None = None  # what to connect to, when allowed
    # The local-address block looked at the addresses: connect to exactly those
    # (``resolution``) or, when the name did not resolve then, to nothing.
    addresses_decided: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision.allowed


def timestamp(now: datetime.datetime | None = None) -> str:
    """RFC 3339, millisecond precision, ``Z`` (as the reference prints it)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def notification(
    process_id: str, target: Target, decision: Decision
) -> NetworkPolicyDecisionNotification:
    return NetworkPolicyDecisionNotification(
        process_id=process_id,
        timestamp=timestamp(),
        scope=decision.scope,
        decision=decision.decision,
        source=decision.source,
        reason=decision.reason,
        protocol=target.protocol,
        host=target.host,
        port=target.port,
        policy_override=decision.policy_override,
        method=target.method,
        client=target.client,
    )


def blocked_response(target: Target, decision: Decision) -> bytes:
    """The proxy's 403 for a blocked HTTP request or CONNECT."""
    body = json.dumps(
        {
            "status": "blocked",
            "host": target.host,
            "reason": decision.reason,
            "decision": decision.decision,
            "source": decision.source,
            "protocol": target.protocol,
            "port": target.port,
            "message": decision.message,
        },
        separators=(",", ":"),
    ).encode()
    head = (
        "HTTP/1.1 403 Forbidden\r\n"
        "content-type: application/json\r\n"
        f"x-proxy-error: {decision.header or 'blocked-by-policy'}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def simple_response(status: int, reason: str, text: str) -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: text/plain\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body
