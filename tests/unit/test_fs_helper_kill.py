"""execserver/sandbox/fs_helper/launch.py ``kill_helper``: a helper is killed with
its whole process group, also once its leader (bwrap) is gone, because bwrap's
child waits for bwrap on an eventfd before it binds itself to bwrap's life, and a
bwrap killed in between left it blocked for good. Real processes stand in for
bwrap and its child: a leader started as the helper is (a session of its own)
and a member of its group."""

from __future__ import annotations

import asyncio

from execserver.sandbox.fs_helper.launch import kill_helper
from tests.support.procinfo import is_zombie_or_gone, wait_until


async def _leader_and_member(script: str) -> tuple[asyncio.subprocess.Process, int]:
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", script, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    assert process.stdout is not None
    member = int((await process.stdout.readline()).decode())
    return process, member


async def test_the_helpers_group_dies_with_it() -> None:
    process, member = await _leader_and_member("sleep 60 >/dev/null & echo $!; wait")
    try:
        kill_helper(process)
        await asyncio.wait_for(process.wait(), 10)
        assert await wait_until(lambda: is_zombie_or_gone(member), 10), "the member lives on"
    finally:
        kill_helper(process)


async def test_what_the_group_holds_after_its_leader_exited_is_killed() -> None:
    # The leak's shape: the leader gone (and reaped), a member left in its group
    # (its stdout elsewhere: the pipe would keep wait() from returning).
    process, member = await _leader_and_member("sleep 60 >/dev/null & echo $!")
    try:
        assert await asyncio.wait_for(process.wait(), 10) == 0
        assert not is_zombie_or_gone(member)
        kill_helper(process)
        assert await wait_until(lambda: is_zombie_or_gone(member), 10), "the member lives on"
    finally:
        kill_helper(process)


async def test_a_group_that_is_gone_is_not_an_error() -> None:
    process, member = await _leader_and_member("echo $$")
    await asyncio.wait_for(process.wait(), 10)
    assert member == process.pid
    kill_helper(process)  # nothing left: no ProcessLookupError
