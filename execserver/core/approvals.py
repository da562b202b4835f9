"""Who answers an approval request, and what the answer means for a tool call.

The approver is injected: an async callable from :class:`ApprovalRequest` to
:class:`ReviewDecision`. It is the one seam where tests script a user.
:class:`ApprovalRouter` puts optional hooks and an automatic reviewer in front
of the user, in the reference's order.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from execserver.core.decisions import DecisionKind, ReviewDecision
from execserver.core.errors import Rejected, TurnAborted
from execserver.core.network_context import NetworkApprovalContext
from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import SandboxPermissions

__all__ = [
    "ApprovalHook",
    "ApprovalRequest",
    "ApprovalRouter",
    "Approver",
    "check_decision",
    "permission_request_payload",
]

TIMED_OUT_REJECTION = "automatic approval review timed out"
MCP_DECISION_REJECTION = "Error while requesting approval"
NETWORK_DENIED_BY_USER = "rejected by user"


@dataclass(frozen=True)
class ApprovalRequest:
    """Everything an approver needs to decide about one call (or its retry)."""

    tool_name: str
    environment_id: str
    call_id: str = ""
    command: tuple[str, ...] | None = None
    cwd: str | None = None
    reason: str | None = None
    # True for the "retry without sandbox?" prompt after a sandbox denial.
    retry: bool = False
    # True when the call needs no prompt but strict auto-review wants the
    # automatic reviewer to see it anyway.
    review_only: bool = False
    network_context: NetworkApprovalContext | None = None
    proposed_execpolicy_amendment: tuple[str, ...] | None = None
    sandbox_permissions: SandboxPermissions = SandboxPermissions.USE_DEFAULT
    additional_permissions: AdditionalPermissions | None = None
    hook_names: tuple[str, ...] = ()
    # The model's own justification for the call, when it gave one.
    description: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)


def permission_request_payload(request: ApprovalRequest) -> dict[str, object]:
    """What a permission-request hook receives: the tool's hook name and its
    input. ``description`` is left out when the model gave none."""
    tool_input: dict[str, object] = {}
    if request.command is not None:
        tool_input["command"] = shlex.join(request.command)
    if request.description is not None:
        tool_input["description"] = request.description
    tool_input.update(request.details)
    name = request.hook_names[0] if request.hook_names else request.tool_name
    return {"tool_name": name, "tool_input": tool_input}


class Approver(Protocol):
    def __call__(self, request: ApprovalRequest) -> Awaitable[ReviewDecision]: ...


ApprovalHook = Callable[[ApprovalRequest], Awaitable[ReviewDecision | None]]


class ApprovalRouter:
    """Hooks first (a hook may decide), then the automatic reviewer when it is
    configured or the request is review-only, then the user."""

    def __init__(
        self,
        user: Approver,
        *,
        hooks: Sequence[ApprovalHook] = (),
        reviewer: Approver | None = None,
        auto_review: bool = False,
    ) -> None:
        self._user = user
        self._hooks = tuple(hooks)
        self._reviewer = reviewer
        self._auto_review = auto_review

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        for hook in self._hooks:
            decision = await hook(request)
            if decision is not None:
                return decision
        if self._reviewer is not None and (self._auto_review or request.review_only):
            return await self._reviewer(request)
        if request.review_only:
            # No reviewer configured: nothing stands between the call and its run.
            return ReviewDecision.APPROVED
        return await self._user(request)


def check_decision(decision: ReviewDecision, *, rejected_by_user: str) -> None:
    """Raise unless ``decision`` lets the call proceed.

    ``rejected_by_user`` is the runtime's text for a plain denial
    ("exec command rejected by user", "patch rejected by user").
    """
    if decision.is_approval:
        return
    if decision.kind is DecisionKind.ABORT:
        raise TurnAborted("turn aborted while waiting for approval")
    if decision.kind is DecisionKind.DENIED:
        raise Rejected(decision.rejection or rejected_by_user)
    if decision.kind is DecisionKind.TIMED_OUT:
        raise Rejected(TIMED_OUT_REJECTION)
    if decision.kind is DecisionKind.APPROVED_MCP_POLICY_AMENDMENT:
        raise Rejected(MCP_DECISION_REJECTION)
    if decision.kind is DecisionKind.NETWORK_POLICY_AMENDMENT:
        raise Rejected(NETWORK_DENIED_BY_USER)
    raise Rejected(rejected_by_user)
