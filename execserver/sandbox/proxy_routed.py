"""Launch plan for a sandboxed child whose network must go through its proxy
(``enforceManagedNetwork`` + ``networkProxy``), the reference's "host proxy
routing bridge" (observed on the reference: the child reaches the proxy
through the port in HTTP_PROXY, a direct connect to any host port is refused).

Shape::

    bwrap <layout of the policy> --unshare-net [private dir masked]
          -- python bridge.py --hold-fd N --route PORT=/proc/self/fd/N/http.sock ...
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
  every sandbox view masks (no sandbox reaches another one's proxy by path).
  The bridge reaches its own directory through a descriptor: the daemon opens
  it (``O_PATH``), bwrap passes it through, and the bridge connects to
  ``/proc/self/fd/N/http.sock``, which the kernel follows without walking the
  directories above it. A tenant's bwrap runs as its account, which cannot
  search the daemon's 0700 private directory (nor ``STATE_DIR``): a bind of
  the directory by path fails there, and so does bwrap 0.8's ``--ro-bind-fd``,
  which ``realpath()``s the descriptor's path component by component. The
  bridge marks the descriptor close-on-exec, so the command never inherits it,
  and its forwarder is not dumpable, so the command cannot use it through
  ``/proc`` either.

Without bubblewrap (no network namespace) this cannot be enforced: refused.
Built by ``plan.bwrap_plan``, the builder of every bwrap plan (one layout, one
resource lifecycle); ``netproxy`` only produces the ``ProxyRoutes``.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from execserver.sandbox import seccomp
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.plan import (
    LaunchPlan,
    LaunchRequest,
    bwrap_plan,
    interpreter_paths,
    launcher_argv,
    refused_plan,
    resolve_sandboxed_program,
)
from execserver.sandbox.policy import ResolvedPolicy, unenforceable
from execserver.sandbox.program import child_search_path

__all__ = ["BRIDGE", "ProxyRoutes", "plan_proxy_routed"]

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
    request: LaunchRequest,
    *,
    backend: SandboxBackend,
    routes: ProxyRoutes,
) -> LaunchPlan:
    if backend.bwrap is None or not backend.seccomp_ok:
        raise unenforceable(
            "managed network needs a network namespace (bubblewrap) and seccomp: "
            + backend.unavailable_reason()
        )
    argv = list(request.argv)
    program, error = resolve_sandboxed_program(request)
    if program is None:
        return refused_plan(request, f"execserver-sandbox: failed to execvp {argv[0]}: {error}")
    if routes.allow_unix_sockets and not routes.all_unix_sockets:
        # seccomp cannot see which path a connect() names, and the view shows every
        # host socket: a per-path allow-list is not enforceable, so nothing runs.
        return refused_plan(request, _UNIX_ALLOW_LIST_REFUSAL)
    arg0 = None if request.arg0 == argv[0] else request.arg0
    filter_program = seccomp.build_program(
        network_restricted=True,
        proxy_routed=True,
        allow_local_binding=routes.allow_local_binding,
        allow_unix_sockets=routes.all_unix_sockets,
    )
    # The plan's from here on (bwrap_plan closes them after the spawn, or on failure).
    held = _open_socket_dirs(routes)
    bridge = [sys.executable, "-I", "-S", BRIDGE]
    for fd in held.values():
        bridge += ["--hold-fd", str(fd)]
    for port, path in routes.routes:
        fd = held[os.path.dirname(path)]
        bridge += ["--route", f"{port}=/proc/self/fd/{fd}/{os.path.basename(path)}"]

    def command(seccomp_fd: int) -> list[str]:
        # The launcher installs the filter once the bridge is listening.
        options = ["--seccomp-fd", str(seccomp_fd), "--path", child_search_path(request.env)]
        if arg0 is not None:
            options += ["--argv0", arg0]
        return [*bridge, "--", *launcher_argv(options, argv, request.env)]

    # Whatever the policy says about network, the namespace is what routes traffic.
    return bwrap_plan(
        dataclasses.replace(policy, network_restricted=True),
        backend,
        request,
        command,
        seccomp_program=filter_program,
        seccomp_by_bwrap=False,
        extra_read=interpreter_paths(),
        held_fds=tuple(held.values()),
    )


def _open_socket_dirs(routes: ProxyRoutes) -> dict[str, int]:
    """Each socket directory of ``routes``, opened ``O_PATH`` (the caller owns the
    descriptors); RpcError when one cannot be opened (nothing runs)."""
    held: dict[str, int] = {}
    try:
        for directory in routes.socket_dirs:
            held[directory] = os.open(
                directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
    except OSError as exc:
        for fd in held.values():
            os.close(fd)
        raise unenforceable(
            f"managed network: cannot open the proxy's socket directory: {exc.strerror}"
        ) from None
    return held
