"""Sandboxed fs/* sees exactly what a process with the same policy sees.

With only ``read ws`` the fs helper used to read ``/etc/shadow``, the daemon's
venv and its package (it needs them to start, and they were visible by path
to the request). Now those paths are missing for the request, as they are for
the process, and the reference's error for a missing path comes back.

Measured on the reference 0.169.0 (interop): its helper adds ``:minimal`` to
the policy, so ``fs/readFile /etc/passwd`` with only ``read ws`` returns it.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import execserver
from tests.support.attacks import attack, bash, entry, sandbox, uri
from tests.support.rpc import RpcFailure, connect
from tests.support.servers import start_server

PACKAGE_FILE = os.path.abspath(execserver.__file__)


async def _read(client: Any, path: str | Path, policy: dict[str, Any]) -> str | RpcFailure:
    try:
        result = await client.ok("fs/readFile", {"path": uri(path), "sandbox": policy})
    except RpcFailure as failure:
        return failure
    return base64.b64decode(result["dataBase64"]).decode(errors="replace")


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("mine\n")
    (ws / "shadow_link").symlink_to("/etc/shadow")
    return ws


async def test_fs_read_outside_the_policy_fails_like_the_process_does(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    policy = sandbox([entry(ws, "read")], cwd=ws)
    targets: list[str | Path] = [
        "/etc/shadow",
        "/etc/passwd",
        PACKAGE_FILE,
        sys.executable,
        ws / "shadow_link",
    ]
    async with start_server("execserver") as server, connect(server.url) as client:
        own = await _read(client, ws / "notes.txt", policy)
        outcomes = {str(t): await _read(client, t, policy) for t in targets}
        process = await attack(
            client,
            [sys.executable, "-c", "print(1)"],
            cwd=ws,
            context=policy,
        )
        cat = await attack(client, bash("cat /etc/shadow"), cwd=ws, context=policy)
    assert own == "mine\n"
    for target, outcome in outcomes.items():
        assert isinstance(outcome, RpcFailure), (target, outcome)
        assert (outcome.code, outcome.message) == (
            -32004,
            "No such file or directory (os error 2)",
        ), target
    # The process with the same policy cannot even find these (the comparison).
    assert "No such file or directory" in process.output or process.exit_code != 0
    assert cat.exit_code != 0 and "root:" not in cat.output


async def test_fs_write_outside_the_policy_fails_and_nothing_is_written(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    policy = sandbox([entry(ws, "write")], cwd=ws)
    async with start_server("execserver") as server, connect(server.url) as client:
        with pytest.raises(RpcFailure) as info:
            await client.ok(
                "fs/writeFile",
                {"path": uri(outside / "x"), "dataBase64": "eA==", "sandbox": policy},
            )
        await client.ok(
            "fs/writeFile", {"path": uri(ws / "y"), "dataBase64": "eQ==", "sandbox": policy}
        )
    assert info.value.code == -32004
    assert not (outside / "x").exists()
    assert (ws / "y").read_text() == "y"


async def test_fs_read_inside_a_readable_root_and_minimal_still_work(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    policy = sandbox(
        [entry({"type": "special", "value": {"kind": "minimal"}}, "read"), entry(ws, "read")],
        cwd=ws,
    )
    async with start_server("execserver") as server, connect(server.url) as client:
        passwd = await _read(client, "/etc/passwd", policy)
        package = await _read(client, PACKAGE_FILE, policy)
    assert isinstance(passwd, str) and "root:" in passwd
    if not PACKAGE_FILE.startswith(("/usr/", "/bin/", "/etc/", "/lib")):
        assert isinstance(package, RpcFailure) and package.code == -32004


@pytest.mark.interop
async def test_reference_fs_helper_reads_beyond_the_policy(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    policy = sandbox([entry(ws, "read")], cwd=ws)
    async with start_server("reference") as server, connect(server.url) as client:
        passwd = await _read(client, "/etc/passwd", policy)
    assert isinstance(passwd, str) and "root:" in passwd
