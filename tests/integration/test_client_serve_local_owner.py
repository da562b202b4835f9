"""A ``serve_local()`` daemon dies with the process that started it, however that
process ends: SIGKILL gives the owner no chance to stop it, so the daemon
watches a pipe only its owner holds and exits (with its processes) at EOF."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest

from tests.support.procinfo import processes_with
from tests.support.servers import PROJECT_ROOT

OWNER = textwrap.dedent(
    """
    import asyncio, sys
    import execserver

    async def main() -> None:
        async with execserver.serve_local() as client:
            proc = await client.start_process(["sleep", sys.argv[1]], cwd="/tmp")
            kids = [c.pid for c in __import__("psutil").Process().children()]
            print(" ".join(map(str, kids)), flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
    """
)

SYNC_OWNER = textwrap.dedent(
    """
    import sys, time
    from execserver.client import sync

    with sync.serve_local() as client:
        client.start_process(["sleep", sys.argv[1]], cwd="/tmp")
        kids = [c.pid for c in __import__("psutil").Process().children()]
        print(" ".join(map(str, kids)), flush=True)
        time.sleep(3600)
    """
)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def eventually(predicate: object) -> bool:
    assert callable(predicate)
    for _ in range(300):  # bounded polling, not a timing assertion
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return bool(predicate())


@pytest.mark.parametrize("script", [OWNER, SYNC_OWNER], ids=["async", "sync"])
async def test_the_daemon_and_its_processes_die_when_the_owner_is_sigkilled(
    script: str, tmp_path: Path
) -> None:
    mark = f"{400 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 1000:03d}"
    owner_file = tmp_path / "owner.py"
    owner_file.write_text(script)
    owner = await asyncio.create_subprocess_exec(
        sys.executable, str(owner_file), mark,
        stdout=asyncio.subprocess.PIPE, cwd=str(PROJECT_ROOT),
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip
    daemons: list[int] = []
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(owner.stdout.readline(), 60)
        daemons = [int(pid) for pid in line.split()]
        assert daemons and all(alive(pid) for pid in daemons)
        assert processes_with(mark)
        owner.send_signal(signal.SIGKILL)
        await owner.wait()
        assert await eventually(lambda: not any(alive(pid) for pid in daemons)), (
            "the private daemon outlived its SIGKILLed owner"
        )
        assert await eventually(lambda: not processes_with(mark)), (
            "the daemon's process outlived it"
        )
    finally:
        if owner.returncode is None:
            owner.kill()
            await owner.wait()
        for pid in daemons:  # only after a failure: the test's own leftovers
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        for proc in processes_with(mark):
            proc.kill()
