"""Launch plans: one request in, exactly what to exec out.

``LaunchRequest`` is what ``process/start`` (or the sandboxed fs helper) asks
for, with the child's environment already built; ``LaunchPlan`` is the one
type every planner returns and ``processes.launch.spawn`` starts. The builders
here are shared by every sandboxed shape (``planner.py`` picks one; the
proxy-routed shape in ``proxy_routed.py`` uses the same bwrap builder):

* ``disabled``: the command as is (``sandboxType`` is still ``linuxSeccomp``).
* full filesystem access (``unrestricted``, ``external``, ``:root`` write
  without carve-outs): ``launcher.py --namespaces`` where the host allows user
  namespaces: the command in user, mount, pid and cgroup namespaces of its own
  (nested mounts and namespaces work as under the reference, whose child has
  no namespaces; the daemon is out of its reach and so is every cgroup file),
  plus no_new_privs, seccomp and Landlock's signal scope. Elsewhere the
  launcher drops every capability instead (nested mount/unshare refused), and
  with per-process limits the request is refused: a same-uid command could
  write its own cgroup's files.
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
import logging
import os
import re
import selectors
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from execserver.sandbox import seccomp
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.bwrap import Account, BwrapLayout, build_layout, release_layout
from execserver.sandbox.mounts import SyntheticMounts
from execserver.sandbox.policy import MINIMAL_READ_PATHS, ResolvedPolicy, unenforceable
from execserver.sandbox.program import check_program_path, child_search_path, find_program
from execserver.wire.errors import RpcError, os_error_text
from execserver.wire.process import SandboxType

__all__ = [
    "LAUNCHER",
    "SANDBOX_TYPE",
    "Credentials",
    "LaunchPlan",
    "LaunchRequest",
    "PlanResources",
    "bwrap_plan",
    "interpreter_paths",
    "launcher_argv",
    "off_loop",
    "plan_for_policy",
    "refused_plan",
    "resolve_sandboxed_program",
]

_log = logging.getLogger(__name__)

SANDBOX_TYPE: Final = "linuxSeccomp"
LAUNCHER: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
_LEGACY_LANDLOCK_REFUSAL: Final = (
    "execserver-sandbox: filesystem-restricted execution requires bubblewrap to isolate "
    "app-server sockets (useLegacyLandlock is not supported for restricted file systems)"
)


@dataclass(frozen=True)
class Credentials:
    """The Unix account a process runs as when it is not the daemon's own: a
    tenant's (execserver.tenancy), taken from the account database. Applied at
    the last step, by whatever execs the plan (``processes.launch.spawn``), so a
    sandboxed plan's bwrap or launcher already runs as the account."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


@dataclass(frozen=True)
class LaunchRequest:
    """What to run, before any sandbox: ``env`` is the child's final environment
    (built once by the caller, ``processes.envpolicy.build_environment``)."""

    argv: Sequence[str]
    cwd: str
    env: dict[str, str]
    tty: bool = False
    pipe_stdin: bool = False
    arg0: str | None = None  # what the program sees as argv[0] (argv[0] still locates it)
    enforce_managed_network: bool = False
    credentials: Credentials | None = None  # None: the daemon's own uid


_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*(\d+)')


class PlanResources:
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
        # The host pid of bwrap's own child (pid 1 of the sandbox's pid namespace),
        # from its status: when the command ends bwrap exits without waiting for
        # it, so it becomes the daemon's zombie to reap (Supervisor.root_exited).
        self.child_pid: int | None = None
        self.done = threading.Event()
        self._status = b""  # what bwrap wrote to the status pipe so far
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
        _STATUS_PIPES.watch(self)

    def hand_over(self) -> tuple[list[int], list[str]]:
        """For a process held by something that outlives this daemon (a keeper,
        execserver/keeper/): what of the sandbox's host resources must outlive it
        too, before ``close()``. Returns descriptors for the new holder (the read end
        of bwrap's status pipe, so bwrap never writes into a pipe nobody holds,
        then one held reference per mount point, ``SyntheticMounts.hold_elsewhere``)
        and the mount points' paths, in that order. The status pipe is theirs from
        now on: ``close()`` releases this daemon's own references at once instead
        of when bwrap exits, the holder's keeping the mount points. The caller
        closes the returned descriptors once they are sent."""
        fds: list[int] = []
        paths: list[str] = []
        try:
            if self.layout is not None and self.mounts is not None:
                for path in self.layout.synthetic:
                    fds.append(self.mounts.hold_elsewhere(path))
                    paths.append(path)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        if self.status_read is not None:
            fds.insert(0, self.status_read)
            self.status_read = None
        return fds, paths

    def _status_read(self, chunk: bytes) -> None:
        """Called by the status watcher with what bwrap wrote (b"": it exited)."""
        if chunk:
            self._status += chunk
            if self.setup_ok is None and b'"child-pid"' in self._status:
                self.setup_ok = True
                found = _CHILD_PID.search(self._status)
                self.child_pid = int(found.group(1)) if found else None
            return
        assert self.status_read is not None
        os.close(self.status_read)
        self.status_read = None
        # bwrap writes {"child-pid": ...} only once the sandbox is set up.
        self.setup_ok = b'"child-pid"' in self._status
        self._finish()

    def _finish(self) -> None:
        if self.layout is not None and self.mounts is not None:
            release_layout(self.layout, self.mounts)
        self.done.set()


