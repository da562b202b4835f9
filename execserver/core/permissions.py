"""Permission profiles as the core reasons about them, and their wire form.

The model keeps native absolute paths and a three-valued access; the wire
form (``execserver.wire.sandbox``) keeps ``file:`` URIs and accepts the legacy
``none`` access, which is read here as ``deny``. Additional permissions widen a
profile for one call; deny entries of the base profile always survive.
"""

from __future__ import annotations

import enum
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgspec

from execserver.wire import sandbox as wire
from execserver.wire.uri import path_to_uri, uri_to_path

__all__ = [
    "AdditionalPermissions",
    "DisabledProfile",
    "ExplicitPath",
    "ExternalProfile",
    "FsAccess",
    "FsEntry",
    "GlobPattern",
    "ManagedProfile",
    "NetworkAccess",
    "PermissionProfile",
    "RestrictedFs",
    "SpecialPath",
    "UnrestrictedFs",
    "effective_profile",
    "has_deny_read",
    "is_preapproved",
    "is_restricted_fs",
    "network_enabled",
    "profile_from_json",
    "profile_from_wire",
    "profile_to_json",
    "profile_to_wire",
    "read_only_profile",
    "uses_policy_cwd",
    "workspace_write_profile",
]


class FsAccess(enum.Enum):
    READ = "read"
    WRITE = "write"
    DENY = "deny"


class NetworkAccess(enum.Enum):
    RESTRICTED = "restricted"
    ENABLED = "enabled"


@dataclass(frozen=True)
class SpecialPath:
    """A symbolic location the executor resolves (``root``, ``tmpdir``, ...)."""

    kind: str
    subpath: str | None = None
    path: str | None = None  # only for kind "unknown"

    def __post_init__(self) -> None:
        if self.kind not in wire.SPECIAL_PATH_KINDS:
            raise ValueError(f"unknown special path kind {self.kind!r}")


@dataclass(frozen=True)
class ExplicitPath:
    path: str  # native absolute path on the executor

    def __post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise ValueError(f"profile paths must be absolute: {self.path!r}")


@dataclass(frozen=True)
class GlobPattern:
    pattern: str


FsTarget = SpecialPath | ExplicitPath | GlobPattern


@dataclass(frozen=True)
class FsEntry:
    target: FsTarget
    access: FsAccess
    skip_if_missing: bool = False


@dataclass(frozen=True)
class RestrictedFs:
    entries: tuple[FsEntry, ...]
    glob_scan_max_depth: int | None = None


@dataclass(frozen=True)
class UnrestrictedFs:
    pass


FileSystemPolicy = RestrictedFs | UnrestrictedFs


@dataclass(frozen=True)
class ManagedProfile:
    file_system: FileSystemPolicy
    network: NetworkAccess = NetworkAccess.RESTRICTED


@dataclass(frozen=True)
class DisabledProfile:
    """No sandbox at all."""


@dataclass(frozen=True)
class ExternalProfile:
    """Something other than the executor sandboxes the command."""

    network: NetworkAccess = NetworkAccess.RESTRICTED


PermissionProfile = ManagedProfile | DisabledProfile | ExternalProfile


# --------------------------------------------------------------------------- builders
def read_only_profile(*, network: NetworkAccess = NetworkAccess.RESTRICTED) -> ManagedProfile:
    return ManagedProfile(
        RestrictedFs((FsEntry(SpecialPath("root"), FsAccess.READ),)), network=network
    )


def workspace_write_profile(
    *, network: NetworkAccess = NetworkAccess.RESTRICTED, extra: Iterable[FsEntry] = ()
) -> ManagedProfile:
    """Read everything, write the workspace roots (what ``current_working_directory``
    resolves to on the executor)."""
    entries = (
        FsEntry(SpecialPath("root"), FsAccess.READ),
        FsEntry(SpecialPath("current_working_directory"), FsAccess.WRITE),
        *extra,
    )
    return ManagedProfile(RestrictedFs(entries), network=network)


# --------------------------------------------------------------------------- predicates
def is_restricted_fs(profile: PermissionProfile) -> bool:
    return isinstance(profile, ManagedProfile) and isinstance(profile.file_system, RestrictedFs)


def network_enabled(profile: PermissionProfile) -> bool:
    if isinstance(profile, DisabledProfile):
        return True
    return profile.network is NetworkAccess.ENABLED


