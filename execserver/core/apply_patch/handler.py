"""The apply_patch tool as the model sees it.

Success reports the summary and that attempt's delta; every failure reports
the call's committed delta, so edits that landed are never lost from the
turn's change tracking.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from execserver.client.fs import RemoteFileSystem
from execserver.core.apply_patch.delta import AppliedPatchDelta
from execserver.core.apply_patch.runtime import ApplyPatchRequest, ApplyPatchRuntime
from execserver.core.errors import ExecFailed, Rejected, SandboxDenied, SandboxError
from execserver.core.orchestrator import ToolOrchestrator
from execserver.core.runtime import TurnContext

__all__ = ["ApplyPatchToolResult", "run_apply_patch"]


@dataclass(frozen=True)
class ApplyPatchToolResult:
    output: str
    success: bool
    delta: AppliedPatchDelta = field(default_factory=AppliedPatchDelta)
    # Whether the run needed a second, unsandboxed attempt.
    retried: bool = False


async def run_apply_patch(
    fs: RemoteFileSystem, turn: TurnContext, req: ApplyPatchRequest
) -> ApplyPatchToolResult:
    runtime = ApplyPatchRuntime(fs)
    try:
        result = await ToolOrchestrator(turn).run(runtime, req)
    except SandboxDenied as denial:
        return ApplyPatchToolResult(denial.output, False, runtime.committed_delta)
    except (Rejected, ExecFailed) as exc:
        return ApplyPatchToolResult(exc.message, False, runtime.committed_delta)
    except SandboxError as exc:
        return ApplyPatchToolResult(str(exc), False, runtime.committed_delta)
    outcome = result.output
    retried = len(result.attempts) > 1
    if outcome.success:
        return ApplyPatchToolResult(outcome.output, True, outcome.delta, retried)
    return ApplyPatchToolResult(outcome.output, False, runtime.committed_delta, retried)
