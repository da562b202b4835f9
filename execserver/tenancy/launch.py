"""What process/start does for a tenant before planning: the ceiling check on the
resolved policy, the account's access to the cwd, the process quota, and the
environment it is given (its account's identity, then the forced entries).

Runs in a worker thread (``admit_launch``): resolving a policy walks the file
system, and the cwd check is made with the tenant's file-system identity.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from execserver.sandbox.policy import resolve_policy
from execserver.tenancy.ceiling import check_launch, refused
from execserver.tenancy.directory import TenantDirectory
from execserver.tenancy.fsident import as_account
from execserver.tenancy.profile import TenantProfile
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["admit_launch", "check_process_quota", "tenant_environment"]


def admit_launch(
    profile: TenantProfile,
    sandbox: FileSystemSandboxContext | None,
    cwd: str,
    *,
    managed_network: bool,
    glob_scan_limit: int,
) -> None:
    """Raise the RpcError that refuses this start, or return: it may be planned."""
    policy = None
    if sandbox is not None:
        policy = resolve_policy(sandbox, fallback_cwd=cwd, glob_scan_limit=glob_scan_limit)
    check_launch(profile, sandbox, policy, managed_network=managed_network)
    # The child changes into its cwd before it drops to the tenant's uid (subprocess
    # does chdir first), so the tenant's own right to enter it is checked here.
    if not as_account(profile.credentials, os.access, cwd, os.X_OK, effective_ids=True):
        raise refused(profile, f"cwd {cwd} is not accessible to user {profile.credentials.user}")


def check_process_quota(directory: TenantDirectory, profile: TenantProfile) -> None:
    limit = profile.max_processes
    if limit is not None and directory.live_processes[profile.name] >= limit:
        raise refused(profile, f"max_processes {limit} reached")


def tenant_environment(profile: TenantProfile, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the account's identity (the daemon's HOME or USER must not leak
    into a tenant's process), then the profile's forced entries over everything."""
    account = profile.credentials
    merged = dict(env)
    merged.update(HOME=account.home, USER=account.user, LOGNAME=account.user)
    merged.update(profile.env)
    return merged