def has_deny_read(profile: PermissionProfile) -> bool:
    """True when some entry (path or glob) denies access: such a profile must
    never be bypassed."""
    if not isinstance(profile, ManagedProfile) or not isinstance(profile.file_system, RestrictedFs):
        return False
    return any(entry.access is FsAccess.DENY for entry in profile.file_system.entries)


def uses_policy_cwd(profile: PermissionProfile) -> bool:
    """Whether the executor needs the policy cwd to resolve this profile
    (cwd-relative specials or a relative glob)."""
    if not isinstance(profile, ManagedProfile) or not isinstance(profile.file_system, RestrictedFs):
        return False
    for entry in profile.file_system.entries:
        target = entry.target
        if isinstance(target, SpecialPath) and target.kind in (
            "current_working_directory",
            "project_roots",
        ):
            return True
        if isinstance(target, GlobPattern) and not target.pattern.startswith("/"):
            return True
    return False


# --------------------------------------------------------------------------- additional permissions
@dataclass(frozen=True)
class AdditionalPermissions:
    """The tool-level ``additional_permissions`` object."""

    network: bool | None = None
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for path in (*self.read, *self.write):
            if not path.startswith("/"):
                raise ValueError(f"additional permission paths must be absolute: {path!r}")

    @property
    def is_empty(self) -> bool:
        return not self.network and not self.read and not self.write

    @classmethod
    def from_json(
        cls, value: Mapping[str, object], *, cwd: str | None = None
    ) -> AdditionalPermissions:
        """Parse the tool argument. Relative paths resolve against ``cwd`` when
        one is given (the request_permissions tool), else they are an error."""
        network: bool | None = None
        net = value.get("network")
        if isinstance(net, Mapping):
            enabled = net.get("enabled")
            if enabled is not None and not isinstance(enabled, bool):
                raise ValueError("additional_permissions.network.enabled must be a boolean")
            network = enabled
        fs = value.get("file_system")
        read: list[str] = []
        write: list[str] = []
        if isinstance(fs, Mapping):
            for name, out in (("read", read), ("write", write)):
                items = fs.get(name) or []
                if not isinstance(items, list):
                    raise ValueError(f"additional_permissions.file_system.{name} must be a list")
                for item in items:
                    if not isinstance(item, str):
                        raise ValueError("additional permission paths must be strings")
                    if not item.startswith("/") and cwd is not None:
                        item = posixpath.normpath(posixpath.join(cwd, item))
                    out.append(item)
        return cls(network=network, read=tuple(read), write=tuple(write))

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.network is not None:
            out["network"] = {"enabled": self.network}
        if self.read or self.write:
            fs: dict[str, list[str]] = {}
            if self.read:
                fs["read"] = list(self.read)
            if self.write:
                fs["write"] = list(self.write)
            out["file_system"] = fs
        return out


def is_preapproved(
    requested: AdditionalPermissions | None, granted: AdditionalPermissions | None
) -> bool:
    """Whether everything ``requested`` was already granted earlier in the turn or
    session (sticky grants of the request_permissions tool). Such a call
    is judged as if it asked for nothing, yet still runs widened."""
    if requested is None or requested.is_empty:
        return True
    if granted is None:
        return False
    if requested.network and not granted.network:
        return False
    return set(requested.read) <= set(granted.read) | set(granted.write) and set(
        requested.write
    ) <= set(granted.write)


def effective_profile(
    base: PermissionProfile, additional: AdditionalPermissions | None
) -> PermissionProfile:
    """The base profile widened by ``additional``.

    Entries are appended, never replaced: an equally specific deny in the base
    still beats an added write, so deny-read restrictions are preserved.
    """
    if additional is None or additional.is_empty:
        return base
    if isinstance(base, DisabledProfile):
        return base
    network = NetworkAccess.ENABLED if additional.network else base.network
    if isinstance(base, ExternalProfile):
        return ExternalProfile(network=network)
    fs = base.file_system
    if isinstance(fs, RestrictedFs):
        added = tuple(FsEntry(ExplicitPath(p), FsAccess.READ) for p in additional.read) + tuple(
            FsEntry(ExplicitPath(p), FsAccess.WRITE) for p in additional.write
        )
        fs = RestrictedFs(fs.entries + added, fs.glob_scan_max_depth)
    return ManagedProfile(fs, network=network)


