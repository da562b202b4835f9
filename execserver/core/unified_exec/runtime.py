"""The unified-exec runtime on the orchestrator.

One attempt starts the process and waits at most the early-exit window
(150 ms) for it to exit. Only a process that exited inside that window -
checked again after a 20 ms settle so its trailing output and the executor's
``sandboxDenied`` have arrived - can be a retryable ``SandboxDenied``; a
process still running is handed back live and a later denial is reported as
an ordinary result.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError
from execserver.core.approval_cache import ApprovalKey, ExecApprovalKey
from execserver.core.approvals import ApprovalRequest
from execserver.core.attempt import SandboxAttempt, exec_start_params
from execserver.core.errors import ExecFailed, SandboxDenied
from execserver.core.exec_policy import is_dangerous_command, unmatched_command_requirement
from execserver.core.network_approval import NetworkApprovalMode, NetworkApprovalSpec
from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import ExecApprovalRequirement, SandboxPermissions
from execserver.core.runtime import ApprovalContext, BaseToolRuntime, TurnContext
from execserver.core.unified_exec.env import DEFAULT_ENV_POLICY, unified_exec_env
from execserver.core.unified_exec.process import UnifiedExecProcess
from execserver.wire.process import ExecEnvPolicy, ExecParams

__all__ = [
    "EARLY_EXIT_WINDOW",
    "SETTLE_WAIT",
    "UnifiedExecRequest",
    "UnifiedExecRuntime",
]

EARLY_EXIT_WINDOW = 0.150
SETTLE_WAIT = 0.020


@dataclass(frozen=True)
class UnifiedExecRequest:
    process_id: int
    command: str
    argv: tuple[str, ...]
    cwd: str  # native absolute path on the executor
    tty: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    env_policy: ExecEnvPolicy = DEFAULT_ENV_POLICY
    sandbox_permissions: SandboxPermissions = SandboxPermissions.USE_DEFAULT
    additional_permissions: AdditionalPermissions | None = None
    justification: str | None = None
    # The exec-policy verdict, when the host has rules; None = heuristics.
    requirement: ExecApprovalRequirement | None = None
    call_id: str = ""


def _command_words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


class UnifiedExecRuntime(BaseToolRuntime[UnifiedExecRequest, UnifiedExecProcess]):
    tool_name = "exec_command"

    def __init__(self, client: ExecServerClient) -> None:
        self._client = client

    def approval_keys(self, req: UnifiedExecRequest, turn: TurnContext) -> Sequence[ApprovalKey]:
        return [
            ExecApprovalKey(
                environment_id=turn.environment.environment_id,
                command=req.argv,
                cwd=req.cwd,
                tty=req.tty,
                sandbox_permissions=req.sandbox_permissions,
                additional_permissions=req.additional_permissions,
            )
        ]

    def approval_request(
        self, req: UnifiedExecRequest, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest:
        return ctx.command_request(
            tool_name=self.tool_name,
            environment_id=turn.environment.environment_id,
            call_id=req.call_id,
            command=req.argv,
            cwd=req.cwd,
            justification=req.justification,
            sandbox_permissions=req.sandbox_permissions,
            additional_permissions=req.additional_permissions,
        )

    def exec_approval_requirement(
        self, req: UnifiedExecRequest, turn: TurnContext
    ) -> ExecApprovalRequirement | None:
        if req.requirement is not None:
            return req.requirement
        return unmatched_command_requirement(
            turn.approval_policy,
            turn.permission_profile,
            req.sandbox_permissions,
            dangerous=is_dangerous_command(_command_words(req.command)),
        )

    def sandbox_permissions(self, req: UnifiedExecRequest) -> SandboxPermissions:
        return req.sandbox_permissions

    def additional_permissions(self, req: UnifiedExecRequest) -> AdditionalPermissions | None:
        return req.additional_permissions

    def process_id_base(self, req: UnifiedExecRequest) -> str:
        return str(req.process_id)

    def network_approval_spec(
        self, req: UnifiedExecRequest, turn: TurnContext
    ) -> NetworkApprovalSpec | None:
        if turn.managed_network is None:
            return None
        # The process outlives the call: its network approval ends when it exits.
        return NetworkApprovalSpec(NetworkApprovalMode.DEFERRED, command=req.command)

    def start_params(self, req: UnifiedExecRequest, attempt: SandboxAttempt) -> ExecParams:
        """``process/start`` for one attempt: the model's shell argv, the pins as
        the env overlay on top of the env policy, never a piped stdin."""
        return exec_start_params(
            attempt,
            argv=req.argv,
            cwd=req.cwd,
            env=unified_exec_env(req.env),
            env_policy=req.env_policy,
            tty=req.tty,
            pipe_stdin=False,
        )

    async def run(
        self, req: UnifiedExecRequest, attempt: SandboxAttempt, turn: TurnContext
    ) -> UnifiedExecProcess:
        params = self.start_params(req, attempt)
        try:
            remote = await self._client.start(params)
        except ExecServerError as exc:
            raise ExecFailed(f"Failed to create unified exec process: {exc}") from exc
        process = UnifiedExecProcess(remote, attempt=attempt, tty=req.tty, command=req.command)
        try:
            exited_early = await process.wait_exit(EARLY_EXIT_WINDOW)
        except BaseException:
            # Cancelled before anyone could store it: nobody could reach it.
            await asyncio.shield(process.terminate())
            raise
        if exited_early:
            await asyncio.sleep(SETTLE_WAIT)
            if process.is_denied():
                await process.wait_closed(SETTLE_WAIT)
                output = process.drain().decode("utf-8", errors="replace")
                await process.close()
                raise SandboxDenied(output, exit_code=process.exit_code)
        return process
