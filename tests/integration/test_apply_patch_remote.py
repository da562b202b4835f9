"""apply_patch through a real execserver's file system, on the orchestrator,
and the ``execserver patch`` command.

Only the user is scripted; server, sandbox and files are real.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client.connection import ExecServerClient
from execserver.core.apply_patch.delta import AddChange, DeleteChange, UpdateChange
from execserver.core.apply_patch.handler import run_apply_patch
from execserver.core.apply_patch.parser import parse_patch
from execserver.core.apply_patch.runtime import APPLY_PATCH_HOOK_NAMES, ApplyPatchRequest
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment
from execserver.core.permissions import workspace_write_profile
from execserver.core.policy import AskForApproval
from execserver.core.runtime import TurnContext
from tests.support.approver import ScriptedUser
from tests.support.servers import RunningServer


@pytest.fixture
async def client(execserver: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(execserver.url) as connected:
        yield connected


def _turn(
    workspace: Path, user: ScriptedUser, policy: AskForApproval = AskForApproval.ON_REQUEST
) -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id="executor-1", cwd=str(workspace)),
        approval_policy=policy,
        permission_profile=workspace_write_profile(),
        approver=user,
    )


def _request(patch: str, cwd: Path) -> ApplyPatchRequest:
    return ApplyPatchRequest(parse_patch(patch), str(cwd))


async def test_add_update_move_delete_in_the_workspace_run_sandboxed_without_asking(
    client: ExecServerClient, workspace: Path
) -> None:
    (workspace / "update.txt").write_text("one\ntwo\n")
    (workspace / "move.txt").write_text("moving\n")
    (workspace / "delete.txt").write_text("bye\n")
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Add File: new/added.txt",
            "+fresh",
            "*** Update File: update.txt",
            "@@",
            " one",
            "-two",
            "+TWO",
            "*** Update File: move.txt",
            "*** Move to: moved/dest.txt",
            "@@",
            "-moving",
            "+moved",
            "*** Delete File: delete.txt",
            "*** End Patch",
        ]
    )
    user = ScriptedUser()
    result = await run_apply_patch(client.fs, _turn(workspace, user), _request(patch, workspace))
    assert result.success
    assert not result.retried
    assert result.output == (
        "Success. Updated the following files:\n"
        "A new/added.txt\nM update.txt\nM moved/dest.txt\nD delete.txt\n"
    )
    assert user.requests == []
    assert (workspace / "new/added.txt").read_text() == "fresh\n"
    assert (workspace / "update.txt").read_text() == "one\nTWO\n"
    assert (workspace / "moved/dest.txt").read_text() == "moved\n"
    assert not (workspace / "move.txt").exists()
    assert not (workspace / "delete.txt").exists()
    assert [(c.path, c.change) for c in result.delta.changes] == [
        (str(workspace / "new/added.txt"), AddChange("fresh\n")),
        (str(workspace / "update.txt"), UpdateChange("one\ntwo\n", "one\nTWO\n")),
        (
            str(workspace / "move.txt"),
            UpdateChange("moving\n", "moved\n", str(workspace / "moved/dest.txt")),
        ),
        (str(workspace / "delete.txt"), DeleteChange("bye\n")),
    ]
    assert result.delta.exact


async def test_patch_outside_the_workspace_is_asked_then_denied_then_retried_unsandboxed(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """The first attempt writes the workspace file, then the sandbox refuses the
    outside one; the approved call is retried unsandboxed and re-applies the
    whole patch. The committed delta holds both attempts' changes."""
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Add File: inside.txt",
            "+in",
            f"*** Add File: {outside}/far.txt",
            "+far",
            "*** End Patch",
        ]
    )
    user = ScriptedUser(ReviewDecision.APPROVED)
    result = await run_apply_patch(client.fs, _turn(workspace, user), _request(patch, workspace))
    assert result.success
    assert result.retried
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert (outside / "far.txt").read_text() == "far\n"
    (prompt,) = user.requests
    assert prompt.tool_name == "apply_patch"
    assert prompt.hook_names == APPLY_PATCH_HOOK_NAMES
    assert prompt.retry is False
    assert [c.path for c in result.delta.changes] == [
        str(workspace / "inside.txt"),
        f"{outside}/far.txt",
    ]


async def test_failure_mid_patch_reports_the_committed_delta(
    client: ExecServerClient, workspace: Path
) -> None:
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Add File: landed.txt",
            "+landed",
            "*** Update File: missing.txt",
            "@@",
            "-a",
            "+b",
            "*** End Patch",
        ]
    )
    result = await run_apply_patch(
        client.fs, _turn(workspace, ScriptedUser()), _request(patch, workspace)
    )
    assert not result.success
    assert result.output == (
        f"Failed to read file to update {workspace}/missing.txt: "
        "No such file or directory (os error 2)\n"
    )
    assert [(c.path, c.change) for c in result.delta.changes] == [
        (str(workspace / "landed.txt"), AddChange("landed\n"))
    ]
    assert (workspace / "landed.txt").read_text() == "landed\n"


