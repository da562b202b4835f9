"""apply_patch: parser, matcher and applier over an executor's file system.

:func:`apply_patch` is the reference's standalone behaviour over any
:class:`PatchFileSystem`; :func:`run_apply_patch` is the tool call on the
orchestrator (approval, sandbox attempts, committed delta).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from execserver.core.apply_patch.delta import AppliedPatchChange, AppliedPatchDelta
    from execserver.core.apply_patch.engine import PatchOutcome, apply_patch
    from execserver.core.apply_patch.errors import ApplyPatchError
    from execserver.core.apply_patch.fs import PatchFileSystem
    from execserver.core.apply_patch.handler import ApplyPatchToolResult, run_apply_patch
    from execserver.core.apply_patch.invocation import detect_apply_patch
    from execserver.core.apply_patch.parser import parse_patch
    from execserver.core.apply_patch.runtime import ApplyPatchRequest

# Exported names -> their modules, imported on first use: importing one submodule
# (e.g. by a command-line tool) must not load the whole package with it.
_EXPORTS = {
    "AppliedPatchChange": "execserver.core.apply_patch.delta",
    "AppliedPatchDelta": "execserver.core.apply_patch.delta",
    "PatchOutcome": "execserver.core.apply_patch.engine",
    "apply_patch": "execserver.core.apply_patch.engine",
    "ApplyPatchError": "execserver.core.apply_patch.errors",
    "PatchFileSystem": "execserver.core.apply_patch.fs",
    "ApplyPatchToolResult": "execserver.core.apply_patch.handler",
    "run_apply_patch": "execserver.core.apply_patch.handler",
    "detect_apply_patch": "execserver.core.apply_patch.invocation",
    "parse_patch": "execserver.core.apply_patch.parser",
    "ApplyPatchRequest": "execserver.core.apply_patch.runtime",
}

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


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
