"""Launch plan for a sandboxed child whose network must go through its proxy
(``enforceManagedNetwork`` + ``networkProxy``), the reference's "host proxy
routing bridge" (observed: the child reaches the proxy through
the port in HTTP_PROXY, a direct connect to any host port is refused).

Shape::

    bwrap <layout of the policy> --unshare-net [private dir masked, SOCKDIR bound]
          -- python bridge.py --route PORT=SOCKDIR/http.sock ...
             -- python launcher.py --seccomp-fd N -- COMMAND

* ``--unshare-net``: the child's loopback is its own; host ports (the real
  upstreams, the daemon) do not exist there;
* the bridge listens on the proxy's port numbers inside the namespace and
  relays to the proxy's unix sockets, the only way out;
* the launcher applies the proxy-routed seccomp filter (inet sockets may
  connect; no bind/listen/accept unless ``allowLocalBinding``; no AF_UNIX
  sockets, so no host unix socket is reachable by path, unless
  ``dangerouslyAllowAllUnixSockets``) right before exec'ing the command, after
  the bridge is listening;
* the proxy's socket directory lives in the daemon's private directory, which
  every sandbox view masks; only this sandbox gets its own directory bound
  back in, so no sandbox reaches another one's proxy.

Without bubblewrap (no network namespace) this cannot be enforced: refused.
This reuses the sandbox planner's internals on purpose (one layout builder,
one resource lifecycle); keep in step with execserver/sandbox/plan.py.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

from execserver.sandbox import seccomp
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.bwrap import build_layout
from execserver.sandbox.plan import (
    SANDBOX_TYPE,
    LaunchPlan,
    _launcher_argv,
    _PlanResources,
    _refused_plan,
    _resolve_program,
    _search_path,
    interpreter_paths,
)
from execserver.sandbox.policy import ResolvedPolicy, unenforceable

__all__ = ["ProxyRoutes", "plan_proxy_routed"]

_UNIX_ALLOW_LIST_REFUSAL = (
    "execserver-sandbox: managed network with allowUnixSockets cannot be enforced by this "
    "executor: direct unix socket connections are refused under a managed proxy (reach "
    "allowed sockets through the proxy's unixSockets policy, or set "
    "dangerouslyAllowAllUnixSockets)"
)
BRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bridge.py")


@dataclasses.dataclass(frozen=True)
class ProxyRoutes:
    """Loopback port (as named in the proxy variables) -> the proxy's unix socket."""

    routes: tuple[tuple[int, str], ...]
    allow_local_binding: bool = False
    # managedNetwork.allowUnixSockets / dangerouslyAllowAllUnixSockets
    allow_unix_sockets: tuple[str, ...] = ()
    all_unix_sockets: bool = False

    @property
    def socket_dirs(self) -> tuple[str, ...]:
        return tuple(sorted({os.path.dirname(path) for _, path in self.routes}))


def plan_proxy_routed(
    policy: ResolvedPolicy,
    *,
    argv: Sequence[str],
    cwd: str,
    env: dict[str, str],
    backend: SandboxBackend,
    routes: ProxyRoutes,
    arg0: str | None = None,
) -> LaunchPlan:
    if backend.bwrap is None or not backend.seccomp_ok:
        raise unenforceable(
            "managed network needs a network namespace (bubblewrap) and seccomp: "
            + backend.unavailable_reason()
        )
    program, error = _resolve_program(argv[0], env)
    if program is None:
        return _refused_plan(env, f"execserver-sandbox: failed to execvp {argv[0]}: {error}")
    if routes.allow_unix_sockets and not routes.all_unix_sockets:
        # seccomp cannot see which path a connect() names, and the view shows every
        # host socket: a per-path allow-list is not enforceable, so nothing runs.
        return _refused_plan(env, _UNIX_ALLOW_LIST_REFUSAL)
    if arg0 == argv[0]:
        arg0 = None
    # Whatever the policy says about network, the namespace is what routes traffic.
    policy = dataclasses.replace(policy, network_restricted=True)
    program_fd = seccomp.program_fd(
        seccomp.build_program(
            network_restricted=True,
            proxy_routed=True,
            allow_local_binding=routes.allow_local_binding,
            allow_unix_sockets=routes.all_unix_sockets,
        )
    )
    resources = _PlanResources()
    resources.child_fds.append(program_fd)
    try:
        layout = build_layout(
            policy,
            cwd=cwd,
            proc=backend.proc_ok,
            mounts=backend.mounts,
            extra_read=interpreter_paths(),
            private_binds=routes.socket_dirs,
        )
        resources.layout, resources.mounts = layout, backend.mounts
        status_read, status_write = os.pipe()
        resources.status_read = status_read
        resources.child_fds.append(status_write)
    except BaseException:
        resources.close()
        raise
    resources.child_fds.extend(layout.data_fds)
    layout.data_fds = []
    options = ["--seccomp-fd", str(program_fd), "--path", _search_path(env)]
    if arg0 is not None:
        options += ["--argv0", arg0]
    launcher = _launcher_argv(options, list(argv), env)
    bridge = [sys.executable, "-I", "-S", BRIDGE]
    for port, path in routes.routes:
        bridge += ["--route", f"{port}={path}"]
    full = [
        backend.bwrap,
        *layout.args,
        "--json-status-fd",
        str(status_write),
        "--",
        *bridge,
        "--",
        *launcher,
    ]
    return LaunchPlan(
        argv=full,
        env=env,
        pass_fds=tuple(resources.child_fds),
        sandbox_type=SANDBOX_TYPE,
        mechanism="bwrap",
        _resources=resources,
    )
