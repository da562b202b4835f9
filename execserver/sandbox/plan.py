"""``plan_process_launch``: a sandbox context + a command -> exactly what to exec.

The plan is a different argv (plus fds to inherit); the process module spawns
it like any other command. Which mechanism:

* ``disabled``: the command as is (``sandboxType`` is still ``linuxSeccomp``).
* full filesystem access (``unrestricted``, ``external``, ``:root`` write
  without carve-outs): ``launcher.py`` applies no_new_privs + seccomp, no
  namespaces (the reference does the same, its child stays in the host pid ns).
* anything that restricts the filesystem: ``bwrap`` + seccomp by fd, one exec.
* no usable bwrap: ``launcher.py`` with Landlock, only for policies Landlock
  expresses exactly (no writable roots, since their protected ``.git``/... cannot
  be carved out; no deny entries); otherwise the request is refused.

A sandboxed request is never run without its sandbox: every failure here is an
RpcError raised before anything is spawned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeVar

from execserver.sandbox import seccomp
from execserver.sandbox.backend import SandboxBackend, detect_backend
from execserver.sandbox.bwrap import BwrapLayout, build_layout, release_layout
from execserver.sandbox.mounts import SyntheticMounts
from execserver.sandbox.policy import (
    MINIMAL_READ_PATHS,
    ResolvedPolicy,
    resolve_policy,
    unenforceable,
)
from execserver.wire.errors import RpcError, os_error_text
from execserver.wire.sandbox import FileSystemSandboxContext

if TYPE_CHECKING:
    from execserver.netproxy.sandbox import ProxyRoutes

__all__ = [
    "LAUNCHER",
    "SANDBOX_TYPE",
    "LaunchPlan",
    "interpreter_paths",
    "off_loop",
    "plan_for_policy",
    "plan_process_launch",
]

SANDBOX_TYPE: Final = "linuxSeccomp"
LAUNCHER: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
_PROXY_ENV: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
_MANAGED_PROXY_MISSING: Final = (
    "execserver-sandbox: failed to prepare host proxy routing bridge: managed proxy mode "
    "requires proxy environment variables"
)
_MANAGED_PROXY_UNSUPPORTED: Final = (
    "execserver-sandbox: managed proxy mode (enforceManagedNetwork) cannot be enforced by "
    "this executor: routing the sandbox's traffic through the proxy is not implemented"
)
_LEGACY_LANDLOCK_REFUSAL: Final = (
    "execserver-sandbox: filesystem-restricted execution requires bubblewrap to isolate "
    "app-server sockets (useLegacyLandlock is not supported for restricted file systems)"
)


class _PlanResources:
    """fds and synthetic mount points owned by one plan.

    ``close()`` (after spawn) closes the daemon's copies of the child's fds; the
    read end of bwrap's ``--json-status-fd`` is then watched until EOF (bwrap
    exited) to learn whether the sandbox came up and to release the synthetic
    mount points only once the sandbox is gone."""

    def __init__(self) -> None:
        self.child_fds: list[int] = []
        self.status_read: int | None = None
        self.layout: BwrapLayout | None = None
        self.mounts: SyntheticMounts | None = None
        self.setup_ok: bool | None = None
        self.done = threading.Event()
        self._closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for fd in self.child_fds:
            os.close(fd)
        self.child_fds.clear()
        if self.status_read is None:
            self._finish()
            return
        # A thread, not loop.add_reader: the plan API is synchronous and may be used
        # outside an event loop; one blocked read per live sandbox is cheap.
        threading.Thread(target=self._watch_status, name="sandbox-status", daemon=True).start()

    def _watch_status(self) -> None:
        assert self.status_read is not None
        data = b""
        try:
            while True:
                chunk = os.read(self.status_read, 4096)
                if not chunk:
                    break
                data += chunk
                if self.setup_ok is None and b'"child-pid"' in data:
                    self.setup_ok = True
        finally:
            os.close(self.status_read)
            self.status_read = None
            # bwrap writes {"child-pid": ...} only once the sandbox is set up.
            self.setup_ok = b'"child-pid"' in data
            self._finish()

    def _finish(self) -> None:
        if self.layout is not None and self.mounts is not None:
            release_layout(self.layout, self.mounts)
        self.done.set()


@dataclass(frozen=True)
class LaunchPlan:
    """What to exec for a sandboxed command; call ``close()`` once it was spawned
    (or when spawning failed)."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...]
    sandbox_type: str
    mechanism: str = "none"  # "none" | "seccomp" | "bwrap" | "landlock" | "refused"
    _resources: _PlanResources = field(default_factory=_PlanResources, repr=False, compare=False)

    def close(self) -> None:
        self._resources.close()

    def setup_failed(self) -> bool | None:
        """For bwrap plans after exit: True when the sandbox never came up (the exit
        status is bwrap's, not the command's). None while unknown / not bwrap."""
        ok = self._resources.setup_ok
        return None if ok is None else not ok

    def wait_released(self, timeout: float | None = None) -> bool:
        """Block until the sandbox's host resources are released (tests, shutdown)."""
        return self._resources.done.wait(timeout)


