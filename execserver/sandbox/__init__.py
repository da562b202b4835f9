"""The executor-side sandbox: a ``FileSystemSandboxContext`` turned into
kernel-enforced isolation (bwrap + seccomp, Landlock fallback), and the
``sandboxDenied`` classification. See THREAT_MODEL.md for what it guarantees.
"""

from execserver.sandbox.backend import SandboxBackend, detect_backend, probe_backend
from execserver.sandbox.denial import is_sandbox_denied
from execserver.sandbox.fs import needs_sandboxed_fs, run_sandboxed_fs_call
from execserver.sandbox.plan import SANDBOX_TYPE, LaunchPlan, plan_process_launch
from execserver.sandbox.policy import ResolvedPolicy, resolve_policy
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context

__all__ = [
    "SANDBOX_TYPE",
    "FileSystemSandboxContext",
    "LaunchPlan",
    "ResolvedPolicy",
    "SandboxBackend",
    "decode_sandbox_context",
    "detect_backend",
    "is_sandbox_denied",
    "needs_sandboxed_fs",
    "plan_process_launch",
    "probe_backend",
    "resolve_policy",
    "run_sandboxed_fs_call",
]
