"""Waiting for output within a call's yield time.

The wait ends at the deadline or when the process exits, whichever comes
first; time spent paused (a prompt waiting for the user) pushes the deadline
out. After an exit it waits a little longer (at most 50 ms) for ``Closed`` so
output written just before the exit is not split across calls.
"""

from __future__ import annotations

import asyncio
import time

from execserver.aio.tasks import TaskSet
from execserver.core.unified_exec.pause import YieldPause
from execserver.core.unified_exec.process import UnifiedExecProcess

__all__ = ["POST_EXIT_CLOSE_WAIT", "collect_until"]

POST_EXIT_CLOSE_WAIT = 0.050


async def _exit_or_resume(process: UnifiedExecProcess, pause: YieldPause) -> None:
    """While paused, only an exit or the end of the pause matters."""
    # Both waiters end with this call: whichever is left is cancelled and awaited.
    waiters = TaskSet("unified-exec-pause")
    resumed = waiters.spawn(pause.wait_resumed(), name="resumed")
    exited = waiters.spawn(process.wait_exit(None), name="exited")
    try:
        await asyncio.wait((resumed, exited), return_when=asyncio.FIRST_COMPLETED)
    finally:
        await waiters.aclose()


async def collect_until(
    process: UnifiedExecProcess, deadline: float, pause: YieldPause | None = None
) -> None:
    """``deadline`` is a ``time.monotonic()`` value."""
    paused_at_start = pause.paused_seconds() if pause is not None else 0.0
    while not process.exited:
        if pause is not None and pause.active:
            await _exit_or_resume(process, pause)
            continue
        extra = pause.paused_seconds() - paused_at_start if pause is not None else 0.0
        remaining = deadline + extra - time.monotonic()
        if remaining <= 0:
            return
        await process.wait_change(remaining)
    await process.wait_closed(POST_EXIT_CLOSE_WAIT)
