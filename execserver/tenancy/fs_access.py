"""What an fs/* call of a tenant may reach, checked in the worker thread that then
performs it with the tenant's file-system identity (``fsident.as_account``).

Two bounds, both on canonical paths (symlinks resolved, so a planted link cannot
lead out): the tenant's ceiling (``ceiling.check_fs_path``: its writable roots for
changes, its readable roots for reads when the profile names them), and, when the
request carries a sandbox, that sandbox's own policy (within the ceiling when the
profile requires a sandbox). The kernel then checks the operation itself against
the tenant's uid, which also covers a path swapped between the check and the call.
A tenant's fs calls never run in the daemon's sandboxed helpers: those run as the
daemon's uid, whose permissions are not the tenant's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from execserver.sandbox.policy import resolve_policy
from execserver.tenancy.ceiling import (
    canonical_target,
    check_fs_path,
    check_policy,
    denied_by_policy,
    inside,
    policy_allows,
    refused,
)
from execserver.tenancy.fsident import as_account
from execserver.tenancy.profile import TenantProfile
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["FsPath", "admit_fs", "as_tenant", "confine_watch"]

T = TypeVar("T")
# A path the call reaches and whether it changes it.
FsPath = tuple[str, bool]


def admit_fs(
    profile: TenantProfile,
    sandbox: FileSystemSandboxContext | None,
    paths: Sequence[FsPath],
    *,
    glob_scan_limit: int,
) -> None:
    targets = [(check_fs_path(profile, path, write=write), write) for path, write in paths]
    if sandbox is None:
        return
    # fs/* has no process cwd: a cwd-dependent policy without one is the reference's
    # -32602, raised by resolve_policy as for any sandboxed fs call.
    policy = resolve_policy(sandbox, fallback_cwd=None, glob_scan_limit=glob_scan_limit)
    if profile.sandbox == "required":
        check_policy(profile, policy, managed_network=False)
    for target, write in targets:
        if not policy_allows(policy, target, write=write):
            raise denied_by_policy()


def as_tenant(
    profile: TenantProfile,
    sandbox: FileSystemSandboxContext | None,
    paths: Sequence[FsPath],
    func: Callable[..., T],
    /,
    *args: Any,
    glob_scan_limit: int,
    **kwargs: Any,
) -> T:
    """Check ``paths`` (see the module's doc), then ``func(*args, **kwargs)``, both with
    the tenant's file-system identity: even resolving a path's symlinks must not walk
    (and, in an error's text, tell) what the tenant's account cannot read. Blocking:
    run it in a worker thread."""

    def checked() -> T:
        admit_fs(profile, sandbox, paths, glob_scan_limit=glob_scan_limit)
        return func(*args, **kwargs)

    return as_account(profile.credentials, checked)


def confine_watch(profile: TenantProfile, path: str, roots: Sequence[str]) -> None:
    """fs/watchMissing of a tenant: the watch runs as the daemon (inotify), so what
    it may watch is confined to ``roots`` (its readable roots, else its writable
    ones), the path resolved with the tenant's identity. Blocking."""

    def check() -> None:
        target = canonical_target(path)
        if not inside(target, roots):
            raise refused(profile, f"path {target} is outside the roots the tenant may watch")

    as_account(profile.credentials, check)