# --------------------------------------------------------------------------- wire <-> model
def _special_to_wire(path: SpecialPath) -> wire.SpecialPath:
    simple: dict[str, wire.SpecialPath] = {
        "root": wire.RootSpecial(),
        "minimal": wire.MinimalSpecial(),
        "current_working_directory": wire.CwdSpecial(),
        "tmpdir": wire.TmpdirSpecial(),
        "slash_tmp": wire.SlashTmpSpecial(),
    }
    if path.kind == "project_roots":
        return wire.ProjectRootsSpecial(subpath=path.subpath)
    if path.kind == "unknown":
        return wire.UnknownSpecial(path=path.path or "", subpath=path.subpath)
    return simple[path.kind]


def _special_from_wire(value: wire.SpecialPath) -> SpecialPath:
    if isinstance(value, wire.ProjectRootsSpecial):
        return SpecialPath("project_roots", subpath=value.subpath)
    if isinstance(value, wire.UnknownSpecial):
        return SpecialPath("unknown", subpath=value.subpath, path=value.path)
    kind = msgspec.inspect.type_info(type(value))
    assert isinstance(kind, msgspec.inspect.StructType)
    assert isinstance(kind.tag, str)
    return SpecialPath(kind.tag)


def _target_to_wire(target: FsTarget) -> wire.FsPath:
    if isinstance(target, SpecialPath):
        return wire.SpecialFsPath(value=_special_to_wire(target))
    if isinstance(target, ExplicitPath):
        return wire.PathPath(path=path_to_uri(target.path))
    return wire.GlobPatternPath(pattern=target.pattern)


def _target_from_wire(value: wire.FsPath) -> FsTarget:
    if isinstance(value, wire.SpecialFsPath):
        return _special_from_wire(value.value)
    if isinstance(value, wire.PathPath):
        return ExplicitPath(uri_to_path(value.path))
    return GlobPattern(value.pattern)


def profile_to_wire(profile: PermissionProfile) -> wire.ExecPermissionProfile:
    if isinstance(profile, DisabledProfile):
        return wire.DisabledPermissions()
    if isinstance(profile, ExternalProfile):
        return wire.ExternalPermissions(network=profile.network.value)
    fs: wire.ManagedFileSystemPermissions
    if isinstance(profile.file_system, UnrestrictedFs):
        fs = wire.UnrestrictedFileSystem()
    else:
        fs = wire.RestrictedFileSystem(
            entries=[
                wire.ExecFileSystemSandboxEntry(
                    path=_target_to_wire(e.target),
                    access=e.access.value,
                    missing_path_behavior="skip" if e.skip_if_missing else None,
                )
                for e in profile.file_system.entries
            ],
            glob_scan_max_depth=profile.file_system.glob_scan_max_depth,
        )
    return wire.ManagedPermissions(file_system=fs, network=profile.network.value)


def profile_from_wire(value: wire.ExecPermissionProfile) -> PermissionProfile:
    if isinstance(value, wire.DisabledPermissions):
        return DisabledProfile()
    if isinstance(value, wire.ExternalPermissions):
        return ExternalProfile(NetworkAccess(value.network))
    fs_wire = value.file_system
    fs: FileSystemPolicy
    if isinstance(fs_wire, wire.UnrestrictedFileSystem):
        fs = UnrestrictedFs()
    else:
        fs = RestrictedFs(
            tuple(
                FsEntry(
                    _target_from_wire(e.path),
                    # "none" is the legacy spelling of "deny".
                    FsAccess.DENY if e.access == "none" else FsAccess(e.access),
                    skip_if_missing=e.missing_path_behavior == "skip",
                )
                for e in fs_wire.entries
            ),
            fs_wire.glob_scan_max_depth,
        )
    return ManagedProfile(fs, NetworkAccess(value.network))


def profile_to_json(profile: PermissionProfile) -> object:
    """The profile as plain JSON values (what goes in ``permissions``)."""
    return msgspec.to_builtins(profile_to_wire(profile))


def profile_from_json(value: object) -> PermissionProfile:
    """Parse a profile from plain JSON values with the executor's own decoder, so
    a profile the executor would refuse is refused here with the same words."""
    context = wire.decode_sandbox_context({"permissions": value, "windowsSandboxLevel": "disabled"})
    return profile_from_wire(context.permissions)
