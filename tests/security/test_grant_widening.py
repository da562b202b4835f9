"""Grants cannot be widened by what an earlier sandboxed command left behind:

* a symlink planted inside a writable root is never followed by a later grant
  (a ``write ws/cache`` after ``ln -s ../outside cache`` would have bound the
  host's ``outside`` writable), nor by ``project_roots`` subpaths or TMPDIR;
* deny-read and read-only carve-outs follow the file, not the name: renaming a
  parent of a denied file (``mv config config_moved``) fails inside the
  sandbox, so the next command (or a sandboxed fs/readFile) with the same
  policy still cannot read it.

Measured on the reference 0.169.0 (``test_reference_*``, interop): it follows
the planted symlink and lets the rename through, i.e. has both weaknesses.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.support.attacks import ROOT_READ, attack, bash, entry, sandbox, special, uri
from tests.support.rpc import RpcFailure, connect
from tests.support.servers import RunningServer, start_server


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    return ws, outside


async def _plant_then_write(url: str, ws: Path, outside: Path, second: dict[str, Any]) -> str:
    """Command A plants ws/cache -> ../outside; command B runs under ``second``.
    Returns how B's start ended: "refused: <message>" or its output."""
    first = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    async with connect(url) as client:
        planted = await attack(
            client, bash("ln -s ../outside cache && echo planted"), cwd=ws, context=first
        )
        assert "planted" in planted.output, planted.output
        try:
            result = await attack(
                client,
                bash("mkdir -p cache/.ssh && echo key > cache/.ssh/authorized_keys; echo done"),
                cwd=ws,
                context=second,
            )
        except RpcFailure as failure:
            return f"refused: {failure.code} {failure.message}"
        return result.output


async def test_planted_symlink_does_not_widen_a_later_write_grant(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws, outside = _tree(tmp_path)
    second = sandbox([ROOT_READ, entry(ws, "write"), entry(ws / "cache", "write")], cwd=ws)
    outcome = await _plant_then_write(execserver.url, ws, outside, second)
    assert outcome.startswith("refused: -32603 cannot enforce sandbox path"), outcome
    assert "crosses writable symlink" in outcome
    assert not (outside / ".ssh").exists()


async def test_planted_symlink_does_not_widen_project_root_subpaths(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws, outside = _tree(tmp_path)
    second = sandbox(
        [ROOT_READ, entry(ws, "write"), entry(special("project_roots", subpath="cache"), "write")],
        cwd=ws,
    )
    second["workspaceRoots"] = [uri(ws)]
    outcome = await _plant_then_write(execserver.url, ws, outside, second)
    assert outcome.startswith("refused: -32603"), outcome
    assert not (outside / ".ssh").exists()


async def test_planted_symlink_does_not_widen_the_temporary_directory(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws, outside = _tree(tmp_path)
    second = sandbox([ROOT_READ, entry(ws, "write"), entry(special("tmpdir"), "write")], cwd=ws)
    second["temporaryDirectories"] = [uri(ws / "cache")]
    outcome = await _plant_then_write(execserver.url, ws, outside, second)
    assert outcome.startswith("refused: -32603"), outcome
    assert not (outside / ".ssh").exists()


async def test_symlinks_outside_writable_roots_still_resolve(
    execserver: RunningServer, tmp_path: Path
) -> None:
    """The host's own links (a workspace named through a symlink) keep working."""
    ws, _ = _tree(tmp_path)
    link = tmp_path / "ws_link"
    link.symlink_to(ws)
    context = sandbox([ROOT_READ, entry(link, "write")], cwd=ws)
    async with connect(execserver.url) as client:
        result = await attack(client, bash(f"echo ok > {link}/f && cat f"), cwd=ws, context=context)
    assert result.output.strip() == "ok" and result.exit_code == 0


DENY_SECRET = "cat config/secret.env; mv config config_moved && echo MOVED; "


def _deny_policy(ws: Path) -> dict[str, Any]:
    return sandbox(
        [ROOT_READ, entry(ws, "write"), entry(ws / "config" / "secret.env", "deny")], cwd=ws
    )


def _secret_tree(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "config").mkdir(parents=True)
    (ws / "config" / "secret.env").write_text("TOKEN=hunter2\n")
    (ws / "config" / "other.txt").write_text("fine\n")
    return ws


async def test_renaming_the_parent_of_a_denied_file_fails_and_it_stays_unreadable(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws = _secret_tree(tmp_path)
    policy = _deny_policy(ws)
    async with connect(execserver.url) as client:
        first = await attack(
            client,
            bash(DENY_SECRET + "echo more >> config/other.txt && echo WROTE"),
            cwd=ws,
            context=policy,
        )
        second = await attack(
            client, bash("cat config/secret.env config_moved/secret.env"), cwd=ws, context=policy
        )
        via_fs: Any
        try:
            via_fs = await client.ok(
                "fs/readFile",
                {"path": uri(ws / "config" / "secret.env"), "sandbox": policy},
            )
        except RpcFailure as failure:
            via_fs = failure
    assert "hunter2" not in first.output and "MOVED" not in first.output, first.output
    assert "Device or resource busy" in first.output, first.output
    # The rest of the directory stays writable: only its name is pinned.
    assert "WROTE" in first.output
    assert (ws / "config" / "secret.env").exists() and not (ws / "config_moved").exists()
    assert "hunter2" not in second.output
    assert isinstance(via_fs, RpcFailure) and "Permission denied" in via_fs.message
    assert "hunter2" not in base64.b64decode(getattr(via_fs, "data", "") or b"").decode()


async def test_renaming_the_parent_of_a_read_only_carve_out_fails(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "docs" / "policy").mkdir(parents=True)
    (ws / "docs" / "policy" / "rules.md").write_text("original\n")
    policy = sandbox([ROOT_READ, entry(ws, "write"), entry(ws / "docs" / "policy", "read")], cwd=ws)
    async with connect(execserver.url) as client:
        result = await attack(
            client,
            bash(
                "mv docs docs2 && echo MOVED; mkdir -p docs2/policy; "
                "echo evil > docs/policy/rules.md; cat docs/policy/rules.md"
            ),
            cwd=ws,
            context=policy,
        )
    assert "MOVED" not in result.output, result.output
    assert (ws / "docs" / "policy" / "rules.md").read_text() == "original\n"


# ---- the reference, for the record (it has both weaknesses) -------------------------


@pytest.mark.interop
async def test_reference_follows_a_planted_symlink(tmp_path: Path) -> None:
    ws, outside = _tree(tmp_path)
    second = sandbox([ROOT_READ, entry(ws, "write"), entry(ws / "cache", "write")], cwd=ws)
    async with start_server("reference") as server:
        outcome = await _plant_then_write(server.url, ws, outside, second)
    assert "done" in outcome
    assert (outside / ".ssh" / "authorized_keys").read_text() == "key\n"


@pytest.mark.interop
async def test_reference_lets_the_parent_of_a_denied_file_be_renamed(tmp_path: Path) -> None:
    ws = _secret_tree(tmp_path)
    policy = _deny_policy(ws)
    async with start_server("reference") as server, connect(server.url) as client:
        first = await attack(client, bash(DENY_SECRET), cwd=ws, context=policy)
        second = await attack(client, bash("cat config_moved/secret.env"), cwd=ws, context=policy)
    assert "MOVED" in first.output
    assert "hunter2" in second.output
