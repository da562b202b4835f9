"""Waiting for output within a call's yield time (core-client.md §5.4).

The wait ends at the deadline or when the process exits, whichever comes
first; after an exit it waits a little longer (at most 50 ms) for ``Closed``
so output written just before the exit is not split across calls.
"""

from __future__ import annotations

import time

from execserver.core.unified_exec.process import UnifiedExecProcess

__all__ = ["POST_EXIT_CLOSE_WAIT", "collect_until"]

POST_EXIT_CLOSE_WAIT = 0.050


async def collect_until(process: UnifiedExecProcess, deadline: float) -> None:
    """``deadline`` is a ``time.monotonic()`` value."""
    while not process.exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await process.wait_change(remaining)
    await process.wait_closed(POST_EXIT_CLOSE_WAIT)
