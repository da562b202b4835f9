"""The fs worker threads (execserver/fs/worker_pool.py), on real threads and a real loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest

from execserver.fs.worker_pool import WorkerPool


async def test_a_result_and_an_exception_reach_the_caller() -> None:
    pool = WorkerPool(max_workers=2, name="test-pool")
    loop = asyncio.get_running_loop()
    names: list[str] = []

    def work(a: int, b: int) -> int:
        names.append(threading.current_thread().name)
        return a + b

    assert await pool.submit(loop, work, (2, 3)) == 5
    assert names[0].startswith("test-pool_") and names[0] != threading.main_thread().name

    def fail() -> None:
        raise FileNotFoundError(2, "gone", "/nowhere")

    with pytest.raises(FileNotFoundError) as raised:
        await pool.submit(loop, fail, ())
    assert raised.value.filename == "/nowhere"


async def test_it_grows_only_when_no_worker_is_idle_and_never_past_its_cap() -> None:
    pool = WorkerPool(max_workers=3, name="test-pool")
    loop = asyncio.get_running_loop()
    for value in range(5):  # one at a time: the one worker is idle for each next call
        assert await pool.submit(loop, int, (value,)) == value
    assert pool.thread_count == 1

    release = threading.Event()
    running = threading.Semaphore(0)

    def hold() -> str:
        running.release()
        release.wait(10)
        return threading.current_thread().name

    calls = [pool.submit(loop, hold, ()) for _ in range(5)]
    for _ in range(3):  # three start; the other two wait for a free worker
        assert await asyncio.to_thread(running.acquire, True, 10)
    assert pool.thread_count == 3
    assert not await asyncio.to_thread(running.acquire, True, 0.2)
    release.set()
    names = await asyncio.gather(*calls)
    assert len(set(names)) == 3 and pool.thread_count == 3


async def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    pool = WorkerPool(max_workers=1, name="test-pool")
    loop = asyncio.get_running_loop()
    release = threading.Event()
    ran: list[str] = []
    busy = pool.submit(loop, release.wait, (10,))
    queued = pool.submit(loop, ran.append, ("queued",))
    queued.cancel()
    release.set()
    assert await busy is True
    await pool.submit(loop, ran.append, ("after",))
    assert ran == ["after"]


async def test_a_call_cancelled_while_it_runs_completes_and_its_result_is_dropped() -> None:
    pool = WorkerPool(max_workers=1, name="test-pool")
    loop = asyncio.get_running_loop()
    started = threading.Event()
    release = threading.Event()
    finished: list[bool] = []

    def slow() -> str:
        started.set()
        release.wait(10)
        finished.append(True)
        return "late"

    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    call = pool.submit(loop, slow, ())
    assert await asyncio.to_thread(started.wait, 10)
    call.cancel()
    release.set()
    # The next call on the one worker runs after the slow one has delivered.
    assert await pool.submit(loop, len, ("abc",)) == 3
    await asyncio.sleep(0)  # the dropped delivery's callback has run by now
    assert finished == [True] and call.cancelled() and errors == []


async def test_a_worker_keeps_no_reference_to_a_delivered_result() -> None:
    pool = WorkerPool(max_workers=1, name="test-pool")
    loop = asyncio.get_running_loop()

    class Payload:
        pass

    result = await pool.submit(loop, Payload, ())
    ref = weakref.ref(result)
    del result
    for _ in range(200):  # until the worker is back waiting for its next job
        gc.collect()
        if ref() is None:
            break
        await asyncio.sleep(0.01)
    assert ref() is None


def test_a_delivery_to_a_closed_loop_does_not_kill_the_worker() -> None:
    pool = WorkerPool(max_workers=1, name="test-pool")
    release = threading.Event()
    old_loop = asyncio.new_event_loop()
    pool.submit(old_loop, release.wait, (10,))  # nobody will wait for it
    old_loop.close()
    release.set()

    async def later() -> int:
        return await pool.submit(asyncio.get_running_loop(), len, ("four",))

    assert asyncio.run(later()) == 4
    assert pool.thread_count == 1
