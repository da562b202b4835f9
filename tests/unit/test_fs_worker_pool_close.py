"""``WorkerPool.close`` (execserver/fs/worker_pool.py): the workers it started stop
and are joined, on real threads and a real loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from execserver.fs.worker_pool import WorkerPool


def _pool_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{name}_")]


async def test_close_joins_every_worker_after_the_queued_calls_ran() -> None:
    pool = WorkerPool(max_workers=3, name="close-pool")
    loop = asyncio.get_running_loop()
    release = threading.Event()
    calls = [pool.submit(loop, release.wait, (10,)) for _ in range(3)]
    assert len(_pool_threads("close-pool")) == 3
    release.set()
    assert await asyncio.to_thread(pool.close, 10)
    assert await asyncio.gather(*calls) == [True, True, True]
    assert _pool_threads("close-pool") == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(loop, int, ())


async def test_close_gives_up_on_a_stuck_call_after_its_timeout() -> None:
    pool = WorkerPool(max_workers=1, name="stuck-pool")
    loop = asyncio.get_running_loop()
    release = threading.Event()
    call = pool.submit(loop, release.wait, (10,))
    assert not await asyncio.to_thread(pool.close, 0.2)  # the call still runs
    release.set()
    assert await call is True
    assert await asyncio.to_thread(pool.close, 10)  # a second close joins what is left
    assert _pool_threads("stuck-pool") == []