class _StatusPipes:
    """One thread that reads the status pipe of every live sandbox (one thread per
    daemon instead of one per sandboxed launch, and the same in or outside an event
    loop: the plan API is synchronous and the doctor uses it from worker threads).

    Started with the first sandboxed launch, it lives as long as the process: a
    daemon thread blocked in ``select`` on the pipes and its own wake-up pipe, owning
    each pipe until bwrap closes it. Plans reach it through ``watch`` only; the
    selector is touched by this thread alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arriving: list[PlanResources] = []
        self._thread: threading.Thread | None = None
        self._wake_read = self._wake_write = -1

    def watch(self, resources: PlanResources) -> None:
        with self._lock:
            self._arriving.append(resources)
            if self._thread is None:
                self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                self._thread = threading.Thread(
                    target=self._run, name="sandbox-status", daemon=True
                )
                self._thread.start()
        with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
            os.write(self._wake_write, b"w")

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_read, selectors.EVENT_READ, None)
        while True:
            for key, _ in selector.select():
                resources: PlanResources | None = key.data
                if resources is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_read, 4096)
                    with self._lock:
                        arriving, self._arriving = self._arriving, []
                    for plan in arriving:
                        assert plan.status_read is not None
                        selector.register(plan.status_read, selectors.EVENT_READ, plan)
                    continue
                try:
                    chunk = os.read(key.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    selector.unregister(key.fd)
                try:
                    resources._status_read(chunk)
                except Exception:  # one plan's failure must not end every plan's watch
                    _log.exception("sandbox status pipe: handling bwrap's status failed")


_STATUS_PIPES = _StatusPipes()


@dataclass(frozen=True)
class LaunchPlan:
    """What to exec, sandboxed or not; call ``close()`` once it was spawned (or
    when spawning failed): it releases the plan's fds and mount points."""

    argv: list[str]  # what the program sees, argv[0] included
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()
    sandbox_type: SandboxType = SANDBOX_TYPE
    mechanism: str = "none"  # "none" | "seccomp" | "bwrap" | "landlock" | "refused"
    # What execve gets when it differs from argv[0] (a resolved path under arg0).
    program: str | None = None
    cwd: str = "/"
    tty: bool = False
    pipe_stdin: bool = False
    credentials: Credentials | None = None  # None: the daemon's own uid
    resources: PlanResources = field(default_factory=PlanResources, repr=False, compare=False)

    @property
    def executable(self) -> str:
        return self.program if self.program is not None else self.argv[0]

    def close(self) -> None:
        self.resources.close()

    def setup_failed(self) -> bool | None:
        """For bwrap plans after exit: True when the sandbox never came up (the exit
        status is bwrap's, not the command's). None while unknown / not bwrap."""
        ok = self.resources.setup_ok
        return None if ok is None else not ok

    def wait_released(self, timeout: float | None = None) -> bool:
        """Block until the sandbox's host resources are released (tests, shutdown)."""
        return self.resources.done.wait(timeout)


def _plan(
    request: LaunchRequest,
    argv: list[str],
    *,
    mechanism: str,
    pass_fds: tuple[int, ...] = (),
    resources: PlanResources | None = None,
) -> LaunchPlan:
    """A sandboxed plan of ``request``: ``argv`` is the wrapped command."""
    return LaunchPlan(
        argv=argv,
        env=request.env,
        pass_fds=pass_fds,
        sandbox_type=SANDBOX_TYPE,
        mechanism=mechanism,
        cwd=request.cwd,
        tty=request.tty,
        pipe_stdin=request.pipe_stdin,
        credentials=request.credentials,
        resources=resources or PlanResources(),
    )


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


