"""fs/* under a sandbox: the operation runs in a helper inside the same kernel
sandbox as a process would.

The fs service's own operations go to a persistent helper per resolved policy
(``execserver.sandbox.fs_helper``), which never sees more than the policy's
view, when one can serve the policy; everything else runs in the one-shot
helper described here.

The helper is ``python -m execserver.sandbox.fs_runner``: request as JSON on
stdin, result as JSON on stdout. It starts in the request's mount view plus
the minimal read set and the interpreter (which it needs to start), then,
before touching the request's paths, confines itself to what a process with
the same policy sees (``policy_view``): paths outside it are reported missing,
as they are for that process, and Landlock makes the kernel refuse them too.
So every path check is the kernel's: EROFS outside the writable roots, EACCES
on denied files, symlinks resolved inside the view. Errors come back as the
reference reports them (``rpc_error_from_os_error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from typing import Final

import execserver
from execserver.config import DEFAULT_GLOB_SCAN_LIMIT, SandboxConfig
from execserver.containment import contained_helper
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.route import call_persistent
from execserver.sandbox.helper_pids import helper_environment, register_helper
from execserver.sandbox.plan import (
    LaunchPlan,
    LaunchRequest,
    interpreter_paths,
    off_loop,
    plan_for_policy,
)
from execserver.sandbox.policy import (
    MINIMAL_READ_PATHS,
    ResolvedPolicy,
    resolve_policy,
    restricts_access,
)
from execserver.wire.base64_text import base64_text
from execserver.wire.errors import RpcError, rpc_error_from_os_error
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = [
    "SandboxHost",
    "needs_sandboxed_fs",
    "run_sandboxed_fs_call",
]

_RUNNER_MODULE: Final = "execserver.sandbox.fs_runner"
_WRITE_BYTES: Final = "execserver.fs.ops_write:write_file_bytes"
_WRITE_BASE64: Final = "execserver.fs.ops_write:write_file"
_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(execserver.__file__)))


@dataclasses.dataclass(frozen=True)
class SandboxHost:
    """The daemon's sandboxing as fs/* needs it: the backend probed at start-up
    and the configured helper mode and glob limit (``SandboxConfig``)."""

    backend: SandboxBackend
    persistent_fs_helper: bool = True
    glob_scan_limit: int = DEFAULT_GLOB_SCAN_LIMIT

    @classmethod
    def of(cls, backend: SandboxBackend | None, config: SandboxConfig) -> SandboxHost:
        """The server's; a server that never probed its backend refuses (fail closed)."""
        if backend is None:
            raise RpcError.internal("the sandbox backend was not probed at start-up")
        return cls(backend, config.persistent_fs_helper, config.glob_scan_limit)


def needs_sandboxed_fs(context: FileSystemSandboxContext, *, write: bool) -> bool:
    """False when the relevant access is unrestricted: the caller
    then runs the operation in-process, as the reference does."""
    return restricts_access(context, write=write)


# What a sandboxed process sees besides its policy: bwrap's fresh /dev and /proc.
_PROCESS_EXTRAS_READ: Final = ("/dev", "/proc")
_PROCESS_EXTRAS_WRITE: Final = ("/dev",)


def policy_view(policy: ResolvedPolicy) -> dict[str, list[str]]:
    """The paths a *process* with ``policy`` can see: the fs helper confines
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


def _runner_env() -> dict[str, str]:
    return {
        "PYTHONPATH": _PACKAGE_ROOT,
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _json_form(func: str, args: dict[str, object]) -> tuple[str, dict[str, object]]:
    """The one-shot helper speaks JSON: raw write data goes as base64."""
    if func == _WRITE_BYTES:
        data = args["data"]
        assert isinstance(data, bytes)
        rest = {k: v for k, v in args.items() if k != "data"}
        encoded = base64_text(data)
        return _WRITE_BASE64, {**rest, "data_base64": encoded}
    return func, args


def _decode_response(stdout: bytes, stderr: bytes, returncode: int) -> object:
    try:
        response = json.loads(stdout)
    except ValueError:
        detail = stderr.decode(errors="replace").strip()
        raise RpcError.internal(
            f"fs sandbox helper failed with status exit status: {returncode}: {detail}"
        ) from None
    if not isinstance(response, dict):
        raise RpcError.internal(f"fs sandbox helper returned {type(response).__name__}")
    if "ok" in response:
        return response["ok"]
    if "os_error" in response:
        err = response["os_error"]
        raise rpc_error_from_os_error(OSError(err.get("errno"), err.get("strerror")))
    if "rpc_error" in response:
        err = response["rpc_error"]
        raise RpcError(int(err["code"]), str(err["message"]))
    raise RpcError.internal(str(response.get("error", "fs sandbox helper failed")))


def _keep(policy: ResolvedPolicy) -> None:
    """Nothing to release for a resolved policy (``off_loop``'s cancel hook)."""


async def run_sandboxed_fs_call(
    context: FileSystemSandboxContext,
    *,
    func: str,
    args: dict[str, object],
    write: bool,
    host: SandboxHost,
) -> object:
    """Run ``func(**args)`` (``"package.module:function"``, sync, JSON in and out)
    inside the sandbox of ``context``; its OSError/RpcError come back as RpcError."""
    del write  # the sandbox enforces both kinds of access alike
    backend = host.backend
    # fs/* has no process cwd to fall back to: dynamic entries need the context's cwd.
    resolved = await off_loop(
        lambda: resolve_policy(context, fallback_cwd=None, glob_scan_limit=host.glob_scan_limit),
        _keep,
    )
    if host.persistent_fs_helper:
        served, result = await call_persistent(resolved, backend, func, dict(args))
        if served:
            return result
    func, args = _json_form(func, args)

    def build() -> tuple[LaunchPlan, dict[str, list[str]]]:
        policy = resolved
        view = policy_view(policy)
        if not policy.full_read and not policy.enforces_nothing:
            # The helper's interpreter needs these to start; the view above keeps
            # the request itself out of them.
            policy = dataclasses.replace(policy, minimal_read=True)
        request = LaunchRequest(
            argv=[sys.executable, "-P", "-s", "-m", _RUNNER_MODULE], cwd="/", env=_runner_env()
        )
        plan = plan_for_policy(policy, request, backend=backend, extra_read=interpreter_paths())
        return plan, view

    plan, view = await off_loop(build, lambda built: built[0].close())
    request = json.dumps({"func": func, "args": args, "view": view}).encode()
    # The per-process resource limits hold for the helper too (a no-op without them).
    try:
        async with contained_helper() as place:
            return await _run_helper(plan, request, place)
    finally:
        plan.close()  # idempotent; covers a cgroup that could not be made


async def _run_helper(plan: LaunchPlan, request: bytes, place: Callable[[], None] | None) -> object:
    try:
        proc = await asyncio.create_subprocess_exec(
            *plan.argv,
            env=helper_environment(plan.env),
            pass_fds=plan.pass_fds,
            cwd="/",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=place,
        )
        register_helper(proc.pid)
    finally:
        plan.close()
    try:
        stdout, stderr = await proc.communicate(request)
    except BaseException:
        # Cancelled (e.g. the connection went away): do not leave the helper behind.
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    assert proc.returncode is not None
    return _decode_response(stdout, stderr, proc.returncode)
