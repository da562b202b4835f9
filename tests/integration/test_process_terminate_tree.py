"""process/terminate ends the whole tree, setsid and double-fork escapees included,
on both transports (the reference kills only the child's process group)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from execserver.client import ExecServerClient
from execserver.containment.host import probe_host
from tests.support.procinfo import live_descendants
from tests.support.rpc import poll_until
from tests.support.servers import PROJECT_ROOT, execserver_command, start_server

# A setsid grandchild next to a foreground sleep, a double-forked setsid escapee
# whose parent exits at once (re-parented to the daemon, the subreaper), and a
# setsid escapee with a cleared environment (only its parentage ties it to the
# tree). Every pid is printed so the test can watch it.
TREE_SCRIPT = (
    "setsid sleep 300 & echo $!; "
    "(setsid sleep 300 & echo $!); "
    "echo $$; "
    "env -i /usr/bin/setsid sleep 300 & echo $!; "
    "echo ready; sleep 300"
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _live_descendants(server_pid: int) -> set[int]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return {child.pid for child in live_descendants(server_pid)}
    return set()


@contextlib.asynccontextmanager
async def _client(transport: str) -> AsyncIterator[ExecServerClient]:
    if transport.startswith("websocket"):
        # "websocket+cgroup": the tree kill goes through the limits' cgroup.
        flags = ["--process-pids-max", "512"] if transport.endswith("+cgroup") else []
        async with start_server("execserver", flags) as server:
            client = await ExecServerClient.connect(server.url)
            try:
                yield client
            finally:
                await client.close()
    else:
        # No start-up sandbox probe: its sandboxes would count as the daemon's children.
        env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "EXECSERVER_STARTUP_PROBE": "0"}
        client = await ExecServerClient.spawn(execserver_command(["--listen", "stdio"]), env=env)
        try:
            yield client
        finally:
            await client.close()


def _cgroups_delegated() -> bool:
    host = probe_host("/sys/fs/cgroup")
    return host.v2_usable({"pids"}) or host.v1_usable({"pids"})


@pytest.mark.parametrize(
    "transport",
    [
        "websocket",
        "stdio",
        pytest.param(
            "websocket+cgroup",
            marks=pytest.mark.skipif(not _cgroups_delegated(), reason="no pids cgroup here"),
        ),
    ],
)
async def test_terminate_kills_setsid_and_double_fork_escapees(
    transport: str, tmp_path: Path
) -> None:
    async with _client(transport) as client:
        proc = await client.start_process(
            ["sh", "-c", TREE_SCRIPT], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}
        )
        output = b""
        async for event in proc:
            output += getattr(event, "data", b"")
            if b"ready\n" in output:
                break
        grandchild, double_forked, shell, bare = (int(x) for x in output.split()[:4])
        server_pid = psutil.Process(shell).ppid()
        try:
            # $! is printed right after fork: wait until both really left the group.
            assert await poll_until(
                lambda: all(
                    _alive(p) and os.getsid(p) == p for p in (grandchild, double_forked, bare)
                )
            )
            assert await poll_until(lambda: psutil.Process(double_forked).ppid() == server_pid)
            before = _live_descendants(server_pid)
            assert {grandchild, double_forked, shell, bare} <= before
            assert await proc.terminate() is True
            await asyncio.wait_for(proc.wait_closed(), 30)
            exit_status = await proc.wait()
            assert exit_status.exit_code == 137  # unchanged: SIGKILL through pipes
            # Within 1 s of `closed`, nothing the process started is alive.
            await poll_until(lambda: not _live_descendants(server_pid), timeout=1.0)
            assert _live_descendants(server_pid) == set()
            assert not any(_alive(p) for p in before)
        finally:
            for pid in (grandchild, double_forked, bare):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def test_terminate_after_a_natural_exit_leaves_background_jobs_running(
    tmp_path: Path,
) -> None:
    """`server &` outliving its shell keeps running (as the reference); it dies with
    the session, not with a terminate of the already-exited process."""
    async with _client("websocket") as client:
        proc = await client.start_process(
            ["sh", "-c", "setsid sleep 300 & echo $!"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}
        )
        result = b""
        async for event in proc:
            result += getattr(event, "data", b"")
        background = int(result.split()[0])
        try:
            assert (await proc.wait()).exit_code == 0
            assert await proc.terminate() is False
            await asyncio.sleep(0.3)  # give a wrong kill the time to land
            assert _alive(background)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(background, signal.SIGKILL)