async def test_failed_move_returns_committed_destination_delta(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """Moving a file from outside the workspace into it: the sandbox lets the
    source be read and the destination be written, but not the source be
    removed. The destination write stays committed and is reported; a failed
    removal is not a sandbox-denial text, so there is no retry."""
    (outside / "src.txt").write_text("x\n")
    patch = "\n".join(
        [
            "*** Begin Patch",
            f"*** Update File: {outside}/src.txt",
            "*** Move to: dest.txt",
            "@@",
            "-x",
            "+y",
            "*** End Patch",
        ]
    )
    user = ScriptedUser(ReviewDecision.APPROVED)
    result = await run_apply_patch(client.fs, _turn(workspace, user), _request(patch, workspace))
    assert not result.success
    assert not result.retried
    assert result.output == f"Failed to remove original {outside}/src.txt\n"
    assert [(c.path, c.change) for c in result.delta.changes] == [
        (str(workspace / "dest.txt"), AddChange("y\n"))
    ]
    assert (workspace / "dest.txt").read_text() == "y\n"
    assert (outside / "src.txt").read_text() == "x\n"


async def _run_cli(url: str, cwd: Path, patch: str, *options: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "execserver",
        "patch",
        url,
        "--cwd",
        str(cwd),
        *options,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(patch.encode())
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_patch_command_applies_stdin_on_the_executor(
    execserver: RunningServer, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("old\n")
    code, out, err = await _run_cli(
        execserver.url,
        workspace,
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n*** End Patch\n",
    )
    assert (code, out, err) == (0, "Success. Updated the following files:\nM a.txt\n", "")
    assert (workspace / "a.txt").read_text() == "new\n"


async def test_patch_command_exits_non_zero_with_the_reference_message(
    execserver: RunningServer, workspace: Path
) -> None:
    code, out, err = await _run_cli(
        execserver.url, workspace, "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch\n"
    )
    assert (code, out, err) == (1, "", f"Failed to delete file {workspace}/nope.txt\n")


async def test_patch_command_under_the_executors_sandbox(
    execserver: RunningServer, workspace: Path, outside: Path
) -> None:
    """--sandbox workspace-write: writes inside --cwd land, one outside is refused
    by the executor's sandbox, with the reference's apply_patch failure text."""
    inside = "*** Begin Patch\n*** Add File: in.txt\n+in\n*** End Patch\n"
    code, out, err = await _run_cli(
        execserver.url, workspace, inside, "--sandbox", "workspace-write"
    )
    assert (code, out, err) == (0, "Success. Updated the following files:\nA in.txt\n", "")
    escape = f"*** Begin Patch\n*** Add File: {outside}/out.txt\n+out\n*** End Patch\n"
    code, out, err = await _run_cli(
        execserver.url, workspace, escape, "--sandbox", "workspace-write"
    )
    assert (code, out, err) == (1, "", f"Failed to write file {outside}/out.txt\n")
    assert not (outside / "out.txt").exists()
    code, out, err = await _run_cli(execserver.url, workspace, inside, "--sandbox", "{bad")
    assert code == 2 and out == ""
    assert err.startswith("execserver patch: --sandbox is neither a profile name nor JSON")


async def test_unsandboxed_retry_does_not_follow_symlinks(
    client: ExecServerClient, workspace: Path, outside: Path
) -> None:
    """Invariant 15: the approved unsandboxed retry runs with followSymlinks
    false, so a workspace symlink cannot redirect a write out of the paths the
    user approved; the write through it fails and what landed is reported."""
    (workspace / "link").symlink_to(outside)
    patch = "\n".join(
        [
            "*** Begin Patch",
            f"*** Add File: {outside}/direct.txt",
            "+direct",
            "*** Add File: link/via.txt",
            "+via",
            "*** End Patch",
        ]
    )
    user = ScriptedUser(ReviewDecision.APPROVED)
    result = await run_apply_patch(client.fs, _turn(workspace, user), _request(patch, workspace))
    assert result.retried
    assert not result.success
    assert result.output == f"Failed to write file {workspace}/link/via.txt\n"
    assert (outside / "direct.txt").read_text() == "direct\n"
    assert not (outside / "via.txt").exists()
    assert [c.path for c in result.delta.changes] == [f"{outside}/direct.txt"]
