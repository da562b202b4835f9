"""The ``sandbox`` parameter: ``FileSystemSandboxContext`` and
``ManagedNetworkSandboxContext``.

Casing is mixed on the wire: the context's own members are camelCase, everything
inside ``permissions`` is snake_case, tags are ``type``/``kind`` and
``windowsSandboxLevel`` values are kebab-case. The Structs below spell that out so
the client side can encode a context with ``msgspec.json.encode``.

Decoding goes through :func:`decode_sandbox_context` rather than msgspec: the
reference decodes with serde and clients see serde's words (``unknown variant
`x`, expected one of ...``), including its first-error-wins order (map keys in
input order, then missing fields in declaration order). A small hand-written
walker reproduces that; it was checked message by message against the 0.169.0
binary.

One serde detail matters for the wording: the reference parses params into a
``serde_json::Value`` with arbitrary precision numbers, so a number met directly
there reads ``number``; values below an internally tagged enum are first buffered
into serde's ``Content``, where they read ``integer `3``` / ``floating point `1.5```.
``_Level.RAW`` / ``_Level.CONTENT`` carry that distinction.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Final, Literal, TypeVar, cast, get_args

import msgspec

from execserver.wire.base import absent_raw
from execserver.wire.errors import RpcError
from execserver.wire.json_value import decode_json_value
from execserver.wire.process import ManagedNetworkSandboxContext
from execserver.wire.rust import serde
from execserver.wire.uri import uri_to_path

__all__ = [
    "SPECIAL_PATH_KINDS",
    "DisabledPermissions",
    "ExecFileSystemSandboxEntry",
    "ExecPermissionProfile",
    "ExternalPermissions",
    "FileSystemSandboxContext",
    "FsPath",
    "GlobPatternPath",
    "ManagedFileSystemPermissions",
    "ManagedNetworkSandboxContext",
    "ManagedPermissions",
    "PathPath",
    "RestrictedFileSystem",
    "SpecialFsPath",
    "SpecialPath",
    "UnrestrictedFileSystem",
    "WireFileSystemPolicyContext",
    "decode_sandbox_context",
    "decode_sandbox_param",
]

Access = Literal["read", "write", "deny", "none"]
NetworkAccess = Literal["restricted", "enabled"]
WindowsSandboxLevel = Literal["disabled", "restricted-token", "elevated", "mxc"]
ProxySettingsMode = Literal["reconcile", "preserve"]
SandboxOverride = Literal[
    "noOverride", "escalatedSandboxWithRestrictions", "bypassSandboxFirstAttempt"
]
MissingPathBehavior = Literal["skip"]


# --------------------------------------------------------------------------- structs
class _Snake(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """Inside ``permissions`` the reference uses snake_case keys."""


class RootSpecial(_Snake, tag_field="kind", tag="root"):
    pass


class MinimalSpecial(_Snake, tag_field="kind", tag="minimal"):
    pass


class CwdSpecial(_Snake, tag_field="kind", tag="current_working_directory"):
    pass


class ProjectRootsSpecial(_Snake, tag_field="kind", tag="project_roots"):
    subpath: str | None = None


class TmpdirSpecial(_Snake, tag_field="kind", tag="tmpdir"):
    pass


class SlashTmpSpecial(_Snake, tag_field="kind", tag="slash_tmp"):
    pass


class UnknownSpecial(_Snake, tag_field="kind", tag="unknown"):
    path: str
    subpath: str | None = None


SpecialPath = (
    RootSpecial
    | MinimalSpecial
    | CwdSpecial
    | ProjectRootsSpecial
    | TmpdirSpecial
    | SlashTmpSpecial
    | UnknownSpecial
)
# The ``kind`` tags of SpecialPath in declaration order (serde lists the
# variants in this order in its unknown-variant error). core's permission
# profiles validate their special paths against the same tuple.
SPECIAL_PATH_KINDS: Final[tuple[str, ...]] = tuple(
    str(variant.__struct_config__.tag) for variant in get_args(SpecialPath)
)


class PathPath(_Snake, tag_field="type", tag="path"):
    path: str  # PathUri


class GlobPatternPath(_Snake, tag_field="type", tag="glob_pattern"):
    pattern: str


class SpecialFsPath(_Snake, tag_field="type", tag="special"):
    value: SpecialPath


FsPath = PathPath | GlobPatternPath | SpecialFsPath


class ExecFileSystemSandboxEntry(_Snake):
    path: FsPath
    access: Access
    missing_path_behavior: MissingPathBehavior | None = None


class RestrictedFileSystem(_Snake, tag_field="type", tag="restricted"):
    entries: list[ExecFileSystemSandboxEntry]
    glob_scan_max_depth: int | None = None


class UnrestrictedFileSystem(_Snake, tag_field="type", tag="unrestricted"):
    pass


ManagedFileSystemPermissions = RestrictedFileSystem | UnrestrictedFileSystem


class ManagedPermissions(_Snake, tag_field="type", tag="managed"):
    file_system: ManagedFileSystemPermissions
    network: NetworkAccess


class DisabledPermissions(_Snake, tag_field="type", tag="disabled"):
    pass


class ExternalPermissions(_Snake, tag_field="type", tag="external"):
    network: NetworkAccess


ExecPermissionProfile = ManagedPermissions | DisabledPermissions | ExternalPermissions


class WireFileSystemPolicyContext(
    msgspec.Struct, rename="camel", forbid_unknown_fields=False, omit_defaults=True
):
    cwd: str | None = None
    workspace_roots: list[str] = msgspec.field(default_factory=list)


class FileSystemSandboxContext(
    msgspec.Struct, rename="camel", forbid_unknown_fields=False, omit_defaults=True
):
    """The ``sandbox`` member of process/start and fs/* (the reference's
    ``WireFileSystemSandboxContext``). Paths stay ``file:`` URIs (validated on decode)."""

    permissions: ExecPermissionProfile
    windows_sandbox_level: WindowsSandboxLevel
    cwd: str | None = None
    workspace_roots: list[str] = msgspec.field(default_factory=list)
    policy_context: WireFileSystemPolicyContext | None = None
    user_home_dir: str | None = None
    temporary_directories: list[str] | None = None
    windows_sandbox_proxy_settings_mode: ProxySettingsMode | None = None
    use_legacy_landlock: bool = False
    sandbox_override: SandboxOverride = "noOverride"

    def policy_cwd(self) -> str | None:
        """The policy directory URI: ``policyContext.cwd`` wins over the flat ``cwd``."""
        if self.policy_context is not None and self.policy_context.cwd is not None:
            return self.policy_context.cwd
        return self.cwd

    def policy_workspace_roots(self) -> list[str]:
        """Workspace root URIs: ``policyContext.workspaceRoots`` wins when present and non-empty."""
        if self.policy_context is not None and self.policy_context.workspace_roots:
            return list(self.policy_context.workspace_roots)
        return list(self.workspace_roots)


WireFileSystemSandboxContext = FileSystemSandboxContext


# --------------------------------------------------------------------------- serde-style decoding
class _Level(enum.Enum):
    RAW = "raw"  # deserialised straight from serde_json::Value (arbitrary precision)
    CONTENT = "content"  # buffered by an internally tagged enum first


_T = TypeVar("_T")
_S = TypeVar("_S", bound=str)

_CONTEXT_NAME: Final = "WireFileSystemSandboxContext"
_CONTEXT_FIELD_COUNT: Final = 10


def _fail(message: str) -> RpcError:
    return RpcError.invalid_params(message)


def _invalid_type(value: object, level: _Level, expected: str) -> RpcError:
    return _fail(serde.invalid_type(value, expected, arbitrary_precision=level is _Level.RAW))


def _unknown_variant(name: str, variants: Sequence[str]) -> RpcError:
    return _fail(serde.unknown_variant(name, variants))


def _string(value: object, level: _Level) -> str:
    if not isinstance(value, str):
        raise _invalid_type(value, level, "a string")
    return value


def _bool(value: object, level: _Level) -> bool:
    if not isinstance(value, bool):
        raise _invalid_type(value, level, "a boolean")
    return value


def _uri(value: object, level: _Level) -> str:
    text = _string(value, level)
    uri_to_path(text)  # raises the reference's -32602 URI texts
    return text


def _optional(value: object, decode: Callable[[object, _Level], _T], level: _Level) -> _T | None:
    return None if value is None else decode(value, level)


def _sequence(value: object, level: _Level, item: Callable[[object, _Level], _T]) -> list[_T]:
    if not isinstance(value, list):
        raise _invalid_type(value, level, "a sequence")
    return [item(v, level) for v in value]


def _unit_variant(value: object, level: _Level, variants: tuple[_S, ...]) -> _S:
    return serde.unit_variant(value, variants, arbitrary_precision=level is _Level.RAW)


def _struct_map(value: object, level: _Level, name: str, field_count: int) -> dict[str, object]:
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and not value:
        raise _fail(serde.invalid_length(0, f"struct {name} with {field_count} elements"))
    raise _invalid_type(value, level, f"struct {name}")


def _missing(fields: dict[str, object], required: Sequence[str]) -> None:
    for key in required:
        if key not in fields:
            raise _fail(serde.missing_field(key))


def _not_a_tagged_map(value: object, name: str, tag: str) -> RpcError:
    """What serde answers when an internally tagged enum's value is not a map. It
    buffers the whole value into its Content before looking for the tag, so a
    number reads in Content's words (``integer `5```), one past 64 bits as a
    128-bit integer, and one that fits no 128-bit integer or f64 (``wire/
    json_value.py`` turns one past f64's range into such an integer) comes as
    serde_json's arbitrary-precision token: a one-entry map without the tag."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**127) <= value <= 2**128 - 1:
            return _fail(serde.missing_field(tag))
        if value > 2**64 - 1 or value < -(2**63):
            width = "u128" if value > 0 else "i128"
            return _fail(
                f"invalid type: integer `{value}` as {width}, "
                f"expected internally tagged enum {name}"
            )
    return _invalid_type(value, _Level.CONTENT, f"internally tagged enum {name}")


def _tagged(
    value: object,
    level: _Level,
    name: str,
    tag: str,
    variants: tuple[str, ...],
) -> tuple[str, dict[str, object]]:
    """serde's internally tagged enum: find the tag (read at ``level``), buffer the rest."""
    if isinstance(value, list) and not value:
        raise _fail(serde.missing_field(tag))
    if not isinstance(value, dict):
        raise _not_a_tagged_map(value, name, tag)
    if tag not in value:
        raise _fail(serde.missing_field(tag))
    variant = value[tag]
    if not isinstance(variant, str):
        raise _invalid_type(variant, level, "variant identifier")
    if variant not in variants:
        raise _unknown_variant(variant, variants)
    return variant, value


_C = _Level.CONTENT


def _special_path(value: object) -> SpecialPath:
    kind, fields = _tagged(value, _C, "FileSystemSpecialPath", "kind", SPECIAL_PATH_KINDS)
    if kind == "project_roots":
        subpath = _optional(fields.get("subpath"), _string, _C)
        return ProjectRootsSpecial(subpath=subpath)
    if kind == "unknown":
        path: str | None = None
        sub: str | None = None
        for key, item in fields.items():
            if key == "path":
                path = _string(item, _C)
            elif key == "subpath":
                sub = _optional(item, _string, _C)
        _missing(fields, ("path",))
        assert path is not None
        return UnknownSpecial(path=path, subpath=sub)
    simple: dict[str, SpecialPath] = {
        "root": RootSpecial(),
        "minimal": MinimalSpecial(),
        "current_working_directory": CwdSpecial(),
        "tmpdir": TmpdirSpecial(),
        "slash_tmp": SlashTmpSpecial(),
    }
    return simple[kind]


def _fs_path(value: object) -> FsPath:
    kind, fields = _tagged(
        value, _C, "ExecFileSystemPath", "type", ("path", "glob_pattern", "special")
    )
    member = {"path": "path", "glob_pattern": "pattern", "special": "value"}[kind]
    for key, item in fields.items():
        if key == member:
            if kind == "special":
                return SpecialFsPath(value=_special_path(item))
            if kind == "path":
                return PathPath(path=_uri(item, _C))
            return GlobPatternPath(pattern=_string(item, _C))
    raise _fail(serde.missing_field(member))


def _entry(value: object, level: _Level) -> ExecFileSystemSandboxEntry:
    fields = _struct_map(value, level, "ExecFileSystemSandboxEntry", 3)
    path: FsPath | None = None
    access: Access | None = None
    missing: MissingPathBehavior | None = None
    for key, item in fields.items():
        if key == "path":
            path = _fs_path(item)
        elif key == "access":
            access = cast(Access, _unit_variant(item, level, get_args(Access)))
        elif key == "missing_path_behavior":
            missing = _optional(item, lambda v, lv: _unit_variant(v, lv, ("skip",)), level)
    _missing(fields, ("path", "access"))
    assert path is not None and access is not None
    return ExecFileSystemSandboxEntry(path=path, access=access, missing_path_behavior=missing)


def _nonzero_usize(value: object, level: _Level) -> int:
    expected = "a nonzero usize"
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid_type(value, level, expected)
    if value <= 0 or value >= 2**64:
        raise _fail(serde.invalid_value(value, expected, arbitrary_precision=False))
    return value


def _file_system(value: object) -> ManagedFileSystemPermissions:
    kind, fields = _tagged(
        value, _C, "ExecManagedFileSystemPermissions", "type", ("restricted", "unrestricted")
    )
    if kind == "unrestricted":
        return UnrestrictedFileSystem()
    entries: list[ExecFileSystemSandboxEntry] = []
    depth: int | None = None
    for key, item in fields.items():
        if key == "entries":
            entries = _sequence(item, _C, _entry)
        elif key == "glob_scan_max_depth":
            depth = _optional(item, _nonzero_usize, _C)
    _missing(fields, ("entries",))
    return RestrictedFileSystem(entries=entries, glob_scan_max_depth=depth)


def _permissions(value: object) -> ExecPermissionProfile:
    # The tag is read straight from the Value (RAW wording); the rest is buffered (CONTENT).
    kind, fields = _tagged(
        value, _Level.RAW, "ExecPermissionProfile", "type", ("managed", "disabled", "external")
    )
    if kind == "disabled":
        return DisabledPermissions()
    network: NetworkAccess | None = None
    file_system: ManagedFileSystemPermissions | None = None
    for key, item in fields.items():
        if key == "network":
            network = cast(NetworkAccess, _unit_variant(item, _C, get_args(NetworkAccess)))
        elif key == "file_system" and kind == "managed":
            file_system = _file_system(item)
    if kind == "external":
        _missing(fields, ("network",))
        assert network is not None
        return ExternalPermissions(network=network)
    _missing(fields, ("file_system", "network"))
    assert network is not None and file_system is not None
    return ManagedPermissions(file_system=file_system, network=network)


def _policy_context(value: object, level: _Level) -> WireFileSystemPolicyContext:
    fields = _struct_map(value, level, "WireFileSystemPolicyContext", 2)
    result = WireFileSystemPolicyContext()
    for key, item in fields.items():
        if key == "cwd":
            result.cwd = _optional(item, _uri, level)
        elif key == "workspaceRoots":
            result.workspace_roots = _sequence(item, level, _uri)
    return result


def decode_sandbox_context(value: object) -> FileSystemSandboxContext:
    """Decode an already-parsed JSON value; raises ``RpcError(-32602, <serde text>)``."""
    raw = _Level.RAW
    fields = _struct_map(value, raw, _CONTEXT_NAME, _CONTEXT_FIELD_COUNT)
    permissions: ExecPermissionProfile | None = None
    level: WindowsSandboxLevel | None = None
    ctx_kwargs: dict[str, object] = {}
    for key, item in fields.items():
        if key == "permissions":
            permissions = _permissions(item)
        elif key == "windowsSandboxLevel":
            level = cast(
                WindowsSandboxLevel, _unit_variant(item, raw, get_args(WindowsSandboxLevel))
            )
        elif key == "cwd":
            ctx_kwargs["cwd"] = _optional(item, _uri, raw)
        elif key == "workspaceRoots":
            ctx_kwargs["workspace_roots"] = _sequence(item, raw, _uri)
        elif key == "policyContext":
            ctx_kwargs["policy_context"] = _optional(item, _policy_context, raw)
        elif key == "userHomeDir":
            ctx_kwargs["user_home_dir"] = _optional(item, _uri, raw)
        elif key == "temporaryDirectories":
            ctx_kwargs["temporary_directories"] = _optional(
                item, lambda v, lv: _sequence(v, lv, _uri), raw
            )
        elif key == "windowsSandboxProxySettingsMode":
            ctx_kwargs["windows_sandbox_proxy_settings_mode"] = _optional(
                item, lambda v, lv: _unit_variant(v, lv, ("reconcile", "preserve")), raw
            )
        elif key == "useLegacyLandlock":
            ctx_kwargs["use_legacy_landlock"] = _bool(item, raw)
        elif key == "sandboxOverride":
            ctx_kwargs["sandbox_override"] = _unit_variant(
                item,
                raw,
                ("noOverride", "escalatedSandboxWithRestrictions", "bypassSandboxFirstAttempt"),
            )
    _missing(fields, ("permissions", "windowsSandboxLevel"))
    assert permissions is not None and level is not None
    ctx = FileSystemSandboxContext(permissions=permissions, windows_sandbox_level=level)
    for name, field_value in ctx_kwargs.items():
        setattr(ctx, name, field_value)
    return ctx


_ABSENT = absent_raw()  # the params structs' default: one shared object, no parsing needed


def decode_sandbox_param(raw: msgspec.Raw | bytes | None) -> FileSystemSandboxContext | None:
    """The optional ``sandbox`` member as kept raw by the params structs: absent or
    ``null`` means no sandbox (``sandboxType: "none"``)."""
    if raw is None or len(raw) == 0 or raw is _ABSENT:
        return None
    value = decode_json_value(bytes(raw))
    if value is None:
        return None
    return decode_sandbox_context(value)
