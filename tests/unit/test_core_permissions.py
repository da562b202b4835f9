"""Permission profiles: wire <-> model, additional permissions, deny-read."""

from __future__ import annotations

import pytest

from execserver.core.permissions import (
    AdditionalPermissions,
    DisabledProfile,
    ExplicitPath,
    ExternalProfile,
    FsAccess,
    FsEntry,
    GlobPattern,
    ManagedProfile,
    NetworkAccess,
    PermissionProfile,
    RestrictedFs,
    SpecialPath,
    UnrestrictedFs,
    effective_profile,
    has_deny_read,
    is_preapproved,
    is_restricted_fs,
    network_enabled,
    profile_from_json,
    profile_to_json,
    read_only_profile,
    uses_policy_cwd,
    workspace_write_profile,
)
from execserver.wire.errors import RpcError

ALL_SPECIALS = RestrictedFs(
    (
        FsEntry(SpecialPath("root"), FsAccess.READ),
        FsEntry(SpecialPath("minimal"), FsAccess.READ),
        FsEntry(SpecialPath("current_working_directory"), FsAccess.WRITE),
        FsEntry(SpecialPath("project_roots", subpath="src"), FsAccess.WRITE),
        FsEntry(SpecialPath("tmpdir"), FsAccess.WRITE),
        FsEntry(SpecialPath("slash_tmp"), FsAccess.WRITE),
        FsEntry(SpecialPath("unknown", path="~/x", subpath="y"), FsAccess.READ),
        FsEntry(ExplicitPath("/etc/secret file"), FsAccess.DENY, skip_if_missing=True),
        FsEntry(GlobPattern("**/*.env"), FsAccess.DENY),
    ),
    glob_scan_max_depth=3,
)


@pytest.mark.parametrize(
    "profile",
    [
        ManagedProfile(ALL_SPECIALS, NetworkAccess.RESTRICTED),
        ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED),
        DisabledProfile(),
        ExternalProfile(NetworkAccess.ENABLED),
        read_only_profile(),
    ],
)
def test_profile_round_trips_through_the_executor_decoder(profile: PermissionProfile) -> None:
    assert profile_from_json(profile_to_json(profile)) == profile


def test_profile_wire_shape_is_snake_case_with_uri_paths_and_emits_deny() -> None:
    profile = ManagedProfile(
        RestrictedFs(
            (
                FsEntry(SpecialPath("root"), FsAccess.READ),
                FsEntry(ExplicitPath("/a b"), FsAccess.DENY, skip_if_missing=True),
            )
        )
    )
    assert profile_to_json(profile) == {
        "type": "managed",
        "file_system": {
            "type": "restricted",
            "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {
                    "path": {"type": "path", "path": "file:///a%20b"},
                    "access": "deny",
                    "missing_path_behavior": "skip",
                },
            ],
        },
        "network": "restricted",
    }


def test_legacy_none_access_is_read_as_deny() -> None:
    profile = profile_from_json(
        {
            "type": "managed",
            "file_system": {
                "type": "restricted",
                "entries": [{"path": {"type": "path", "path": "file:///x"}, "access": "none"}],
            },
            "network": "restricted",
        }
    )
    assert has_deny_read(profile)
    assert profile_to_json(profile)["file_system"]["entries"][0]["access"] == "deny"  # type: ignore[index]


def test_unknown_variant_is_refused_with_the_executor_words() -> None:
    with pytest.raises(RpcError) as info:
        profile_from_json({"type": "sandboxed"})
    assert info.value.code == -32602
    assert info.value.message == (
        "unknown variant `sandboxed`, expected one of `managed`, `disabled`, `external`"
    )


def test_native_paths_are_refused_in_profiles() -> None:
    with pytest.raises(ValueError):
        ExplicitPath("relative/path")
    with pytest.raises(RpcError):
        profile_from_json(
            {
                "type": "managed",
                "file_system": {
                    "type": "restricted",
                    "entries": [{"path": {"type": "path", "path": "/abs"}, "access": "read"}],
                },
                "network": "restricted",
            }
        )


@pytest.mark.parametrize(
    ("profile", "deny_read"),
    [
        (read_only_profile(), False),
        (workspace_write_profile(extra=[FsEntry(ExplicitPath("/s"), FsAccess.DENY)]), True),
        (workspace_write_profile(extra=[FsEntry(GlobPattern("*.pem"), FsAccess.DENY)]), True),
        (ManagedProfile(UnrestrictedFs()), False),
        (DisabledProfile(), False),
        (ExternalProfile(), False),
    ],
)
def test_has_deny_read(profile: PermissionProfile, deny_read: bool) -> None:
    assert has_deny_read(profile) is deny_read


