"""A one-shot command runtime: start on the executor, wait for it to finish,
report its output (the reference's shell tool shape, IMMEDIATE network mode).

It is the simplest complete :class:`~execserver.core.runtime.ToolRuntime` and
the one the orchestrator's integration tests drive; unified exec differs in
keeping processes alive across calls. The approval logic both share is
:class:`~execserver.core.command_runtime.CommandRuntime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from execserver.aio.tasks import TaskSet
from execserver.client.commands import spawn_error
from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError, InternalError, ProcessFailed
from execserver.client.events import Closed, Exited, Output
from execserver.client.process import RemoteProcess
from execserver.client.program_lookup import looks_like_launch_failure, unlaunchable_program
from execserver.core.attempt import SandboxAttempt, exec_start_params
from execserver.core.command_runtime import CommandRuntime
from execserver.core.errors import ExecFailed, SandboxDenied, SandboxTimeout
from execserver.core.network_approval import NetworkApprovalMode
from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import (
    ApprovalMode,
    AskForApproval,
    ExecApprovalRequirement,
    SandboxPermissions,
)
from execserver.core.runtime import TurnContext
from execserver.wire.process import ExecEnvPolicy

__all__ = ["ShellCommandRuntime", "ShellOutput", "ShellRequest"]


@dataclass(frozen=True)
class ShellRequest:
    argv: tuple[str, ...]
    # Native path on the executor; defaults to the turn's cwd.
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    env_policy: ExecEnvPolicy | None = None
    sandbox_permissions: SandboxPermissions = SandboxPermissions.USE_DEFAULT
    additional_permissions: AdditionalPermissions | None = None
    justification: str | None = None
    # An exec-policy verdict computed by the caller; None uses the heuristics.
    requirement: ExecApprovalRequirement | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class ShellOutput:
    exit_code: int
    stdout: bytes
    stderr: bytes
    process_id: str
    sandbox_type: str

    @property
    def text(self) -> str:
        """stdout followed by stderr, as the model sees it."""
        return (self.stdout + self.stderr).decode(errors="replace")


class ShellCommandRuntime(CommandRuntime[ShellRequest, ShellOutput]):
    """Runs one command to completion through an :class:`ExecServerClient`.

    ``prompt_retry_on_request``: ask "retry without sandbox?" after a sandbox
    denial under ON_REQUEST too. The reference's shell does not (only its
    apply_patch runtime does); runtimes that change files on the
    user's behalf set it.
    """

    tool_name = "shell"
    # The command ends within the call, so its network approval does too.
    network_approval_mode = NetworkApprovalMode.IMMEDIATE
    prompt_description_is_justification = True

    def __init__(
        self,
        client: ExecServerClient,
        *,
        prompt_retry_on_request: bool = False,
        on_started: Callable[[RemoteProcess], None] | None = None,
    ) -> None:
        self._client = client
        self._prompt_retry_on_request = prompt_retry_on_request
        # Told about each attempt's process once the executor confirmed its
        # start (for callers that show progress or want to interrupt it).
        self._on_started = on_started

    def command_cwd(self, req: ShellRequest, turn: TurnContext) -> str:
        return req.cwd or turn.environment.cwd

    def network_command(self, req: ShellRequest) -> str:
        return shlex.join(req.argv)

    def wants_no_sandbox_approval(self, policy: AskForApproval) -> bool:
        if self._prompt_retry_on_request and policy.mode is ApprovalMode.ON_REQUEST:
            return True
        return super().wants_no_sandbox_approval(policy)

    async def run(
        self, req: ShellRequest, attempt: SandboxAttempt, turn: TurnContext
    ) -> ShellOutput:
        cwd = self.command_cwd(req, turn)
        params = exec_start_params(
            attempt, argv=req.argv, cwd=cwd, env=req.env, env_policy=req.env_policy
        )
        try:
            proc = await self._client.start(params)
        except InternalError as exc:
            # A missing program or cwd, told apart as run() does.
            problem = await spawn_error(self._client, exc, req.argv[0], cwd)
            raise ExecFailed(f"failed to start `{shlex.join(req.argv)}`: {problem}") from problem
        except ExecServerError as exc:
            raise ExecFailed(f"failed to start `{shlex.join(req.argv)}`: {exc}") from exc
        if self._on_started is not None:
            self._on_started(proc)
        out: dict[str, list[bytes]] = {"stdout": [], "stderr": [], "pty": []}
        exit_code: int | None = None
        denied = False

        async def collect() -> None:
            nonlocal exit_code, denied
            try:
                async for event in proc:
                    if isinstance(event, Output):
                        out[event.stream].append(event.data)
                    elif isinstance(event, Exited):
                        exit_code, denied = event.exit_code, event.sandbox_denied
                    elif isinstance(event, Closed):
                        return
            except ProcessFailed as exc:
                raise ExecFailed(exc.message) from exc

        # A network denial for this call (the proxy blocked one of its requests,
        # or the user said no) stops the command at once, as unified exec does:
        # the orchestrator turns the ended attempt into the denial's rejection.
        denial = attempt.network_denial_cancellation
        # The stopper lives as long as this call: cancelled and awaited on the way out.
        watchers = TaskSet("shell-runtime")
        if denial is not None:
            watchers.spawn(_terminate_on(denial, proc), name=f"stop {proc.process_id} on denial")
        try:
            async with asyncio.timeout(req.timeout):
                await collect()
        except TimeoutError:
            with contextlib.suppress(ExecServerError):
                await proc.terminate()
            raise SandboxTimeout(
                b"".join(out["stdout"] + out["stderr"]).decode(errors="replace")
            ) from None
        finally:
            await watchers.aclose()
        if denial is not None and denial.is_set():
            raise ExecFailed(f"`{shlex.join(req.argv)}` was stopped: network access was denied")
        assert exit_code is not None  # Closed always follows Exited
        result = ShellOutput(
            exit_code=exit_code,
            stdout=b"".join(out["stdout"] + out["pty"]),
            stderr=b"".join(out["stderr"]),
            process_id=proc.process_id,
            sandbox_type=proc.sandbox_type,
        )
        # Remote: only the executor's flag counts as a denial, but the executor
        # flags a sandboxed exec of a missing program too: no escalation for that.
        if looks_like_launch_failure(exit_code, denied):
            missing = await unlaunchable_program(self._client, params)
            if missing is not None:
                raise ExecFailed(
                    f"failed to start `{shlex.join(req.argv)}`: {missing}"
                ) from missing
        if denied:
            raise SandboxDenied(result.text, exit_code=exit_code)
        return result


async def _terminate_on(denial: asyncio.Event, proc: RemoteProcess) -> None:
    await denial.wait()
    with contextlib.suppress(ExecServerError):
        await proc.terminate()
