"""apply_patch: parser, matcher and applier over an executor's file system.

:func:`apply_patch` is the reference's standalone behaviour over any
:class:`PatchFileSystem`; :func:`run_apply_patch` is the tool call on the
orchestrator (approval, sandbox attempts, committed delta).
"""

from execserver.core.apply_patch.delta import AppliedPatchChange, AppliedPatchDelta
from execserver.core.apply_patch.engine import PatchOutcome, apply_patch
from execserver.core.apply_patch.errors import ApplyPatchError
from execserver.core.apply_patch.fs import PatchFileSystem
from execserver.core.apply_patch.handler import ApplyPatchToolResult, run_apply_patch
from execserver.core.apply_patch.invocation import detect_apply_patch
from execserver.core.apply_patch.parser import parse_patch
from execserver.core.apply_patch.runtime import ApplyPatchRequest

__all__ = [
    "AppliedPatchChange",
    "AppliedPatchDelta",
    "ApplyPatchError",
    "ApplyPatchRequest",
    "ApplyPatchToolResult",
    "PatchFileSystem",
    "PatchOutcome",
    "apply_patch",
    "detect_apply_patch",
    "parse_patch",
    "run_apply_patch",
]