def _only(entry: FsEntry) -> ManagedProfile:
    return ManagedProfile(RestrictedFs((entry,)))


@pytest.mark.parametrize(
    ("profile", "uses_cwd"),
    [
        (read_only_profile(), False),
        (workspace_write_profile(), True),
        (_only(FsEntry(SpecialPath("project_roots"), FsAccess.WRITE)), True),
        (_only(FsEntry(GlobPattern("src/**"), FsAccess.READ)), True),
        (_only(FsEntry(GlobPattern("/abs/**"), FsAccess.READ)), False),
        (DisabledProfile(), False),
    ],
)
def test_uses_policy_cwd(profile: PermissionProfile, uses_cwd: bool) -> None:
    assert uses_policy_cwd(profile) is uses_cwd


def test_predicates_for_profile_kinds() -> None:
    assert is_restricted_fs(read_only_profile())
    assert not is_restricted_fs(ManagedProfile(UnrestrictedFs()))
    assert not is_restricted_fs(ExternalProfile())
    assert network_enabled(DisabledProfile())
    assert not network_enabled(ExternalProfile())
    assert network_enabled(read_only_profile(network=NetworkAccess.ENABLED))


# --------------------------------------------------------------------------- additional permissions
def test_additional_permissions_parse_and_serialise() -> None:
    value = {"network": {"enabled": True}, "file_system": {"read": ["/r"], "write": ["/w"]}}
    extra = AdditionalPermissions.from_json(value)
    assert extra == AdditionalPermissions(network=True, read=("/r",), write=("/w",))
    assert extra.to_json() == value
    assert AdditionalPermissions().is_empty


def test_additional_permission_paths_must_be_absolute_unless_a_cwd_resolves_them() -> None:
    with pytest.raises(ValueError):
        AdditionalPermissions.from_json({"file_system": {"write": ["rel"]}})
    extra = AdditionalPermissions.from_json({"file_system": {"write": ["rel/../out"]}}, cwd="/work")
    assert extra.write == ("/work/out",)


def test_effective_profile_appends_entries_and_enables_network() -> None:
    base = workspace_write_profile()
    extra = AdditionalPermissions(network=True, read=("/opt/data",), write=("/var/out",))
    widened = effective_profile(base, extra)
    assert isinstance(widened, ManagedProfile)
    assert widened.network is NetworkAccess.ENABLED
    assert isinstance(widened.file_system, RestrictedFs)
    assert isinstance(base.file_system, RestrictedFs)
    assert widened.file_system.entries == (
        *base.file_system.entries,
        FsEntry(ExplicitPath("/opt/data"), FsAccess.READ),
        FsEntry(ExplicitPath("/var/out"), FsAccess.WRITE),
    )


def test_effective_profile_preserves_deny_reads_of_the_base() -> None:
    """Invariant 10: widening never removes a deny entry."""
    base = workspace_write_profile(extra=[FsEntry(ExplicitPath("/secret"), FsAccess.DENY)])
    widened = effective_profile(base, AdditionalPermissions(write=("/secret",)))
    assert has_deny_read(widened)


def test_effective_profile_without_additions_is_the_base() -> None:
    base = read_only_profile()
    assert effective_profile(base, None) is base
    assert effective_profile(base, AdditionalPermissions()) is base
    assert effective_profile(DisabledProfile(), AdditionalPermissions(network=True)) == (
        DisabledProfile()
    )
    assert effective_profile(ExternalProfile(), AdditionalPermissions(network=True)) == (
        ExternalProfile(NetworkAccess.ENABLED)
    )


@pytest.mark.parametrize(
    ("requested", "granted", "preapproved"),
    [
        (None, None, True),
        (AdditionalPermissions(), None, True),
        (AdditionalPermissions(write=("/w",)), None, False),
        (AdditionalPermissions(write=("/w",)), AdditionalPermissions(write=("/w",)), True),
        (AdditionalPermissions(read=("/w",)), AdditionalPermissions(write=("/w",)), True),
        (AdditionalPermissions(write=("/w",)), AdditionalPermissions(read=("/w",)), False),
        (AdditionalPermissions(network=True), AdditionalPermissions(write=("/w",)), False),
        (AdditionalPermissions(network=True), AdditionalPermissions(network=True), True),
        (
            AdditionalPermissions(write=("/a", "/b")),
            AdditionalPermissions(write=("/a",)),
            False,
        ),
    ],
)
def test_is_preapproved(
    requested: AdditionalPermissions | None,
    granted: AdditionalPermissions | None,
    preapproved: bool,
) -> None:
    assert is_preapproved(requested, granted) is preapproved
