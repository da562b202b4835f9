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
from collections.abc import Mapping
from dataclasses import dataclass, field

from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError
from execserver.client.program_lookup import looks_like_launch_failure, unlaunchable_program
from execserver.core.attempt import SandboxAttempt, exec_start_params
from execserver.core.command_runtime import CommandRuntime
from execserver.core.errors import ExecFailed, SandboxDenied
from execserver.core.network_approval import NetworkApprovalMode
from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import ExecApprovalRequirement, SandboxPermissions
from execserver.core.runtime import TurnContext
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


class UnifiedExecRuntime(CommandRuntime[UnifiedExecRequest, UnifiedExecProcess]):
    tool_name = "exec_command"
    # The process outlives the call: its network approval ends when it exits.
    network_approval_mode = NetworkApprovalMode.DEFERRED

    def __init__(self, client: ExecServerClient) -> None:
        self._client = client

    def command_cwd(self, req: UnifiedExecRequest, turn: TurnContext) -> str:
        return req.cwd

    def command_tty(self, req: UnifiedExecRequest) -> bool:
        return req.tty

    def call_id(self, req: UnifiedExecRequest) -> str:
        return req.call_id

    def command_words(self, req: UnifiedExecRequest) -> list[str]:
        # The model's command line, not the ``bash -lc`` wrapper around it.
        return _command_words(req.command)

    def network_command(self, req: UnifiedExecRequest) -> str:
        return req.command

    def process_id_base(self, req: UnifiedExecRequest) -> str:
        return str(req.process_id)

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
                # A sandboxed exec of a missing program is flagged as a denial
                # too; it is final, not a reason to offer running unsandboxed.
                if looks_like_launch_failure(process.exit_code, True):
                    missing = await unlaunchable_program(self._client, params)
                    if missing is not None:
                        raise ExecFailed(
                            f"Failed to create unified exec process: {missing}"
                        ) from missing
                raise SandboxDenied(output, exit_code=process.exit_code)
        return process