def interpreter_paths() -> tuple[str, ...]:
    """What a Python helper started inside a restricted-read view must be able to
    read: the interpreter, its prefixes, this package and its import path."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(LAUNCHER)))
    paths = {
        os.path.realpath(sys.executable),
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        package_root,
    }
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    return tuple(sorted(paths))


def _search_path(env: dict[str, str]) -> str:
    # Non-tty lookup uses the server's PATH when the child env has none.
    return env.get("PATH") or os.environ.get("PATH") or os.defpath


def _resolve_program(program: str, env: dict[str, str]) -> tuple[str | None, str | None]:
    """(path, None) or (None, error text) for the program as the sandbox will see it."""
    if "/" in program:
        if not os.path.exists(program):
            return None, os_error_text(2)
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            return None, os_error_text(13)
        return program, None
    found = shutil.which(program, path=_search_path(env))
    if found is None:
        return None, os_error_text(2)
    return found, None


# Variables the launcher's interpreter may add to its own environment at start-up.
_INTERPRETER_ADDED_ENV: Final = ("LC_CTYPE",)


def _launcher_argv(options: list[str], argv: list[str], env: dict[str, str]) -> list[str]:
    for name in _INTERPRETER_ADDED_ENV:
        if name not in env:
            options = [*options, "--unset", name]
    return [sys.executable, "-I", "-S", LAUNCHER, *options, "--", *argv]


def _refused_plan(env: dict[str, str], message: str) -> LaunchPlan:
    """Runs nothing of the request: prints ``message`` and exits 101, which is what
    the reference's sandbox helper does when it cannot exec (so the outcome,
    exit code and ``sandboxDenied``, is the same as there)."""
    return LaunchPlan(
        argv=_launcher_argv(["--fail", message], ["false"], env),
        env=env,
        pass_fds=(),
        sandbox_type=SANDBOX_TYPE,
        mechanism="refused",
    )


def _launcher_plan(
    policy: ResolvedPolicy,
    argv: list[str],
    env: dict[str, str],
    *,
    arg0: str | None,
    landlock_rules: str | None = None,
) -> LaunchPlan:
    fd = seccomp.program_fd(seccomp.build_program(network_restricted=policy.network_restricted))
    resources = _PlanResources()
    resources.child_fds.append(fd)
    options = ["--seccomp-fd", str(fd), "--path", _search_path(env)]
    if arg0 is not None:
        options += ["--argv0", arg0]
    if landlock_rules is not None:
        options += ["--landlock", landlock_rules]
    return LaunchPlan(
        argv=_launcher_argv(options, argv, env),
        env=env,
        pass_fds=(fd,),
        sandbox_type=SANDBOX_TYPE,
        mechanism="seccomp" if landlock_rules is None else "landlock",
        _resources=resources,
    )


def _landlock_expressible(policy: ResolvedPolicy) -> str | None:
    """None when Landlock enforces ``policy`` exactly, else why not."""
    if policy.writable:
        return "writable roots need read-only .git/.codex/.agents/.aws carve-outs"
    if policy.denied:
        return "deny entries need carve-outs inside readable paths"
    return None


def _landlock_rules(policy: ResolvedPolicy, program: str) -> str:
    read = ["/"] if policy.root_access is not None else []
    if policy.minimal_read:
        read += list(MINIMAL_READ_PATHS)
    read += list(policy.readable)
    # The launcher's interpreter and the program must stay loadable after restricting.
    read += [os.path.realpath(sys.executable), sys.base_prefix, sys.prefix, program]
    return json.dumps({"read": read, "write": []})


def _bwrap_plan(
    policy: ResolvedPolicy,
    backend: SandboxBackend,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    extra_read: tuple[str, ...],
    runtime_binds: tuple[tuple[str, str], ...] = (),
) -> LaunchPlan:
    assert backend.bwrap is not None
    layout = build_layout(
        policy,
        cwd=cwd,
        proc=backend.proc_ok,
        mounts=backend.mounts,
        extra_read=extra_read,
        runtime_binds=runtime_binds,
    )
    resources = _PlanResources()
    resources.layout, resources.mounts = layout, backend.mounts
    try:
        seccomp_fd = seccomp.program_fd(
            seccomp.build_program(network_restricted=policy.network_restricted)
        )
        resources.child_fds.append(seccomp_fd)
        status_read, status_write = os.pipe()
        os.set_inheritable(status_read, False)
        resources.status_read = status_read
        resources.child_fds.append(status_write)
    except BaseException:
        resources.close()
        raise
    resources.child_fds.extend(layout.data_fds)
    layout.data_fds = []  # now owned by resources.child_fds (closed after spawn)
    full = [
        backend.bwrap,
        *layout.args,
        "--seccomp",
        str(seccomp_fd),
        "--json-status-fd",
        str(status_write),
        "--",
        *argv,
    ]
    return LaunchPlan(
        argv=full,
        env=env,
        pass_fds=tuple(resources.child_fds),
        sandbox_type=SANDBOX_TYPE,
        mechanism="bwrap",
        _resources=resources,
    )


P = TypeVar("P")


async def off_loop(build: Callable[[], P], release: Callable[[P], None]) -> P:
    """Run a planning step in a worker thread: resolving a policy walks the
    filesystem (realpath of every entry, deny-glob expansion over possibly large
    trees), which must not stall the event loop. A cancelled caller still gets
    the finished plan released (its fds closed, its mount points freed)."""
    future = asyncio.get_running_loop().run_in_executor(None, build)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            release(await future)
        raise


def plan_for_policy(
    policy: ResolvedPolicy,
    *,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    backend: SandboxBackend,
    extra_read: tuple[str, ...] = (),
    arg0: str | None = None,
    runtime_binds: tuple[tuple[str, str], ...] = (),
) -> LaunchPlan:
    """The plan for an already resolved policy (shared by processes and fs calls).
    ``arg0``: what the program sees as argv[0] (``argv[0]`` still locates it).
    ``runtime_binds``: read-only binds after every policy rule, bwrap plans only
    (a caller that needs them must check ``mechanism == "bwrap"``)."""
    if not argv:
        raise RpcError.invalid_params("argv must not be empty")
    if arg0 == argv[0]:
        arg0 = None
    if policy.enforces_nothing:
        if arg0 is None:
            return LaunchPlan(argv=list(argv), env=env, pass_fds=(), sandbox_type=SANDBOX_TYPE)
        exec_only = ["--exec-only", "--argv0", arg0, "--path", _search_path(env)]
        return LaunchPlan(
            argv=_launcher_argv(exec_only, argv, env),
            env=env,
            pass_fds=(),
            sandbox_type=SANDBOX_TYPE,
        )
    if not backend.seccomp_ok:
        raise unenforceable(backend.unavailable_reason())
    if policy.legacy_landlock and not policy.full_write:
        return _refused_plan(env, _LEGACY_LANDLOCK_REFUSAL)
    mechanism = _choose_mechanism(policy, backend)
    program: str | None = argv[0]
    error: str | None = None
    if not runtime_binds:  # else the program lives under a runtime bind: no host path
        program, error = _resolve_program(argv[0], env)
    if program is None:
        return _refused_plan(env, f"execserver-sandbox: failed to execvp {argv[0]}: {error}")
    if mechanism == "seccomp":
        return _launcher_plan(policy, argv, env, arg0=arg0)
    if mechanism == "landlock":
        rules = _landlock_rules(policy, program)
        return _launcher_plan(policy, argv, env, arg0=arg0, landlock_rules=rules)
    # bwrap execvp()s with the child's PATH; without one, hand it the path we found
    # with the server's PATH so lookup behaves as for unsandboxed commands.
    command = argv if "PATH" in env else [program, *argv[1:]]
    if arg0 is not None:
        # bwrap 0.8 has no --argv0: the launcher, already inside the sandbox, only
        # renames argv[0] and execs (+~20 ms, only for requests that set arg0).
        exec_only = ["--exec-only", "--argv0", arg0, "--path", _search_path(env)]
        command = _launcher_argv(exec_only, [program, *argv[1:]], env)
        extra_read = (*extra_read, *interpreter_paths())
    return _bwrap_plan(policy, backend, command, cwd, env, extra_read, runtime_binds)


def _choose_mechanism(policy: ResolvedPolicy, backend: SandboxBackend) -> str:
    """Which mechanism enforces ``policy`` here; RpcError when none can (fail closed)."""
    if policy.full_write:
        return "seccomp"
    if backend.bwrap is not None:
        return "bwrap"
    if backend.landlock_abi > 0:
        why_not = _landlock_expressible(policy)
        if why_not is None:
            return "landlock"
        raise unenforceable(
            f"bubblewrap is unusable ({backend.bwrap_error}) and Landlock cannot express "
            f"this policy: {why_not}"
        )
    raise unenforceable(backend.unavailable_reason())


def plan_process_launch(
    context: FileSystemSandboxContext,
    *,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    tty: bool,
    arg0: str | None = None,
    enforce_managed_network: bool = False,
    backend: SandboxBackend | None = None,
    proxy_routes: ProxyRoutes | None = None,
) -> LaunchPlan:
    """The launch plan for process/start with a ``sandbox``; raises RpcError when the
    context is invalid or cannot be enforced here (nothing is spawned then).

    ``tty`` needs nothing special: bwrap's ``--new-session`` leaves the command
    without a controlling terminal (as under the reference), which also blocks
    TIOCSTI injection into the daemon's terminal.

    ``enforce_managed_network``: the request demands that all traffic goes through
    a managed proxy. Like the reference, a request without proxy variables in its
    env runs nothing and exits 101; with them we still refuse (exit 101), because
    bridging the proxy into the sandbox is not implemented: fail closed."""
    del tty
    policy = resolve_policy(context, fallback_cwd=cwd)
    if enforce_managed_network and not policy.enforces_nothing:
        if proxy_routes is not None:
            # Managed network: the executor launched this process's proxy; route
            # the child's traffic through it (network namespace + bridge).
            from execserver.netproxy.sandbox import plan_proxy_routed

            return plan_proxy_routed(
                policy,
                argv=argv,
                cwd=cwd,
                env=env,
                backend=backend or detect_backend(),
                routes=proxy_routes,
                arg0=arg0,
            )
        has_proxy = any(k.upper() in _PROXY_ENV for k in env)
        return _refused_plan(
            env, _MANAGED_PROXY_UNSUPPORTED if has_proxy else _MANAGED_PROXY_MISSING
        )
    return plan_for_policy(
        policy, argv=argv, cwd=cwd, env=env, backend=backend or detect_backend(), arg0=arg0
    )
