"""What every command runtime (the one-shot shell, unified exec) decides alike:
the approval key, the approval prompt, the exec-policy verdict, and which
additional permissions a call asks for.

The reference computes these the same way for its shell and unified-exec
tools (openai/codex, codex-rs/core: ``tools/handlers/shell.rs`` and
``unified_exec/process_manager.rs`` both call the exec policy with
``sandbox_permissions`` downgraded to ``UseDefault`` when the requested
additional permissions were all granted earlier). The differences between
the two runtimes are the named hooks and class flags below.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar, Protocol, TypeVar

from execserver.core.approval_cache import ApprovalKey, ExecApprovalKey
from execserver.core.approvals import ApprovalRequest
from execserver.core.exec_policy import is_dangerous_command, unmatched_command_requirement
from execserver.core.network_approval import NetworkApprovalMode, NetworkApprovalSpec
from execserver.core.permissions import AdditionalPermissions, is_preapproved
from execserver.core.policy import ExecApprovalRequirement, SandboxPermissions
from execserver.core.runtime import ApprovalContext, BaseToolRuntime, TurnContext

__all__ = [
    "CommandRequest",
    "CommandRuntime",
    "additional_permissions_preapproved",
    "requested_additional_permissions",
]


class CommandRequest(Protocol):
    """The fields of a command tool call that the approval logic reads."""

    @property
    def argv(self) -> tuple[str, ...]: ...

    @property
    def sandbox_permissions(self) -> SandboxPermissions: ...

    @property
    def additional_permissions(self) -> AdditionalPermissions | None: ...

    @property
    def justification(self) -> str | None: ...

    @property
    def requirement(self) -> ExecApprovalRequirement | None: ...


CommandReq = TypeVar("CommandReq", bound=CommandRequest)
Out = TypeVar("Out")


def requested_additional_permissions(
    sandbox_permissions: SandboxPermissions, additional: AdditionalPermissions | None
) -> AdditionalPermissions | None:
    """The widening a call asks for. It exists only together with the override
    that asks for it: additional permissions sent with ``use_default`` or
    ``require_escalated`` are ignored, never applied without an approval."""
    if sandbox_permissions is not SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS:
        return None
    return additional


def additional_permissions_preapproved(
    sandbox_permissions: SandboxPermissions,
    additional: AdditionalPermissions | None,
    granted: AdditionalPermissions | None,
) -> bool:
    """Whether a ``with_additional_permissions`` call asks only for what the turn
    or session already granted (sticky grants). Such a call is judged as if it
    asked for nothing, yet still runs widened. Any other override is never
    preapproved: an escalation always goes through the approval gate. Nothing
    granted yet means nothing is preapproved, not even an empty request (the
    reference's ``apply_granted_turn_permissions``)."""
    if sandbox_permissions is not SandboxPermissions.WITH_ADDITIONAL_PERMISSIONS:
        return False
    if granted is None:
        return False
    return is_preapproved(additional, granted)


class CommandRuntime(BaseToolRuntime[CommandReq, Out], abc.ABC):
    """The approval half shared by the command runtimes; subclasses say how to
    run one attempt and fill in what differs:

    * :meth:`command_cwd` - where the command runs (the shell defaults to the
      turn's cwd, unified exec always has one);
    * :meth:`command_tty` / :meth:`call_id` - only unified exec has them;
    * :meth:`command_words` - what the dangerous-command check reads (unified
      exec checks the model's command string, not the shell wrapper around it);
    * :attr:`network_approval_mode` - IMMEDIATE for a command that ends within
      the call, DEFERRED for one that outlives it;
    * :attr:`prompt_description_is_justification` - the shell's prompt shows
      the justification as its description as well.
    """

    network_approval_mode: ClassVar[NetworkApprovalMode] = NetworkApprovalMode.IMMEDIATE
    prompt_description_is_justification: ClassVar[bool] = False

    @abc.abstractmethod
    def command_cwd(self, req: CommandReq, turn: TurnContext) -> str: ...

    @abc.abstractmethod
    def network_command(self, req: CommandReq) -> str:
        """The command line a network approval prompt shows."""

    def command_tty(self, req: CommandReq) -> bool:
        return False

    def call_id(self, req: CommandReq) -> str:
        return ""

    def command_words(self, req: CommandReq) -> Sequence[str]:
        return req.argv

    def approval_keys(self, req: CommandReq, turn: TurnContext) -> Sequence[ApprovalKey]:
        return [
            ExecApprovalKey(
                environment_id=turn.environment.environment_id,
                command=req.argv,
                cwd=self.command_cwd(req, turn),
                tty=self.command_tty(req),
                sandbox_permissions=req.sandbox_permissions,
                additional_permissions=req.additional_permissions,
            )
        ]

    def approval_request(
        self, req: CommandReq, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest:
        return ctx.command_request(
            tool_name=self.tool_name,
            environment_id=turn.environment.environment_id,
            call_id=self.call_id(req),
            command=req.argv,
            cwd=self.command_cwd(req, turn),
            justification=req.justification,
            sandbox_permissions=req.sandbox_permissions,
            additional_permissions=req.additional_permissions,
            description=req.justification if self.prompt_description_is_justification else None,
        )

    def additional_permissions_preapproved(self, req: CommandReq, turn: TurnContext) -> bool:
        return additional_permissions_preapproved(
            req.sandbox_permissions, req.additional_permissions, turn.granted_permissions
        )

    def exec_approval_requirement(
        self, req: CommandReq, turn: TurnContext
    ) -> ExecApprovalRequirement | None:
        """The caller's exec-policy verdict, else the unmatched-command
        heuristics: a plain command under ON_REQUEST runs sandboxed without a
        prompt, and so does one asking only for permissions granted before."""
        if req.requirement is not None:
            return req.requirement
        return unmatched_command_requirement(
            turn.approval_policy,
            turn.permission_profile,
            req.sandbox_permissions,
            dangerous=is_dangerous_command(self.command_words(req)),
            additional_permissions_preapproved=self.additional_permissions_preapproved(req, turn),
        )

    def sandbox_permissions(self, req: CommandReq) -> SandboxPermissions:
        return req.sandbox_permissions

    def additional_permissions(self, req: CommandReq) -> AdditionalPermissions | None:
        return requested_additional_permissions(req.sandbox_permissions, req.additional_permissions)

    def network_approval_spec(
        self, req: CommandReq, turn: TurnContext
    ) -> NetworkApprovalSpec | None:
        if turn.managed_network is None:
            return None
        return NetworkApprovalSpec(self.network_approval_mode, command=self.network_command(req))
