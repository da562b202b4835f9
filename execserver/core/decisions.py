"""ReviewDecision: the answer to an approval request, with its wire spelling."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["DecisionKind", "NetworkPolicyAmendment", "ReviewDecision"]

# A user's rejection text is shown to the model; the reference caps it.
MAX_REJECTION_BYTES = 4096


class DecisionKind(enum.Enum):
    APPROVED = "approved"
    APPROVED_EXECPOLICY_AMENDMENT = "approved_execpolicy_amendment"
    APPROVED_FOR_SESSION = "approved_for_session"
    APPROVED_MCP_POLICY_AMENDMENT = "approved_mcp_policy_amendment"
    NETWORK_POLICY_AMENDMENT = "network_policy_amendment"
    DENIED = "denied"
    TIMED_OUT = "timed_out"
    ABORT = "abort"


@dataclass(frozen=True)
class NetworkPolicyAmendment:
    host: str
    action: str  # "allow" | "deny"

    def __post_init__(self) -> None:
        if self.action not in ("allow", "deny"):
            raise ValueError(
                f"network policy amendment action must be allow or deny: {self.action!r}"
            )


@dataclass(frozen=True)
class ReviewDecision:
    """One decision. Use the constants, or the constructors for the variants
    that carry data."""

    kind: DecisionKind
    execpolicy_amendment: tuple[str, ...] | None = None
    network_amendment: NetworkPolicyAmendment | None = None
    rejection: str | None = None
    mcp_amendment: object = None

    APPROVED: ClassVar[ReviewDecision]
    APPROVED_FOR_SESSION: ClassVar[ReviewDecision]
    DENIED: ClassVar[ReviewDecision]
    TIMED_OUT: ClassVar[ReviewDecision]
    ABORT: ClassVar[ReviewDecision]

    @classmethod
    def approved_execpolicy_amendment(cls, prefix: tuple[str, ...]) -> ReviewDecision:
        return cls(DecisionKind.APPROVED_EXECPOLICY_AMENDMENT, execpolicy_amendment=tuple(prefix))

    @classmethod
    def network_policy_amendment(cls, host: str, action: str) -> ReviewDecision:
        return cls(
            DecisionKind.NETWORK_POLICY_AMENDMENT,
            network_amendment=NetworkPolicyAmendment(host, action),
        )

    @classmethod
    def denied(cls, rejection: str | None = None) -> ReviewDecision:
        if rejection is not None:
            encoded = rejection.encode()
            if len(encoded) > MAX_REJECTION_BYTES:
                rejection = encoded[:MAX_REJECTION_BYTES].decode(errors="ignore")
        return cls(DecisionKind.DENIED, rejection=rejection)

    @property
    def is_approval(self) -> bool:
        """Whether the tool call may proceed on this decision."""
        if self.kind is DecisionKind.NETWORK_POLICY_AMENDMENT:
            return self.network_amendment is not None and self.network_amendment.action == "allow"
        return self.kind in (
            DecisionKind.APPROVED,
            DecisionKind.APPROVED_EXECPOLICY_AMENDMENT,
            DecisionKind.APPROVED_FOR_SESSION,
        )

    def to_wire(self) -> object:
        if self.kind is DecisionKind.APPROVED_EXECPOLICY_AMENDMENT:
            return {
                "approved_execpolicy_amendment": {
                    "proposed_execpolicy_amendment": list(self.execpolicy_amendment or ())
                }
            }
        if self.kind is DecisionKind.NETWORK_POLICY_AMENDMENT:
            assert self.network_amendment is not None
            amendment = {
                "host": self.network_amendment.host,
                "action": self.network_amendment.action,
            }
            return {"network_policy_amendment": {"network_policy_amendment": amendment}}
        if self.kind is DecisionKind.DENIED and self.rejection is not None:
            return {"denied": {"rejection": self.rejection}}
        if self.kind is DecisionKind.APPROVED_MCP_POLICY_AMENDMENT:
            return {"approved_mcp_policy_amendment": self.mcp_amendment}
        return self.kind.value

    @classmethod
    def from_wire(cls, value: object) -> ReviewDecision:
        if isinstance(value, str):
            simple = {
                "approved": cls.APPROVED,
                "approved_for_session": cls.APPROVED_FOR_SESSION,
                "denied": cls.DENIED,
                "timed_out": cls.TIMED_OUT,
                "abort": cls.ABORT,
            }
            if value in simple:
                return simple[value]
        if isinstance(value, Mapping) and len(value) == 1:
            ((key, inner),) = value.items()
            if key == "approved_execpolicy_amendment" and isinstance(inner, Mapping):
                prefix = inner.get("proposed_execpolicy_amendment")
                if isinstance(prefix, list) and all(isinstance(p, str) for p in prefix):
                    return cls.approved_execpolicy_amendment(tuple(prefix))
            if key == "network_policy_amendment" and isinstance(inner, Mapping):
                amendment = inner.get("network_policy_amendment")
                if isinstance(amendment, Mapping):
                    host, action = amendment.get("host"), amendment.get("action")
                    if isinstance(host, str) and isinstance(action, str):
                        return cls.network_policy_amendment(host, action)
            if key == "denied" and isinstance(inner, Mapping):
                rejection = inner.get("rejection")
                if rejection is None or isinstance(rejection, str):
                    return cls.denied(rejection)
            if key == "approved_mcp_policy_amendment":
                return cls(DecisionKind.APPROVED_MCP_POLICY_AMENDMENT, mcp_amendment=inner)
        raise ValueError(f"not a review decision: {value!r}")


ReviewDecision.APPROVED = ReviewDecision(DecisionKind.APPROVED)
ReviewDecision.APPROVED_FOR_SESSION = ReviewDecision(DecisionKind.APPROVED_FOR_SESSION)
ReviewDecision.DENIED = ReviewDecision(DecisionKind.DENIED)
ReviewDecision.TIMED_OUT = ReviewDecision(DecisionKind.TIMED_OUT)
ReviewDecision.ABORT = ReviewDecision(DecisionKind.ABORT)
