"""Where an fs operation runs: a worker thread, or the sandbox helper.

Blocking file I/O never runs on the event loop: unsandboxed operations go to
a dedicated thread pool (so a 50 MB read cannot starve other services of the
default executor). A request whose sandbox restricts the relevant access runs
the same operation inside the sandbox (``execserver/fs/sandboxed/client.py``),
never unsandboxed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from execserver.containment import ProcessCgroups
from execserver.fs.errors import fs_error
from execserver.fs.local_mounts import LOCAL_MOUNTS
from execserver.fs.operations import FsOperation
from execserver.fs.sandboxed.client import SandboxedFs
from execserver.fs.worker_pool import WorkerPool
from execserver.kernel.methods import MUST_WAIT
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs import needs_sandboxed_fs
from execserver.sandbox.policy import DYNAMIC_CWD_MESSAGE, has_dynamic_entries
from execserver.tenancy.fs_access import FsPath, as_tenant
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.seat import tenant_of
from execserver.wire.errors import RpcError
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = [
    "caller_of",
    "in_thread",
    "in_thread_to_completion",
    "needs_sandbox",
    "run_as_tenant",
    "run_cheap_fs_op_at_once",
    "run_fs_op",
    "run_sandboxed",
    "sandboxed_fs",
    "who_asks",
]

if TYPE_CHECKING:
    from execserver.kernel.context import RequestContext

T = TypeVar("T")

_WORKERS = 16
_POOL = WorkerPool(max_workers=_WORKERS, name="fs-worker")


async def in_thread(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run blocking ``func`` in the fs pool; OSError becomes the reference's RpcError."""
    loop = asyncio.get_running_loop()
    if kwargs:
        func, args = functools.partial(func, **kwargs), ()
    try:
        return await _POOL.submit(loop, func, args)
    except OSError as exc:
        raise fs_error(exc) from None


