"""A host where bwrap works but cannot mount a private /proc (masked /proc in some
containers): the reference then runs without one, so the command sees the host's
process list. We fail closed instead: bwrap counts as unusable, the next backend
(Landlock) decides, and with none the request is refused before anything runs."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.attacks import ROOT_READ, attack, bash, entry, sandbox
from tests.support.rpc import RpcFailure, connect
from tests.support.sandbox import masked_proc_bwrap
from tests.support.servers import start_server


async def test_no_private_proc_means_no_bwrap_and_nothing_runs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {
        **os.environ,
        "EXECSERVER_BWRAP": masked_proc_bwrap(tmp_path),
        "EXECSERVER_SANDBOX_NO_LANDLOCK": "1",
    }
    async with start_server("execserver", env=env) as server, connect(server.url) as client:
        for context in (sandbox([ROOT_READ]), sandbox([ROOT_READ, entry(ws, "write")])):
            try:
                await attack(client, bash("ls /proc > listing"), cwd=ws, context=context)
            except RpcFailure as failure:
                assert failure.code == -32602
                assert failure.message.startswith(
                    "sandbox intent cannot be enforced on this executor: "
                ), failure.message
                assert "private /proc" in failure.message, failure.message
            else:
                raise AssertionError("a sandboxed command ran without a private /proc")
    assert not (ws / "listing").exists()


async def test_no_private_proc_falls_back_to_landlock_where_it_expresses_the_policy(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "EXECSERVER_BWRAP": masked_proc_bwrap(tmp_path)}
    async with start_server("execserver", env=env) as server, connect(server.url) as client:
        result = await attack(
            client,
            bash(f"echo x > {tmp_path}/w; grep -c . /proc/self/status >/dev/null && echo ran"),
            cwd=tmp_path,
            context=sandbox([ROOT_READ]),
        )
    assert "ran" in result.output
    assert "Permission denied" in result.output  # Landlock's refusal, not bwrap's EROFS
    assert not (tmp_path / "w").exists()
