"""``plan_sandboxed``: a sandbox context + a ``LaunchRequest`` -> its ``LaunchPlan``.

Picks the shape (``plan.plan_for_policy`` for the policy's own mechanism,
``proxy_routed.plan_proxy_routed`` when all traffic must go through a managed
proxy) for a backend probed once at start-up and passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from execserver.config import DEFAULT_GLOB_SCAN_LIMIT
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.plan import LaunchPlan, LaunchRequest, plan_for_policy, refused_plan
from execserver.sandbox.policy import resolve_policy
from execserver.sandbox.proxy_routed import ProxyRoutes, plan_proxy_routed
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["plan_process_launch", "plan_sandboxed"]

_PROXY_ENV: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
_MANAGED_PROXY_MISSING: Final = (
    "execserver-sandbox: failed to prepare host proxy routing bridge: managed proxy mode "
    "requires proxy environment variables"
)
_MANAGED_PROXY_UNSUPPORTED: Final = (
    "execserver-sandbox: managed proxy mode (enforceManagedNetwork) cannot be enforced by "
    "this executor: its proxy variables name no proxy the sandbox can be bridged to"
)


def plan_sandboxed(
    context: FileSystemSandboxContext,
    request: LaunchRequest,
    *,
    backend: SandboxBackend,
    proxy_routes: ProxyRoutes | None = None,
    glob_scan_limit: int = DEFAULT_GLOB_SCAN_LIMIT,
    contained: bool = False,
) -> LaunchPlan:
    """The launch plan for process/start with a ``sandbox``; raises RpcError when the
    context is invalid or cannot be enforced here (nothing is spawned then).

    A tty needs nothing special: bwrap's ``--new-session`` leaves the command
    without a controlling terminal (as under the reference), which also blocks
    TIOCSTI injection into the daemon's terminal.

    ``enforce_managed_network``: all traffic must go through a managed proxy.
    With ``proxy_routes`` (the process's own proxy, or a loopback proxy named by
    its variables) the child runs in a network namespace bridged to it. Without
    them nothing runs (exit 101, as the reference does without proxy variables):
    fail closed."""
    policy = resolve_policy(context, fallback_cwd=request.cwd, glob_scan_limit=glob_scan_limit)
    if request.enforce_managed_network and not policy.enforces_nothing:
        if proxy_routes is not None:
            return plan_proxy_routed(policy, request, backend=backend, routes=proxy_routes)
        has_proxy = any(k.upper() in _PROXY_ENV for k in request.env)
        return refused_plan(
            request, _MANAGED_PROXY_UNSUPPORTED if has_proxy else _MANAGED_PROXY_MISSING
        )
    return plan_for_policy(policy, request, backend=backend, contained=contained)


def plan_process_launch(
    context: FileSystemSandboxContext,
    *,
    argv: Sequence[str],
    cwd: str,
    env: dict[str, str],
    backend: SandboxBackend,
    tty: bool = False,
    arg0: str | None = None,
    enforce_managed_network: bool = False,
    proxy_routes: ProxyRoutes | None = None,
) -> LaunchPlan:
    """``plan_sandboxed`` with the request spelled out (tests, the doctor's probes)."""
    request = LaunchRequest(
        argv=list(argv),
        cwd=cwd,
        env=env,
        tty=tty,
        arg0=arg0,
        enforce_managed_network=enforce_managed_network,
    )
    return plan_sandboxed(context, request, backend=backend, proxy_routes=proxy_routes)
