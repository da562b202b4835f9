"""Two daemons on one host, one workspace: a protected name (``ws/.git``) that does
not exist is covered in each sandbox by a mount point the daemon makes on the host.
When the first daemon's sandbox ends, it removes its empty mount point, and Linux
lets ``rmdir`` remove a directory that is a mount point in another mount namespace,
detaching that mount there: the second daemon's still running command would then
find ``ws/.git`` gone and could create ``.git/hooks`` on the host. So a daemon never
removes a mount point that another daemon's sandbox holds (execserver/sandbox/mounts.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.attacks import ROOT_READ, attack, bash, entry, sandbox
from tests.support.procinfo import wait_until
from tests.support.rpc import connect
from tests.support.servers import start_server


async def test_a_protected_name_stays_protected_when_another_daemons_sandbox_ends(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    context = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    released = tmp_path / "first-done"
    async with (
        start_server("execserver") as first,
        start_server("execserver") as second,
        connect(first.url) as a,
        connect(second.url) as b,
    ):
        # The first daemon's command holds ws/.git's mount point until told to end.
        short = asyncio.create_task(
            attack(
                a,
                bash(f"while [ ! -e {tmp_path}/go ]; do sleep 0.05; done; echo ended"),
                cwd=ws,
                context=context,
            )
        )
        assert await wait_until(lambda: (ws / ".git").exists(), 30)
        # The second daemon's command starts while that mount point exists, waits
        # for the first sandbox to end, then tries to write under .git.
        script = (
            f"while [ ! -e {released} ]; do sleep 0.05; done; "
            "mkdir -p .git/hooks 2>/dev/null && echo pwned > .git/hooks/pre-commit; "
            "echo wrote=$?"
        )
        long = asyncio.create_task(attack(b, bash(script), cwd=ws, context=context))
        await asyncio.sleep(1.0)  # the second sandbox is up
        (tmp_path / "go").touch()
        first_result = await short
        assert "ended" in first_result.output, first_result.output
        await asyncio.sleep(0.5)  # the first daemon has released its mount point
        released.touch()
        second_result = await long
    assert second_result.marker("wrote") not in ("", "0"), second_result.output
    assert not (ws / ".git" / "hooks").exists()
