"""apply_patch sent through exec_command.

The model sometimes runs ``apply_patch <<'EOF' ...`` as a shell command. The
patch is then applied by the apply_patch runtime (its approval, its sandbox
rules, its committed delta) instead of a shell on the executor, and the host
is told to remind the model of the dedicated tool.
"""

from __future__ import annotations

import time

from execserver.client.fs import RemoteFileSystem
from execserver.core.apply_patch.handler import run_apply_patch
from execserver.core.apply_patch.invocation import InvocationError, PatchInvocation
from execserver.core.apply_patch.runtime import ApplyPatchRequest
from execserver.core.runtime import TurnContext
from execserver.core.unified_exec.errors import RespondToModel
from execserver.core.unified_exec.output import ExecCommandToolOutput, build_output

__all__ = ["APPLY_PATCH_VIA_EXEC_WARNING", "run_intercepted_patch"]

APPLY_PATCH_VIA_EXEC_WARNING = (
    "apply_patch was requested via exec_command. Use the apply_patch tool instead of exec_command."
)


async def run_intercepted_patch(
    fs: RemoteFileSystem,
    turn: TurnContext,
    patch: PatchInvocation | InvocationError,
    *,
    call_id: str,
    started: float,
    max_output_tokens: int,
) -> ExecCommandToolOutput:
    if isinstance(patch, InvocationError):
        raise RespondToModel(str(patch.error))
    result = await run_apply_patch(fs, turn, ApplyPatchRequest(patch.parsed, patch.cwd, call_id))
    return build_output(
        result.output.encode(),
        wall_time_seconds=time.monotonic() - started,
        max_output_tokens=max_output_tokens,
        exit_code=0 if result.success else 1,
        session_id=None,
        warnings=(f"Warning: {APPLY_PATCH_VIA_EXEC_WARNING}",),
    )
