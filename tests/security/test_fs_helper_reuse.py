"""A warm fs helper never serves a path its policy denies, whatever the host does
to the files its masks sit on.

A persistent helper lives in its own long-lived mount namespace. When the host
renames a file over a masked (denied) file, or removes and re-creates a
read-only carve-out, the kernel detaches the helper's mount on that name; and
ext4 hands the freed inode number back on the next create, so after two saves
the name has its original (device, inode) again. A pool that told helpers apart
by that pair picked the unmasked helper again and returned the secret.

Each test here replays such host edits between sandboxed fs calls through a
real daemon, many rounds, and asserts the policy held on every call.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from execserver.fs.sandboxed import program
from execserver.fs.sandboxed.helper import HelperStale, spawn_helper
from execserver.sandbox.fs_helper.runtime import helper_runtime
from execserver.sandbox.policy import resolve_policy
from tests.support.attacks import entry, sandbox, uri
from tests.support.rpc import RpcClient, RpcFailure, connect
from tests.support.sandbox import context, host_backend, managed
from tests.support.servers import start_server

ROUNDS = 20
SECRET = "TOKEN=hunter2"


async def _read(client: RpcClient, path: Path, policy: dict[str, Any]) -> str | RpcFailure:
    try:
        result = await client.ok("fs/readFile", {"path": uri(path), "sandbox": policy})
    except RpcFailure as failure:
        return failure
    return base64.b64decode(result["dataBase64"]).decode(errors="replace")


async def _write(client: RpcClient, path: Path, policy: dict[str, Any]) -> RpcFailure | None:
    params = {
        "path": uri(path),
        "dataBase64": base64.b64encode(b"planted").decode(),
        "sandbox": policy,
    }
    try:
        await client.ok("fs/writeFile", params)
    except RpcFailure as failure:
        return failure
    return None


def _save_twice_like_sed(path: Path) -> None:
    """``sed -i`` writes a temporary file and renames it over the original;
    twice, so the second save gets the first inode number back on ext4."""
    for _ in range(2):
        subprocess.run(["sed", "-i", "s/hunter/hunter/", str(path)], check=True)


def _denied(outcome: str | RpcFailure) -> bool:
    return isinstance(outcome, RpcFailure) and SECRET not in outcome.message


async def test_denied_file_saved_twice_on_the_host_stays_denied(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("mine\n")
    secret = ws / ".env"
    secret.write_text(SECRET + "\n")
    policy = sandbox([entry(ws, "write"), entry(secret, "none")], cwd=ws)
    inodes = set()
    async with start_server("execserver") as server, connect(server.url) as client:
        assert await _read(client, ws / "notes.txt", policy) == "mine\n"
        assert _denied(await _read(client, secret, policy))
        for round_ in range(ROUNDS):
            _save_twice_like_sed(secret)
            inodes.add(os.lstat(secret).st_ino)
            outcome = await _read(client, secret, policy)
            assert _denied(outcome), (round_, outcome)
            # The helper still works for what the policy allows.
            assert await _read(client, ws / "notes.txt", policy) == "mine\n"
    # The host edits did replace the file (the attack's precondition).
    assert inodes


async def test_denied_file_under_a_renamed_parent_stays_denied(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    sub = ws / "sub"
    sub.mkdir(parents=True)
    secret = sub / ".env"
    secret.write_text(SECRET + "\n")
    policy = sandbox([entry(ws, "write"), entry(secret, "none")], cwd=ws)
    async with start_server("execserver") as server, connect(server.url) as client:
        assert _denied(await _read(client, secret, policy))
        for round_ in range(ROUNDS):
            # Move the parent away, put a fresh copy in its place, drop the old one
            # (its inode numbers become free for the next round to reuse).
            old = ws / "sub.old"
            sub.rename(old)
            sub.mkdir()
            (sub / ".env").write_text(SECRET + "\n")
            (old / ".env").unlink()
            old.rmdir()
            outcome = await _read(client, secret, policy)
            assert _denied(outcome), (round_, outcome)
            # Saved in place too, between calls.
            _save_twice_like_sed(secret)
            outcome = await _read(client, secret, policy)
            assert _denied(outcome), (round_, outcome)


async def test_replaced_read_only_carve_out_stays_read_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    frozen = ws / "frozen"
    frozen.mkdir()
    (frozen / "keep.txt").write_text("original\n")
    policy = sandbox([entry(ws, "write"), entry(frozen, "read")], cwd=ws)
    async with start_server("execserver") as server, connect(server.url) as client:
        refused = await _write(client, frozen / "keep.txt", policy)
        assert refused is not None and refused.code == -32603, refused
        for round_ in range(ROUNDS):
            # Replace the carve-out twice (remove + re-create), so the name gets
            # its first inode number back.
            for _ in range(2):
                (frozen / "keep.txt").unlink()
                frozen.rmdir()
                frozen.mkdir()
                (frozen / "keep.txt").write_text("original\n")
            failure = await _write(client, frozen / "planted.txt", policy)
            assert failure is not None, round_
            assert not (frozen / "planted.txt").exists(), round_
            # The rest of the workspace is still writable through the helper.
            assert await _write(client, ws / f"ok{round_}.txt", policy) is None
    assert (frozen / "keep.txt").read_text() == "original\n"


async def test_helper_itself_refuses_once_a_mask_is_detached(tmp_path: Path) -> None:
    """The second line on its own: a helper driven directly (no pool, so no
    identity comparison before the call) withholds every answer once the host has
    detached its mask, and never returns the secret."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("mine\n")
    secret = ws / ".env"
    secret.write_text(SECRET + "\n")
    policy = resolve_policy(
        context(managed([entry(ws, "write"), entry(secret, "none")])), fallback_cwd=None
    )
    runtime = helper_runtime(program.__name__)
    assert runtime is not None
    helper = await spawn_helper(policy, host_backend(), runtime)
    assert helper is not None
    try:
        notes = {"path": str(ws / "notes.txt"), "follow_symlinks": True}
        env = {"path": str(secret), "follow_symlinks": True}
        assert await helper.call("read_file", notes) == b"mine\n"
        with pytest.raises(Exception) as denied:
            await helper.call("read_file", env)
        assert not isinstance(denied.value, HelperStale)
        _save_twice_like_sed(secret)
        with pytest.raises(HelperStale) as stale:
            await helper.call("read_file", env)
        assert ".env" in str(stale.value)
        # Nothing else is served from that view either.
        with pytest.raises(HelperStale):
            await helper.call("read_file", notes)
    finally:
        await helper.aclose()
