"""The executor-side sandbox: a ``FileSystemSandboxContext`` turned into
kernel-enforced isolation (bwrap + seccomp, Landlock fallback), and the
``sandboxDenied`` classification. See THREAT_MODEL.md for what it guarantees.

The public names are loaded lazily (PEP 562): the sandboxed fs helper runs as
``python -m execserver.fs.sandboxed.program``, which imports this package first,
and must not pay for asyncio/msgspec/policy imports it never uses (that was
~75 ms of every sandboxed fs call).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from execserver.sandbox.backend import SandboxBackend, probe_backend
    from execserver.sandbox.denial import is_sandbox_denied
    from execserver.sandbox.fs import needs_sandboxed_fs
    from execserver.sandbox.plan import SANDBOX_TYPE, LaunchPlan, LaunchRequest
    from execserver.sandbox.planner import plan_process_launch, plan_sandboxed
    from execserver.sandbox.policy import ResolvedPolicy, resolve_policy
    from execserver.sandbox.proxy_routed import ProxyRoutes
    from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context

_EXPORTS = {
    "SandboxBackend": "execserver.sandbox.backend",
    "probe_backend": "execserver.sandbox.backend",
    "is_sandbox_denied": "execserver.sandbox.denial",
    "needs_sandboxed_fs": "execserver.sandbox.fs",
    "SANDBOX_TYPE": "execserver.sandbox.plan",
    "LaunchPlan": "execserver.sandbox.plan",
    "LaunchRequest": "execserver.sandbox.plan",
    "plan_process_launch": "execserver.sandbox.planner",
    "plan_sandboxed": "execserver.sandbox.planner",
    "ProxyRoutes": "execserver.sandbox.proxy_routed",
    "ResolvedPolicy": "execserver.sandbox.policy",
    "resolve_policy": "execserver.sandbox.policy",
    "FileSystemSandboxContext": "execserver.wire.sandbox",
    "decode_sandbox_context": "execserver.wire.sandbox",
}

__all__ = [
    "SANDBOX_TYPE",
    "FileSystemSandboxContext",
    "LaunchPlan",
    "LaunchRequest",
    "ProxyRoutes",
    "ResolvedPolicy",
    "SandboxBackend",
    "decode_sandbox_context",
    "is_sandbox_denied",
    "needs_sandboxed_fs",
    "plan_process_launch",
    "plan_sandboxed",
    "probe_backend",
    "resolve_policy",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
