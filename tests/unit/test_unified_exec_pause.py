"""Yield pauses add their time to the deadline."""

from __future__ import annotations

import asyncio
import time

from execserver.core.unified_exec.pause import YieldPause


def _active(pause: YieldPause) -> bool:
    # A call, so that mypy does not narrow ``active`` across the with-blocks.
    return pause.active


def test_pause_accumulates_only_while_active() -> None:
    pause = YieldPause()
    assert not _active(pause) and pause.paused_seconds() == 0.0
    before = time.monotonic()
    with pause.paused():
        with pause.paused():  # nested pauses count once
            assert _active(pause)
        assert _active(pause)
        time.sleep(0.01)
    elapsed = time.monotonic() - before
    assert not _active(pause)
    total = pause.paused_seconds()
    assert 0.0 < total <= elapsed
    assert pause.paused_seconds() == total


async def test_wait_resumed_blocks_only_while_paused() -> None:
    pause = YieldPause()
    await pause.wait_resumed()
    with pause.paused():
        waiter = asyncio.create_task(pause.wait_resumed())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiter.done()
    await waiter
