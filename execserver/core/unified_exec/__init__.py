"""Unified exec: the model-facing ``exec_command`` / ``write_stdin`` tools over
a remote executor.

:class:`UnifiedExecManager` is the entry point: one per session and executor.
"""

from execserver.core.unified_exec.errors import RespondToModel
from execserver.core.unified_exec.manager import UnifiedExecManager
from execserver.core.unified_exec.output import ExecCommandToolOutput
from execserver.core.unified_exec.params import (
    ExecCommandArgs,
    ExecCommandParams,
    WriteStdinArgs,
    WriteStdinParams,
)

__all__ = [
    "ExecCommandArgs",
    "ExecCommandParams",
    "ExecCommandToolOutput",
    "RespondToModel",
    "UnifiedExecManager",
    "WriteStdinArgs",
    "WriteStdinParams",
]