async def in_thread_to_completion(
    func: Callable[..., T],
    /,
    *args: Any,
    on_abandon: Callable[[T], None] | None = None,
) -> T:
    """Like ``in_thread``, but a cancelled caller still waits for the worker.

    For operations on handle fds: the caller releases (and maybe closes) the
    fd as soon as it returns, so it must not return while a worker still uses
    the fd. ``on_abandon`` receives the result the cancelled caller drops
    (e.g. to close a freshly opened fd).
    """
    future = _POOL.submit(asyncio.get_running_loop(), func, args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        try:
            result = await future
        except BaseException:
            raise asyncio.CancelledError from None
        if on_abandon is not None:
            on_abandon(result)
        raise
    except OSError as exc:
        raise fs_error(exc) from None


def sandboxed_fs(ctx: RequestContext) -> SandboxedFs:
    """The server's client of the sandboxed helpers, with the backend probed at
    start-up and the configured helper mode; made on the first sandboxed call,
    closed (with its helpers) at shutdown as server-wide service state."""
    server = ctx.server
    return server.state.get(
        SandboxedFs,
        lambda: SandboxedFs.of(
            server.resources.get(SandboxBackend),
            server.config.sandbox,
            server.resources.get(ProcessCgroups),
            server.config.child_nice,
        ),
    )


def needs_sandbox(sandbox: FileSystemSandboxContext | None, *, write: bool) -> bool:
    """Whether this access must run in the sandbox helper.

    The reference resolves the policy before routing, so a cwd-dependent
    policy without a cwd is refused even when the access itself is unrestricted.
    """
    if sandbox is None:
        return False
    if sandbox.policy_cwd() is None and has_dynamic_entries(sandbox):
        raise RpcError.invalid_params(DYNAMIC_CWD_MESSAGE)
    return needs_sandboxed_fs(sandbox, write=write)


async def run_sandboxed(
    sandbox: FileSystemSandboxContext,
    op: FsOperation,
    args: dict[str, Any],
    fs: SandboxedFs,
    caller: Hashable = None,
) -> Any:
    """``op`` in a helper inside ``sandbox`` (the caller checked ``needs_sandbox``);
    ``caller``: whose turn it waits for when the daemon's fs gate is full (``caller_of``)."""
    return op.finish(await fs.call(sandbox, op.name, args, module=op.program, caller=caller))


def caller_of(ctx: RequestContext) -> Hashable:
    """Whose turn a request's sandboxed fs call waits for: its session's."""
    session = ctx.peer.session
    return None if session is None else session.id


class Who(TypedDict, total=False):
    tenant: TenantProfile | None
    glob_scan_limit: int
    caller: Hashable


def who_asks(ctx: RequestContext) -> Who:
    """``run_fs_op``'s arguments naming who asks: the session whose turn a sandboxed
    call waits for, and with --tenants the request's principal (its fs calls run with
    its identity, within its roots)."""
    tenant = tenant_of(ctx)
    if tenant is None:
        return {"caller": caller_of(ctx)}
    limit = ctx.server.config.sandbox.glob_scan_limit
    return {"tenant": tenant, "glob_scan_limit": limit, "caller": caller_of(ctx)}


async def run_as_tenant(
    tenant: TenantProfile,
    sandbox: FileSystemSandboxContext | None,
    paths: list[FsPath],
    func: Callable[..., T],
    /,
    *args: Any,
    glob_scan_limit: int,
    **kwargs: Any,
) -> T:
    """A tenant's fs call: ``paths`` checked against its ceiling and the request's
    sandbox, then ``func`` run in the fs pool with the tenant's file-system identity
    (execserver/tenancy/fs_access.py) — never in a helper running as the daemon."""
    # One partial: in_thread takes either positional or keyword arguments, not both.
    call = functools.partial(
        as_tenant, tenant, sandbox, paths, func, *args, glob_scan_limit=glob_scan_limit, **kwargs
    )
    return await in_thread(call)


async def run_fs_op(
    sandbox: FileSystemSandboxContext | None,
    op: FsOperation,
    args: dict[str, Any],
    *,
    write: bool,
    fs: Callable[[], SandboxedFs],
    cheap: bool = False,
    tenant: TenantProfile | None = None,
    paths: list[FsPath] | None = None,
    glob_scan_limit: int = 0,
    caller: Hashable = None,
) -> Any:
    """Run ``op`` under ``sandbox`` if it restricts this kind of access (in a
    helper from ``fs()``), else in the thread pool — or inline for a ``cheap``
    metadata call when no mounted file system can block (local_mounts). ``fs``
    is called only when a helper is needed (the server makes its client lazily).
    With a ``tenant``: as ``run_as_tenant`` on ``paths`` (default: ``args["path"]``).
    ``caller``: as ``run_sandboxed``'s."""
    if tenant is not None:
        reached = paths if paths is not None else [(args["path"], write)]
        return await run_as_tenant(
            tenant, sandbox, reached, op.local, glob_scan_limit=glob_scan_limit, **args
        )
    if needs_sandbox(sandbox, write=write):
        assert sandbox is not None
        return await run_sandboxed(sandbox, op, args, fs(), caller)
    if cheap:
        answer = run_cheap_fs_op_at_once(sandbox, op.local, args)
        if answer is not MUST_WAIT:
            return answer
    return await in_thread(op.local, **args)


def run_cheap_fs_op_at_once(
    sandbox: FileSystemSandboxContext | None, func: Callable[..., Any], args: dict[str, Any]
) -> Any:
    """A cheap read-only metadata call (a stat) run inline on the event loop, or
    MUST_WAIT when it needs the sandbox helper or a mounted file system could block
    (local_mounts): those go to ``run_fs_op``."""
    if needs_sandbox(sandbox, write=False) or not LOCAL_MOUNTS.all_local():
        return MUST_WAIT
    try:
        return func(**args)
    except OSError as exc:
        raise fs_error(exc) from None