def resolve_sandboxed_program(request: LaunchRequest) -> tuple[str | None, str | None]:
    """(path, None) or (None, error text) for the program the sandbox will exec:
    the same lookup as an unsandboxed start (``sandbox.program``)."""
    program = request.argv[0]
    if "/" in program:
        errno = check_program_path(program, request.cwd)
        return (program, None) if errno is None else (None, os_error_text(errno))
    found = find_program(program, child_search_path(request.env), request.cwd)
    if found is None:
        return None, os_error_text(2)
    return found, None


# Variables the launcher's interpreter may add to its own environment at start-up.
_INTERPRETER_ADDED_ENV: Final = ("LC_CTYPE",)


def launcher_argv(options: list[str], argv: Sequence[str], env: dict[str, str]) -> list[str]:
    """``python launcher.py OPTIONS -- ARGV``: the stdlib-only in-sandbox launcher."""
    for name in _INTERPRETER_ADDED_ENV:
        if name not in env:
            options = [*options, "--unset", name]
    return [sys.executable, "-I", "-S", LAUNCHER, *options, "--", *argv]


def refused_plan(request: LaunchRequest, message: str) -> LaunchPlan:
    """Runs nothing of the request: prints ``message`` and exits 101, which is what
    the reference's sandbox helper does when it cannot exec (so the outcome,
    exit code and ``sandboxDenied``, is the same as there)."""
    argv = launcher_argv(["--fail", message], ["false"], request.env)
    return _plan(request, argv, mechanism="refused")


