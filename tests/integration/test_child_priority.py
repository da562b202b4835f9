"""What the daemon starts runs --child-nice steps below it (default 5): commands on
pipes and on a terminal, sandboxed or not, kept ones (--state-dir), commands in
cgroups of their own (--process-*-max) or in a tenant's group, and the sandboxed
fs helpers; the daemon's own event loop keeps its priority (execserver/priority.py
says why)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from execserver.config import DEFAULT_CHILD_NICE
from tests.support.rpc import RpcClient, connect, uri
from tests.support.sandbox import ROOT_READ, entry, managed
from tests.support.servers import start_server
from tests.support.state_dir import end_keepers, keepers, state_daemon
from tests.support.tenants import TOKEN_B, output_of, start, tenant_host

# Field 19 of /proc/PID/stat: the 17th after the command name's closing parenthesis.
NICE_AFTER_NAME = 16


def _nice_of(stat: str) -> int:
    return int(stat.rsplit(")", 1)[1].split()[NICE_AFTER_NAME])


def _own_nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return _nice_of(stat.read())


def _box(workspace: Path) -> dict[str, Any]:
    return {
        "permissions": managed([ROOT_READ, entry(workspace, "write")]),
        "windowsSandboxLevel": "disabled",
    }


async def _command_nice(client: RpcClient, name: str, **extra: Any) -> int:
    """The nice value a command started with ``extra`` sees for itself."""
    events = await client.run(name, ["cat", "/proc/self/stat"], **extra)
    return _nice_of(events.output().decode())


async def _commands_nice(client: RpcClient, workspace: Path) -> set[int]:
    return {
        await _command_nice(client, "plain"),
        await _command_nice(client, "tty", tty=True),
        await _command_nice(client, "boxed", cwd=uri(workspace), sandbox=_box(workspace)),
        await _command_nice(
            client, "boxed-tty", tty=True, cwd=uri(workspace), sandbox=_box(workspace)
        ),
    }


def _helpers_of(daemon: int) -> list[psutil.Process]:
    """The fs helper programs under ``daemon`` (not the bwrap processes around
    them, which start at the daemon's priority and only wait)."""
    return [
        child
        for child in psutil.Process(daemon).children(recursive=True)
        if child.name() != "bwrap" and "execserver.fs.sandboxed.program" in child.cmdline()
    ]


@pytest.mark.parametrize("steps", [None, 3, 0], ids=["default", "three", "off"])
async def test_commands_and_fs_helpers_run_the_given_steps_below_the_daemon(
    steps: int | None, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f").write_text("x")
    flags = [] if steps is None else ["--child-nice", str(steps)]
    expected_steps = DEFAULT_CHILD_NICE if steps is None else steps
    async with start_server("execserver", flags) as server, connect(server.url) as client:
        daemon = server.process.pid
        base = _own_nice(daemon)
        expected = min(base + expected_steps, 19)
        assert await _commands_nice(client, workspace) == {expected}
        # A sandboxed read whose policy denies a path goes through a helper.
        box = {
            "permissions": managed(
                [ROOT_READ, entry(workspace, "write"), entry(tmp_path / "secret", "deny")]
            ),
            "windowsSandboxLevel": "disabled",
        }
        await client.ok("fs/readFile", {"path": uri(workspace / "f"), "sandbox": box})
        helpers = _helpers_of(daemon)
        assert helpers, "no fs helper found"
        assert {helper.nice() for helper in helpers} == {expected}
        # The daemon's own event loop (its main thread) keeps its priority.
        assert _own_nice(daemon) == base


async def test_kept_commands_and_their_keepers_run_below_the_daemon_too(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state = tmp_path / "state"
    try:
        async with state_daemon(state, ttl=60) as server, connect(server.url) as client:
            base = _own_nice(server.process.pid)
            expected = min(base + DEFAULT_CHILD_NICE, 19)
            assert await _commands_nice(client, workspace) == {expected}
            kept = keepers(state)
            assert kept, "the commands were not kept"
            assert {keeper.nice() for keeper in kept} == {expected}
            assert _own_nice(server.process.pid) == base
    finally:
        await end_keepers(state)


async def test_commands_in_cgroups_of_their_own_run_below_the_daemon_too(
    tmp_path: Path,
) -> None:
    """--process-*-max: each command in a cgroup of its own, started through
    exec-as (or subprocess's pre-exec hook) from the spawn threads."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with (
        start_server("execserver", ["--process-pids-max", "200"]) as server,
        connect(server.url) as client,
    ):
        base = _own_nice(server.process.pid)
        assert await _commands_nice(client, workspace) == {min(base + DEFAULT_CHILD_NICE, 19)}
        assert _own_nice(server.process.pid) == base


@pytest.mark.parametrize("per_process", [False, True], ids=["group-leaf", "own-cgroup"])
async def test_a_tenants_commands_in_its_cgroup_run_below_the_daemon_too(
    per_process: bool,
) -> None:
    """A tenant with a quota: its commands go into its group's shared leaf, or, with
    per-process limits, into cgroups of their own inside the group; either way as
    its own account and the steps below the daemon."""
    extra = ("--process-pids-max", "200") if per_process else ()
    with tenant_host() as host:
        host.write_tenants(alice={"sandbox": "optional"}, bob={"pids_max": 50})
        async with host.serve(*extra) as server, connect(server.url, token=TOKEN_B) as bob:
            base = _own_nice(server.process.pid)
            ok, error = await start(bob, "stat", ["cat", "/proc/self/stat"], host.b)
            assert ok, error
            text, code = await output_of(bob, "stat")
            assert code == 0
            assert _nice_of(text) == min(base + DEFAULT_CHILD_NICE, 19)
            assert _own_nice(server.process.pid) == base


@pytest.mark.parametrize("value", ["20", "-1", "five"])
async def test_a_child_nice_out_of_range_is_refused_in_one_line(value: str) -> None:
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "execserver", "serve", "--child-nice", value],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EXECSERVER_STARTUP_PROBE": "0"},
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert f"'{value}' is not a number of nice steps from 0 to 19" in run.stderr
