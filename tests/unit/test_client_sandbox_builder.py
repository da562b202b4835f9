"""``Sandbox`` builds the wire ``FileSystemSandboxContext`` the server decodes."""

from __future__ import annotations

import msgspec
import pytest

from execserver.client import Sandbox
from execserver.wire.sandbox import decode_sandbox_context


def wire(sandbox: Sandbox) -> dict[str, object]:
    decoded: dict[str, object] = msgspec.json.decode(msgspec.json.encode(sandbox.context))
    return decoded


def test_workspace_write_grants_root_read_workspace_and_tmp_write_and_denies() -> None:
    sandbox = Sandbox.workspace_write("/work/repo", deny_read=["/work/repo/.env"])
    doc = wire(sandbox)
    assert doc["windowsSandboxLevel"] == "disabled"
    assert doc["workspaceRoots"] == ["file:///work/repo"]
    permissions = doc["permissions"]
    assert isinstance(permissions, dict)
    assert permissions["type"] == "managed" and permissions["network"] == "restricted"
    assert permissions["file_system"]["entries"] == [
        {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
        {"path": {"type": "path", "path": "file:///work/repo"}, "access": "write"},
        {"path": {"type": "special", "value": {"kind": "slash_tmp"}}, "access": "write"},
        {"path": {"type": "path", "path": "file:///work/repo/.env"}, "access": "none"},
    ]
    # What the server's decoder accepts, unchanged.
    assert decode_sandbox_context(doc) == sandbox.context


def test_read_only_and_network() -> None:
    doc = wire(Sandbox.read_only(network=True))
    permissions = doc["permissions"]
    assert isinstance(permissions, dict)
    assert permissions["network"] == "enabled"
    assert [e["access"] for e in permissions["file_system"]["entries"]] == ["read"]


def test_relative_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        Sandbox.workspace_write("repo")
    with pytest.raises(ValueError, match="absolute"):
        Sandbox.read_only(deny_read=["secrets"])