def _launcher_plan(
    policy: ResolvedPolicy,
    request: LaunchRequest,
    *,
    arg0: str | None,
    landlock_rules: str | None = None,
    namespaces: bool = False,
) -> LaunchPlan:
    program = seccomp.build_program(
        network_restricted=policy.network_restricted, nested_namespaces=namespaces
    )
    fd = seccomp.program_fd(program)
    resources = PlanResources()
    resources.child_fds.append(fd)
    options = ["--seccomp-fd", str(fd), "--path", child_search_path(request.env)]
    if arg0 is not None:
        options += ["--argv0", arg0]
    if landlock_rules is not None:
        options += ["--landlock", landlock_rules]
    else:
        # Full filesystem access: no signal to the daemon or any other process
        # outside the command's tree (Landlock ABI 6; the launcher checks).
        options += ["--namespaces", "--scope-signals"] if namespaces else ["--scope-signals"]
    return _plan(
        request,
        launcher_argv(options, request.argv, request.env),
        mechanism="seccomp" if landlock_rules is None else "landlock",
        pass_fds=(fd,),
        resources=resources,
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


def bwrap_plan(
    policy: ResolvedPolicy,
    backend: SandboxBackend,
    request: LaunchRequest,
    command: Callable[[int], list[str]],
    *,
    seccomp_program: bytes,
    seccomp_by_bwrap: bool = True,
    extra_read: tuple[str, ...] = (),
    runtime_binds: tuple[tuple[str, str], ...] = (),
    held_fds: tuple[int, ...] = (),
    reaper: bool = True,
) -> LaunchPlan:
    """The one bwrap plan builder: ``bwrap <layout of policy> [--seccomp FD]
    --json-status-fd FD -- command(FD of the seccomp program)``.

    ``seccomp_by_bwrap``: bwrap installs the filter itself; when False the
    command (the proxy-routed launcher) installs it from the fd, later.
    ``held_fds``: descriptors the command inherits (the proxy-routed bridge's
    socket directories), the plan's from the call on: passed to the child and
    closed after the spawn like its other fds, or at once on failure. ``reaper``:
    see ``build_layout``."""
    if backend.bwrap is None:
        for fd in held_fds:
            os.close(fd)
        raise unenforceable(backend.unavailable_reason())
    resources = PlanResources()
    resources.child_fds.extend(held_fds)
    try:
        seccomp_fd = seccomp.program_fd(seccomp_program)
        resources.child_fds.append(seccomp_fd)
        layout = build_layout(
            policy,
            cwd=request.cwd,
            mounts=backend.mounts,
            extra_read=extra_read,
            runtime_binds=runtime_binds,
            account=_account(request.credentials),
            reaper=reaper,
        )
        resources.layout, resources.mounts = layout, backend.mounts
        status_read, status_write = os.pipe()
        # Only bwrap gets the write end; the daemon keeps the read end to itself.
        os.set_inheritable(status_read, False)
        resources.status_read = status_read
        resources.child_fds.append(status_write)
    except BaseException:
        resources.close()
        raise
    resources.child_fds.extend(layout.data_fds)
    layout.data_fds = []  # now owned by resources.child_fds (closed after spawn)
    seccomp_args = ["--seccomp", str(seccomp_fd)] if seccomp_by_bwrap else []
    full = [
        backend.bwrap,
        *layout.args,
        *seccomp_args,
        "--json-status-fd",
        str(status_write),
        "--",
        *command(seccomp_fd),
    ]
    return _plan(
        request,
        full,
        mechanism="bwrap",
        pass_fds=tuple(resources.child_fds),
        resources=resources,
    )


def _account(credentials: Credentials | None) -> Account | None:
    if credentials is None:
        return None
    return credentials.uid, credentials.gid, credentials.groups


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
    request: LaunchRequest,
    *,
    backend: SandboxBackend,
    extra_read: tuple[str, ...] = (),
    runtime_binds: tuple[tuple[str, str], ...] = (),
    contained: bool = False,
    reaper: bool = True,
) -> LaunchPlan:
    """The plan for an already resolved policy (shared by processes and fs calls).
    ``contained``: the process runs in a per-process limits cgroup (the daemon has
    its ``ProcessCgroups``).
    ``runtime_binds``: read-only binds after every policy rule, bwrap plans only
    (a caller that needs them must check ``mechanism == "bwrap"``).
    ``reaper``: False for a program that starts no process (the daemon's helpers):
    bwrap plans then run it as the sandbox's pid 1 (``build_layout``)."""
    argv = list(request.argv)
    if not argv:
        raise RpcError.invalid_params("argv must not be empty")
    arg0 = None if request.arg0 == argv[0] else request.arg0
    if policy.enforces_nothing:
        if arg0 is None:
            return _plan(request, argv, mechanism="none")
        exec_only = ["--exec-only", "--argv0", arg0, "--path", child_search_path(request.env)]
        return _plan(request, launcher_argv(exec_only, argv, request.env), mechanism="none")
    if not backend.seccomp_ok:
        raise unenforceable(backend.unavailable_reason())
    if policy.legacy_landlock and not policy.full_write:
        return refused_plan(request, _LEGACY_LANDLOCK_REFUSAL)
    mechanism = _choose_mechanism(policy, backend)
    program: str | None = argv[0]
    error: str | None = None
    if not runtime_binds:  # else the program lives under a runtime bind: no host path
        program, error = resolve_sandboxed_program(request)
    if program is None:
        return refused_plan(request, f"execserver-sandbox: failed to execvp {argv[0]}: {error}")
    if mechanism == "seccomp":
        if not backend.launcher_namespaces and contained:
            raise unenforceable(
                "per-process limits cannot hold a command with full filesystem access "
                "without user namespaces (it could write its own cgroup's files): "
                f"{backend.namespaces_error}"
            )
        return _launcher_plan(policy, request, arg0=arg0, namespaces=backend.launcher_namespaces)
    if mechanism == "landlock":
        rules = _landlock_rules(policy, program)
        return _launcher_plan(policy, request, arg0=arg0, landlock_rules=rules)
    # bwrap execvp()s in the request's cwd with the child's PATH: the lookup
    # checked above. Without a PATH, hand it the path found above.
    command = argv if "PATH" in request.env else [program, *argv[1:]]
    if arg0 is not None:
        # bwrap 0.8 has no --argv0: the launcher, already inside the sandbox, only
        # renames argv[0] and execs (+~20 ms, only for requests that set arg0).
        exec_only = ["--exec-only", "--argv0", arg0, "--path", child_search_path(request.env)]
        command = launcher_argv(exec_only, command, request.env)
        extra_read = (*extra_read, *interpreter_paths())
    return bwrap_plan(
        policy,
        backend,
        request,
        lambda _fd: command,
        seccomp_program=seccomp.build_program(network_restricted=policy.network_restricted),
        extra_read=extra_read,
        runtime_binds=runtime_binds,
        reaper=reaper,
    )


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
