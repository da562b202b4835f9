"""Policy resolution: context + cwd -> canonical host paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from execserver.sandbox import resolve_policy
from execserver.sandbox.policy import has_dynamic_entries
from execserver.wire.errors import INVALID_PARAMS, RpcError
from execserver.wire.sandbox import decode_sandbox_context


def _ctx(entries: list[dict[str, Any]], network: str = "restricted", **extra: Any) -> Any:
    return decode_sandbox_context(
        {
            "permissions": {
                "type": "managed",
                "file_system": {"type": "restricted", "entries": entries},
                "network": network,
            },
            "windowsSandboxLevel": "disabled",
            **extra,
        }
    )


def _path(p: Path, access: str) -> dict[str, Any]:
    return {"path": {"type": "path", "path": f"file://{p}"}, "access": access}


def _special(kind: str, access: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": "special", "value": {"kind": kind, **extra}}, "access": access}


def test_same_path_precedence_is_deny_over_write_over_read(tmp_path: Path) -> None:
    policy = resolve_policy(
        _ctx([_path(tmp_path, "read"), _path(tmp_path, "none"), _path(tmp_path, "write")]),
        fallback_cwd=None,
    )
    assert policy.denied == (str(tmp_path.resolve()),)
    assert policy.writable == () and policy.readable == ()


def test_missing_paths_and_unknown_specials_grant_nothing(tmp_path: Path) -> None:
    policy = resolve_policy(
        _ctx([_path(tmp_path / "nope", "write"), _special("unknown", "write", path="x")]),
        fallback_cwd=None,
    )
    assert policy.rules == ()


def test_symlinked_root_is_canonicalised(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    policy = resolve_policy(_ctx([_path(tmp_path / "alias", "write")]), fallback_cwd=None)
    assert policy.writable == (str(real.resolve()),)


def test_project_roots_subpath_and_policy_context_precedence(tmp_path: Path) -> None:
    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "b" / "sub").mkdir(parents=True)
    ctx = _ctx(
        [_special("project_roots", "write", subpath="sub")],
        cwd=f"file://{tmp_path}",
        workspaceRoots=[f"file://{tmp_path}/a"],
        policyContext={"workspaceRoots": [f"file://{tmp_path}/b"]},
    )
    policy = resolve_policy(ctx, fallback_cwd=None)
    assert policy.writable == (str((tmp_path / "b" / "sub").resolve()),)


def test_root_and_minimal_flags(tmp_path: Path) -> None:
    policy = resolve_policy(_ctx([_special("root", "read")]), fallback_cwd=None)
    assert policy.root_access == "read" and policy.full_read and not policy.full_write
    policy = resolve_policy(_ctx([_special("root", "write")]), fallback_cwd=None)
    assert policy.full_write
    policy = resolve_policy(
        _ctx([_special("root", "write"), _path(tmp_path, "deny")]), fallback_cwd=None
    )
    assert not policy.full_write and not policy.full_read
    policy = resolve_policy(_ctx([_special("minimal", "read")]), fallback_cwd=None)
    assert policy.minimal_read and policy.root_access is None


def test_network_and_other_profiles() -> None:
    assert (
        resolve_policy(_ctx([], network="enabled"), fallback_cwd=None).network_restricted is False
    )
    disabled = decode_sandbox_context(
        {"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"}
    )
    assert resolve_policy(disabled, fallback_cwd=None).enforces_nothing
    external = decode_sandbox_context(
        {"permissions": {"type": "external", "network": "restricted"}, "windowsSandboxLevel": "mxc"}
    )
    policy = resolve_policy(external, fallback_cwd=None)
    assert policy.full_write and policy.network_restricted


@pytest.mark.parametrize(
    "dynamic",
    [
        _special("current_working_directory", "write"),
        _special("project_roots", "read"),
        {"path": {"type": "glob_pattern", "pattern": "*.pem"}, "access": "deny"},
    ],
)
def test_dynamic_entries_need_a_cwd(dynamic: dict[str, Any]) -> None:
    ctx = _ctx([dynamic])
    assert has_dynamic_entries(ctx)
    with pytest.raises(RpcError) as info:
        resolve_policy(ctx, fallback_cwd=None)
    assert info.value.code == INVALID_PARAMS
    assert info.value.message == "file system sandbox context with dynamic permissions requires cwd"
    resolve_policy(ctx, fallback_cwd="/")  # process/start: the process cwd is enough


def test_absolute_glob_is_not_dynamic_and_expands(tmp_path: Path) -> None:
    (tmp_path / "k.pem").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "j.pem").write_text("x")
    (tmp_path / "note.txt").write_text("x")
    ctx = _ctx(
        [{"path": {"type": "glob_pattern", "pattern": f"{tmp_path}/**/*.pem"}, "access": "deny"}]
    )
    assert not has_dynamic_entries(ctx)
    policy = resolve_policy(ctx, fallback_cwd=None)
    assert set(policy.denied) == {str(tmp_path / "k.pem"), str(tmp_path / "d" / "j.pem")}


def test_tmpdir_uses_context_temporary_directories(tmp_path: Path) -> None:
    ctx = _ctx([_special("tmpdir", "write")], temporaryDirectories=[f"file://{tmp_path}"])
    assert resolve_policy(ctx, fallback_cwd=None).writable == (str(tmp_path.resolve()),)
