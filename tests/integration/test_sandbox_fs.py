"""fs operations under a sandbox: the helper runs inside the real bwrap view and
errors come back with the reference's codes and texts."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from execserver.fs.sandboxed.client import SandboxedFs
from execserver.sandbox import needs_sandboxed_fs
from execserver.wire.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    PARSE_OR_INVALID_REQUEST,
    RpcError,
)
from tests.support.procinfo import wait_until
from tests.support.sandbox import (
    MINIMAL_READ,
    ROOT_READ,
    context,
    entry,
    make_tree,
    managed,
    sandboxed_fs,
    special,
    uri,
)

# The operations run inside the sandbox live in a helper program of their own
# (it imports no pytest, so every helper start does not pay for that), each call
# in a confined helper of its own as every call of a policy the pool cannot serve.
HERE = "tests.integration.test_sandbox_fs_ops"


def helper() -> SandboxedFs:
    return sandboxed_fs(persistent=False, module=HERE)


async def test_write_inside_writable_root_succeeds(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([ROOT_READ, entry(tree.ws, "write")]))
    target = str(tree.ws / "f.txt")
    result = await helper().call(ctx, "write_text", {"path": target, "text": "hello"})
    assert result == 5
    assert (tree.ws / "f.txt").read_text() == "hello"


async def test_write_outside_writable_root_is_erofs(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([ROOT_READ, entry(tree.ws, "write")]))
    for target in (tree.outside / "o.txt", tree.ws / ".git" / "HEAD", tree.ws / "link_out" / "l"):
        with pytest.raises(RpcError) as info:
            await helper().call(ctx, "write_text", {"path": str(target), "text": "x"})
        assert (info.value.code, info.value.message) == (
            INTERNAL_ERROR,
            "Read-only file system (os error 30)",
        )
    assert (tree.ws / ".git" / "HEAD").read_text() == "ref\n"
    assert list(tree.outside.iterdir()) == []


async def test_read_of_denied_file_is_eacces_and_missing_is_not_found(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([ROOT_READ, entry(tree.secret_file, "deny")]))
    with pytest.raises(RpcError) as info:
        await helper().call(ctx, "read_text", {"path": str(tree.secret_file)})
    assert (info.value.code, info.value.message) == (
        PARSE_OR_INVALID_REQUEST,
        "Permission denied (os error 13)",
    )
    with pytest.raises(RpcError) as info:
        await helper().call(ctx, "read_text", {"path": str(tree.ws / "nope")})
    assert (info.value.code, info.value.message) == (
        NOT_FOUND,
        "No such file or directory (os error 2)",
    )


async def test_restricted_read_view_shows_protected_mount_points(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([MINIMAL_READ, entry(tree.ws, "write")]))
    listing = await helper().call(ctx, "list_dir", {"path": str(tree.ws)})
    assert listing == [".agents", ".aws", ".codex", ".git", "link_out"]
    with pytest.raises(RpcError) as info:
        await helper().call(ctx, "read_text", {"path": str(tree.secret / "s.txt")})
    assert info.value.code == NOT_FOUND
    # The mount point goes when the helper's sandbox is gone: the call answers
    # first, and the release follows bwrap's exit (a moment later under load).
    assert await wait_until(lambda: not (tree.ws / ".codex").exists(), 10)


async def test_rpc_error_raised_by_the_operation_keeps_code_and_message(tmp_path: Path) -> None:
    ctx = context(managed([ROOT_READ]))
    with pytest.raises(RpcError) as info:
        await helper().call(ctx, "raise_rpc", {"message": "path `/x` is not a file"})
    assert (info.value.code, info.value.message) == (
        PARSE_OR_INVALID_REQUEST,
        "path `/x` is not a file",
    )


async def test_dynamic_entries_without_cwd_are_rejected_for_fs(tmp_path: Path) -> None:
    ctx = context(managed([ROOT_READ, entry(special("current_working_directory"), "write")]))
    with pytest.raises(RpcError) as info:
        await helper().call(ctx, "read_text", {"path": "/etc/hostname"})
    assert (info.value.code, info.value.message) == (
        INVALID_PARAMS,
        "file system sandbox context with dynamic permissions requires cwd",
    )


async def test_cwd_in_context_satisfies_dynamic_entries(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(
        managed([ROOT_READ, entry(special("project_roots"), "write")]),
        cwd=uri(tree.ws),
        workspaceRoots=[uri(tree.ws)],
    )
    await helper().call(ctx, "write_text", {"path": str(tree.ws / "p"), "text": "x"})
    assert (tree.ws / "p").exists()


@pytest.mark.parametrize(
    ("permissions", "write", "expected"),
    [
        ({"type": "disabled"}, True, False),
        ({"type": "external", "network": "restricted"}, True, False),
        (
            {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"},
            True,
            False,
        ),
        (managed([ROOT_READ]), False, False),
        (managed([ROOT_READ]), True, True),
        (managed([entry(special("root"), "write")]), True, False),
        (managed([entry(special("root"), "write"), entry("/x", "read")]), True, True),
        (managed([ROOT_READ, entry("/secret", "deny")]), False, True),
        (managed([MINIMAL_READ]), False, True),
    ],
)
def test_needs_sandboxed_fs_only_when_the_access_is_restricted(
    permissions: dict[str, object], write: bool, expected: bool
) -> None:
    assert needs_sandboxed_fs(context(permissions), write=write) is expected


async def test_cancelled_fs_call_kills_its_helper(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    marker = tree.ws / "started"
    seconds = f"{3600 + os.getpid() % 1000}.{time.time_ns() % 10**6}"
    os.mkfifo(marker)
    ctx = context(managed([ROOT_READ, entry(tree.ws, "write")]))
    task = asyncio.create_task(
        helper().call(ctx, "sleep_forever", {"marker": str(marker), "seconds": seconds})
    )
    assert await asyncio.to_thread(marker.read_text) == "started"
    assert await _pgrep(f"sleep {seconds}")  # visible while the call runs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The helper runs in the sandbox's pid namespace; bwrap's --die-with-parent and
    # the namespace teardown must have taken it down with bwrap.
    assert not await _pgrep(f"sleep {seconds}")


async def _pgrep(pattern: str) -> bytes:
    pgrep = await asyncio.create_subprocess_exec(
        "pgrep", "-f", pattern, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await pgrep.communicate()
    return out.strip()
