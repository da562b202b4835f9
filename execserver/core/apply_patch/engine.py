"""Patch text in, the reference's exit code / stdout / stderr and the delta out.

This is what the standalone ``apply_patch`` does, minus the process: parse,
apply, print the summary or the one error line.
"""

from __future__ import annotations

from typing import NamedTuple

from execserver.core.apply_patch.applier import PatchApplyError, apply_hunks
from execserver.core.apply_patch.delta import AppliedPatchDelta
from execserver.core.apply_patch.errors import PatchParseError
from execserver.core.apply_patch.fs import PatchFileSystem
from execserver.core.apply_patch.hunks import Hunk
from execserver.core.apply_patch.parser import parse_patch
from execserver.core.apply_patch.summary import success_summary

__all__ = ["PatchOutcome", "apply_parsed", "apply_patch"]


class PatchOutcome(NamedTuple):
    # A NamedTuple for the import-time reason given in ``hunks.py``.
    exit_code: int
    stdout: str
    stderr: str
    delta: AppliedPatchDelta

    @property
    def success(self) -> bool:
        return self.exit_code == 0

    @property
    def output(self) -> str:
        """stdout followed by stderr, the aggregated text the model sees."""
        return self.stdout + self.stderr


async def apply_parsed(
    hunks: tuple[Hunk, ...], fs: PatchFileSystem, cwd: str, *, follow_symlinks: bool = True
) -> PatchOutcome:
    try:
        affected, delta = await apply_hunks(hunks, fs, cwd, follow_symlinks=follow_symlinks)
    except PatchApplyError as exc:
        return PatchOutcome(1, "", f"{exc}\n", exc.delta)
    return PatchOutcome(0, success_summary(affected), "", delta)


async def apply_patch(
    patch: str, fs: PatchFileSystem, cwd: str, *, follow_symlinks: bool = True
) -> PatchOutcome:
    """Parse and apply ``patch``; relative paths resolve against ``cwd``."""
    try:
        parsed = parse_patch(patch)
    except PatchParseError as exc:
        return PatchOutcome(1, "", f"{exc}\n", AppliedPatchDelta())
    return await apply_parsed(parsed.hunks, fs, cwd, follow_symlinks=follow_symlinks)
