"""Starting one of the daemon's own helper programs inside a policy's sandbox.

Two plans, both from ``plan_for_policy`` (the same bwrap layout, seccomp
program and mount-point bookkeeping as ``process/start``):

* ``runtime_plan``: the interpreter reached through the private runtime binds
  (``runtime.py``), so the helper sees exactly the policy's view; bwrap only.
* ``confined_plan``: the interpreter, this package and ``:minimal`` readable
  (any mechanism); the helper then confines itself to the policy's view before
  each request (``confine.py``).

``spawn_helper_process`` is the one place a helper process starts: the
per-process resource limits (``ProcessCgroups.helper_cgroup``) are applied there
and held for the helper's whole life, and its pid is registered as the
daemon's own (``helper_pids``) before anything else can run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
from contextlib import AsyncExitStack
from typing import Final

import execserver
from execserver.containment import ProcessCgroups
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.runtime import HelperRuntime
from execserver.sandbox.helper_pids import (
    helper_environment,
    register_helper,
    unregister_helper,
)
from execserver.sandbox.plan import LaunchPlan, LaunchRequest, interpreter_paths, plan_for_policy
from execserver.sandbox.policy import MINIMAL_READ_PATHS, ResolvedPolicy

__all__ = [
    "SpawnedHelper",
    "confined_plan",
    "kill_helper",
    "policy_view",
    "runtime_plan",
    "spawn_helper_process",
]

_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(execserver.__file__)))


# What a sandboxed process sees besides its policy: bwrap's fresh /dev and /proc.
_PROCESS_EXTRAS_READ: Final = ("/dev", "/proc")
_PROCESS_EXTRAS_WRITE: Final = ("/dev",)


def policy_view(policy: ResolvedPolicy) -> dict[str, list[str]]:
    """The paths a *process* with ``policy`` can see: the helper confines
    itself to exactly these after its interpreter has started (its own needs —
    the interpreter, this package, ``:minimal`` — are visible to it until then).
    Deny entries are not subtracted here: their masks are in the mount view."""
    read: list[str] = []
    write: list[str] = list(_PROCESS_EXTRAS_WRITE)
    if policy.root_access == "write":
        write.append("/")
    elif policy.root_access == "read":
        read.append("/")
    if policy.minimal_read:
        read += MINIMAL_READ_PATHS
    read += [*policy.readable, *_PROCESS_EXTRAS_READ]
    write += policy.writable
    return {"read": read, "write": write}


def runtime_plan(
    policy: ResolvedPolicy,
    backend: SandboxBackend,
    runtime: HelperRuntime,
    *,
    contained: bool = False,
) -> LaunchPlan | None:
    """The plan for ``runtime``'s program in exactly ``policy``'s view; None when
    the plan is not a bwrap plan (the private runtime binds need bwrap)."""
    plan = plan_for_policy(
        policy,
        LaunchRequest(argv=list(runtime.argv), cwd="/", env=dict(runtime.env)),
        backend=backend,
        runtime_binds=runtime.binds,
        contained=contained,
        reaper=False,  # the helper starts no process
    )
    if plan.mechanism != "bwrap":
        plan.close()
        return None
    return plan


def confined_plan(
    policy: ResolvedPolicy,
    backend: SandboxBackend,
    module: str,
    args: tuple[str, ...],
    *,
    contained: bool = False,
) -> LaunchPlan:
    """The plan for ``python -m module *args`` under ``policy`` widened by what the
    interpreter needs to start; the helper must confine itself to
    ``policy_view(policy)`` before it serves anything."""
    if not policy.full_read and not policy.enforces_nothing:
        # The helper's interpreter needs these to start; the view keeps the
        # request itself out of them.
        policy = dataclasses.replace(policy, minimal_read=True)
    env = {
        "PYTHONPATH": _PACKAGE_ROOT,
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    argv = [sys.executable, "-P", "-s", "-m", module, *args]
    request = LaunchRequest(argv=argv, cwd="/", env=env)
    return plan_for_policy(
        policy,
        request,
        backend=backend,
        extra_read=interpreter_paths(),
        contained=contained,
        reaper=False,  # the helper starts no process
    )


@dataclasses.dataclass
class SpawnedHelper:
    """A helper process and the daemon's ends of its channel (requests in,
    responses out) and of its stderr; ``resources`` (its cgroup) is released
    once it has exited."""

    process: asyncio.subprocess.Process
    channel: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    errors: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    resources: AsyncExitStack
    # The helper's ends of its two sockets (their inodes): what names a process
    # still holding them when the helper should be gone.
    child_sockets: tuple[int, int]


async def spawn_helper_process(
    plan: LaunchPlan, containment: ProcessCgroups | None = None, nice: int = 0
) -> SpawnedHelper:
    """Start ``plan`` with a socket for stdin/stdout and one for stderr, in a cgroup
    of ``containment``'s when the daemon has per-process limits; the helper program
    takes ``nice`` steps below the daemon first thing (execserver/priority.py). The
    plan is closed here (its status pipe is watched until bwrap exits)."""
    # Sockets, not pipes: a request naming /proc/self/fd/0 or /1 cannot reopen a
    # socket (ENXIO), so it can neither read nor inject frames; a pipe it could.
    channel, channel_child = socket.socketpair()
    errors, errors_child = socket.socketpair()
    child_sockets = (
        os.fstat(channel_child.fileno()).st_ino,
        os.fstat(errors_child.fileno()).st_ino,
    )
    resources = AsyncExitStack()
    try:
        try:
            # The per-process resource limits hold for the helper too (None without them).
            place = None
            if containment is not None:
                place = await resources.enter_async_context(containment.helper_cgroup())
            process = await asyncio.create_subprocess_exec(
                *plan.argv,
                env=helper_environment(plan.env, nice),
                pass_fds=plan.pass_fds,
                cwd="/",
                stdin=channel_child.fileno(),
                stdout=channel_child.fileno(),
                stderr=errors_child.fileno(),
                start_new_session=True,
                preexec_fn=place,
            )
            register_helper(process.pid)
        finally:
            # The daemon's copies of the child's fds go now; bwrap's status pipe is
            # watched until bwrap exits, which also releases synthetic mount points.
            plan.close()
            channel_child.close()
            errors_child.close()
        try:
            streams = await asyncio.open_unix_connection(sock=channel)
            error_streams = await asyncio.open_unix_connection(sock=errors)
        except BaseException:
            kill_helper(process)
            await asyncio.shield(process.wait())
            unregister_helper(process.pid)
            raise
    except BaseException:
        channel.close()
        errors.close()
        await resources.aclose()
        raise
    return SpawnedHelper(process, streams, error_streams, resources, child_sockets)


def kill_helper(process: asyncio.subprocess.Process) -> None:
    """SIGKILL a helper's process group, not only its bwrap; also after bwrap has
    exited, to end what its group still holds.

    bwrap's child in the new pid namespace waits (on an eventfd) for bwrap to
    write its uid map, and only then ties itself to bwrap's life
    (``--die-with-parent``). A bwrap killed in between left the child blocked on
    that read for good, re-parented to init: seen at the end of a 100-agent
    benchmark level, whose server stopped while a helper was starting (the
    reference's bwrap children stayed behind the same way). Until it calls
    ``setsid`` (``--new-session``) the child is in the helper's process group,
    which ``start_new_session`` made the helper's own; a group id stays reserved
    while a member lives, so the pid cannot name someone else's group."""
    with contextlib.suppress(ProcessLookupError):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except PermissionError:  # not ours to signal as a group: bwrap alone, as before
            process.kill()
