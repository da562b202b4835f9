"""Does a patch need a prompt? (The exact 0.169.0 rules are not verified against
the reference binary.)

A patch whose every write falls inside what the effective profile lets the
sandbox write is auto-approved (it runs sandboxed); otherwise it asks, and
where asking is impossible it is rejected.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from execserver.core.permissions import (
    DisabledProfile,
    ExplicitPath,
    ExternalProfile,
    FsAccess,
    ManagedProfile,
    PermissionProfile,
    RestrictedFs,
    SpecialPath,
)
from execserver.core.policy import (
    ApprovalMode,
    AskForApproval,
    ExecApprovalRequirement,
    Forbidden,
    NeedsApproval,
    Skip,
)

__all__ = ["patch_approval_requirement", "writable_roots"]

OUTSIDE_WRITABLE_ROOTS = "writing outside of the project; rejected by user approval settings"


def writable_roots(profile: ManagedProfile, workspace_roots: Iterable[str]) -> list[str] | None:
    """Absolute roots the profile lets the sandbox write; None means everywhere."""
    fs = profile.file_system
    if not isinstance(fs, RestrictedFs):
        return None
    roots: list[str] = []
    for entry in fs.entries:
        if entry.access is not FsAccess.WRITE:
            continue
        target = entry.target
        if isinstance(target, ExplicitPath):
            roots.append(target.path)
        elif isinstance(target, SpecialPath):
            if target.kind == "root":
                return None
            if target.kind in ("current_working_directory", "project_roots"):
                roots.extend(workspace_roots)
            elif target.kind in ("tmpdir", "slash_tmp"):
                roots.append("/tmp")
    return roots


def _denied(profile: ManagedProfile, path: str) -> bool:
    fs = profile.file_system
    if not isinstance(fs, RestrictedFs):
        return False
    return any(
        e.access is FsAccess.DENY
        and isinstance(e.target, ExplicitPath)
        and _inside(path, e.target.path)
        for e in fs.entries
    )


def _inside(path: str, root: str) -> bool:
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _writes_allowed(
    profile: PermissionProfile, paths: Iterable[str], workspace_roots: Iterable[str]
) -> bool:
    if isinstance(profile, DisabledProfile | ExternalProfile):
        return True
    roots = writable_roots(profile, workspace_roots)
    return all(
        not _denied(profile, p) and (roots is None or any(_inside(p, r) for r in roots))
        for p in paths
    )


def patch_approval_requirement(
    policy: AskForApproval,
    profile: PermissionProfile,
    paths: Iterable[str],
    workspace_roots: Iterable[str],
) -> ExecApprovalRequirement:
    if policy.mode is ApprovalMode.UNLESS_TRUSTED:
        return NeedsApproval()
    if _writes_allowed(profile, list(paths), list(workspace_roots)):
        return Skip()
    if policy.mode is ApprovalMode.NEVER or (
        policy.config is not None and not policy.config.sandbox_approval
    ):
        return Forbidden(OUTSIDE_WRITABLE_ROOTS)
    return NeedsApproval()
