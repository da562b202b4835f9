"""A request against its tenant's ceiling.

Checked on the *resolved* policy (``sandbox.policy.resolve_policy``: globs expanded,
special paths and symlinks resolved to canonical host paths), so what is compared is
what the sandbox would enforce, not how the request spelled it. A request that
exceeds the ceiling is refused, never narrowed: the error names the ceiling so the
client (or its operator) sees which line of the profile said no.

The same file answers fs/*'s question for one path (``check_fs_path``): inside the
roots the tenant may read or write, after resolving symlinks.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from execserver.kernel.limits import PolicyRefusal
from execserver.sandbox.policy import PROTECTED_NAMES, ResolvedPolicy
from execserver.tenancy.profile import NETWORK_LEVELS, NetworkCeiling, TenantProfile
from execserver.wire.errors import PARSE_OR_INVALID_REQUEST, RpcError, rpc_error_from_os_error
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = [
    "canonical_target",
    "check_fs_path",
    "check_launch",
    "check_policy",
    "denied_by_policy",
    "inside",
    "network_level",
    "policy_allows",
    "refused",
]

_MINIMAL: tuple[str, ...] = ("/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr")


def inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def refused(profile: TenantProfile, what: str) -> PolicyRefusal:
    return PolicyRefusal(PARSE_OR_INVALID_REQUEST, profile.name, what)


def network_level(policy: ResolvedPolicy, *, managed_network: bool) -> NetworkCeiling:
    """How much network a resolved policy gives: ``enabled`` is the host's network
    (full) whatever else the request says; restricted with the managed proxy is
    managed; restricted alone is none."""
    if not policy.network_restricted:
        return "full"
    return "managed" if managed_network else "none"


def check_launch(
    profile: TenantProfile,
    sandbox: FileSystemSandboxContext | None,
    policy: ResolvedPolicy | None,
    *,
    managed_network: bool,
) -> None:
    """Refuse a process/start that its tenant's profile does not allow."""
    if profile.sandbox == "optional":
        # Unsandboxed is allowed, and is wider than any sandbox: nothing to compare.
        return
    if sandbox is None or policy is None:
        raise refused(profile, "sandbox required by its profile")
    check_policy(profile, policy, managed_network=managed_network)


def check_policy(profile: TenantProfile, policy: ResolvedPolicy, *, managed_network: bool) -> None:
    """Refuse a resolved policy wider than the ceiling, naming the first excess."""
    if policy.kind != "managed":
        raise refused(
            profile,
            f"permissions `{policy.kind}` exceed its ceiling (sandbox required by its profile)",
        )
    if policy.root_access == "write":
        raise refused(profile, "writable root / is outside the tenant's ceiling")
    for root in policy.writable:
        if not inside(root, profile.writable_roots):
            raise refused(profile, f"writable root {root} is outside the tenant's ceiling")
    readable = profile.may_read_roots()
    if readable is not None:
        if policy.root_access == "read":
            raise refused(profile, "readable root / is outside the tenant's ceiling")
        for root in policy.readable:
            # `:minimal` (the system directories a program needs) is always allowed.
            if not inside(root, readable) and not inside(root, _MINIMAL):
                raise refused(profile, f"readable root {root} is outside the tenant's ceiling")
    level = network_level(policy, managed_network=managed_network)
    if NETWORK_LEVELS.index(level) > NETWORK_LEVELS.index(profile.network):
        raise refused(
            profile, f"network {level} is outside the tenant's ceiling (network {profile.network})"
        )


def canonical_target(path: str) -> str:
    """The canonical path an fs call on ``path`` reaches: symlinks resolved, a missing
    last component appended to its canonical parent (a file about to be created)."""
    path = os.path.abspath(path)
    if os.path.lexists(path):
        return os.path.realpath(path)
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name)


def check_fs_path(profile: TenantProfile, path: str, *, write: bool) -> str:
    """Refuse an fs/* ``path`` outside the tenant's roots; returns its canonical form."""
    target = canonical_target(path)
    if write:
        if not inside(target, profile.writable_roots):
            raise refused(profile, f"path {target} is outside the tenant's writable roots")
        return target
    readable = profile.may_read_roots()
    if readable is not None and not inside(target, readable):
        raise refused(profile, f"path {target} is outside the tenant's readable roots")
    return target


def policy_allows(policy: ResolvedPolicy, target: str, *, write: bool) -> bool:
    """Whether a request's own (narrower) policy lets an fs call reach ``target``
    (canonical): the innermost rule decides; protected names stay read-only."""
    if policy.kind != "managed":
        return True
    best: str | None = None
    access: str | None = None
    for rule in policy.rules:
        if inside(target, [rule.path]) and (best is None or len(rule.path) > len(best)):
            best, access = rule.path, rule.access
    if access == "deny":
        return False
    if write:
        if access == "write":
            assert best is not None
            rest = os.path.relpath(target, best).split(os.sep)
            return not any(part in PROTECTED_NAMES for part in rest)
        if access == "read":
            return False
        return policy.root_access == "write"
    if access is not None:
        return True
    return policy.root_access is not None or (policy.minimal_read and inside(target, _MINIMAL))


def denied_by_policy() -> RpcError:
    """What a sandboxed fs call outside its own policy gets: the kernel's refusal."""
    return rpc_error_from_os_error(PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
