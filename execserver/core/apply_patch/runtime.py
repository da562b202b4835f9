"""The apply_patch tool runtime on the orchestrator.

One runtime instance serves one tool call: it owns the call's committed delta,
to which every attempt's delta is appended *before* the attempt is classified,
so edits a denied first attempt did make are still reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from execserver.client.fs import RemoteFileSystem
from execserver.core.apply_patch.delta import AppliedPatchDelta
from execserver.core.apply_patch.engine import PatchOutcome, apply_parsed
from execserver.core.apply_patch.hunks import AddFile, DeleteFile, ParsedPatch, resolve
from execserver.core.apply_patch.safety import patch_approval_requirement
from execserver.core.approval_cache import ApprovalKey, PatchApprovalKey
from execserver.core.approvals import ApprovalRequest
from execserver.core.attempt import SandboxAttempt, sandbox_context
from execserver.core.errors import SandboxDenied
from execserver.core.permissions import effective_profile
from execserver.core.policy import ApprovalMode, AskForApproval, ExecApprovalRequirement
from execserver.core.runtime import ApprovalContext, BaseToolRuntime, TurnContext
from execserver.wire.sandbox_denial import mentions_sandbox_denial

__all__ = [
    "APPLY_PATCH_HOOK_NAMES",
    "ApplyPatchRequest",
    "ApplyPatchRuntime",
    "is_likely_patch_denial",
]

APPLY_PATCH_HOOK_NAMES = ("apply_patch", "Write", "Edit")


def is_likely_patch_denial(output: str) -> bool:
    """With no host sandbox (always, for a remote executor) a failed sandboxed
    attempt counts as denied when its output says so in the executor's words."""
    return mentions_sandbox_denial(output)


@dataclass(frozen=True)
class ApplyPatchRequest:
    parsed: ParsedPatch
    # Absolute path on the executor; relative hunk paths resolve against it.
    cwd: str
    call_id: str = ""

    def touched_paths(self) -> list[str]:
        """Every file the patch writes or removes, move destinations included,
        as absolute paths on the executor."""
        out: list[str] = []
        for hunk in self.parsed.hunks:
            out.append(resolve(hunk.path, self.cwd))
            if not isinstance(hunk, AddFile | DeleteFile) and hunk.move_path is not None:
                out.append(resolve(hunk.move_path, self.cwd))
        return list(dict.fromkeys(out))


class ApplyPatchRuntime(BaseToolRuntime[ApplyPatchRequest, PatchOutcome]):
    tool_name = "apply_patch"
    rejected_by_user = "patch rejected by user"

    def __init__(self, fs: RemoteFileSystem) -> None:
        self._fs = fs
        self.committed_delta = AppliedPatchDelta()

    def approval_keys(self, req: ApplyPatchRequest, turn: TurnContext) -> Sequence[ApprovalKey]:
        env = turn.environment.environment_id
        return [PatchApprovalKey(env, path) for path in req.touched_paths()]

    def approval_request(
        self, req: ApplyPatchRequest, turn: TurnContext, ctx: ApprovalContext
    ) -> ApprovalRequest:
        return ApprovalRequest(
            tool_name=self.tool_name,
            environment_id=turn.environment.environment_id,
            call_id=req.call_id,
            cwd=req.cwd,
            reason=ctx.reason,
            retry=ctx.retry,
            review_only=ctx.review_only,
            network_context=ctx.network_context,
            hook_names=APPLY_PATCH_HOOK_NAMES,
            details={"patch": req.parsed.patch, "paths": req.touched_paths()},
        )

    def exec_approval_requirement(
        self, req: ApplyPatchRequest, turn: TurnContext
    ) -> ExecApprovalRequirement | None:
        return patch_approval_requirement(
            turn.approval_policy,
            effective_profile(turn.permission_profile, None),
            req.touched_paths(),
            turn.environment.policy_workspace_roots,
        )

    def sandbox_cwd(self, req: ApplyPatchRequest, turn: TurnContext) -> str | None:
        return req.cwd

    def wants_no_sandbox_approval(self, policy: AskForApproval) -> bool:
        # Unlike shell commands, a denied patch may be retried unsandboxed
        # under ON_REQUEST too.
        if policy.mode is ApprovalMode.ON_REQUEST:
            return True
        return super().wants_no_sandbox_approval(policy)

    async def run(
        self, req: ApplyPatchRequest, attempt: SandboxAttempt, turn: TurnContext
    ) -> PatchOutcome:
        fs = self._fs.with_sandbox(sandbox_context(attempt))
        outcome = await apply_parsed(
            req.parsed.hunks, fs, req.cwd, follow_symlinks=attempt.follow_symlinks
        )
        self.committed_delta.append(outcome.delta)
        if (
            not outcome.success
            and attempt.sandbox_requested
            and is_likely_patch_denial(outcome.output)
        ):
            raise SandboxDenied(outcome.output, exit_code=outcome.exit_code)
        return outcome
