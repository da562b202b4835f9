"""execserver.aio.tasks.TaskSet: tasks are held, failures logged, aclose cancels and awaits."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from execserver.aio.tasks import TaskSet


async def test_a_spawned_task_is_held_until_it_finishes_and_named_after_its_set() -> None:
    tasks = TaskSet("conn")
    release = asyncio.Event()
    task = tasks.spawn(release.wait(), name="request-7")
    del task
    gc.collect()
    (held,) = list(tasks)
    assert held.get_name() == "conn:request-7"
    release.set()
    assert await tasks.wait(timeout=5)
    assert len(tasks) == 0


async def test_a_failure_is_logged_once_with_the_task_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = TaskSet("pool")

    async def broken() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="execserver.tasks"):
        tasks.spawn(broken(), name="reader")
        await tasks.wait(timeout=5)
    (record,) = [r for r in caplog.records if r.name == "execserver.tasks"]
    assert record.getMessage() == "task pool:reader failed"
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


async def test_a_failure_someone_awaits_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet("rpc")

    async def broken() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="execserver.tasks"):
        task = tasks.spawn(broken(), name="call", log_failures=False)
        with pytest.raises(ValueError):
            await task
    assert not [r for r in caplog.records if r.name == "execserver.tasks"]


async def test_aclose_cancels_and_waits_for_the_clean_up_of_every_task() -> None:
    tasks = TaskSet("watch")
    cleaned: list[str] = []

    async def slow_to_stop(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # clean-up that itself waits
            cleaned.append(name)

    for name in ("a", "b", "c"):
        tasks.spawn(slow_to_stop(name), name=name)
    await asyncio.sleep(0)
    await tasks.aclose()
    assert sorted(cleaned) == ["a", "b", "c"]
    assert len(tasks) == 0 and tasks.closed


async def test_a_closed_set_refuses_new_tasks_and_cancels_adopted_ones() -> None:
    tasks = TaskSet("closing")
    await tasks.aclose()
    with pytest.raises(RuntimeError, match="task set 'closing' is closed; cannot start 'late'"):
        tasks.spawn(asyncio.sleep(1), name="late")
    adopted = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
    tasks.adopt(adopted)
    with pytest.raises(asyncio.CancelledError):
        await adopted


async def test_the_owners_cancellation_waits_for_the_tasks_then_propagates() -> None:
    tasks = TaskSet("owner")
    stopped = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.05)
            stopped.set()

    tasks.spawn(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    closing = asyncio.create_task(tasks.aclose())
    await asyncio.sleep(0.01)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert stopped.is_set()


async def test_one_failing_task_does_not_cancel_its_siblings() -> None:
    # The rule that makes asyncio.TaskGroup wrong for independent requests.
    tasks = TaskSet("requests")
    sibling_done = asyncio.Event()

    async def broken() -> None:
        raise ValueError("boom")

    async def sibling() -> None:
        await asyncio.sleep(0.02)
        sibling_done.set()

    tasks.spawn(broken(), name="bad")
    tasks.spawn(sibling(), name="good")
    assert await tasks.wait(timeout=5)
    assert sibling_done.is_set()
