"""Work started inline (execserver.aio.eager.start_eagerly; the write of an answer given at
once uses it): work that needs no wait finishes before the call returns; work that
waits goes on in a task of its own, can be cancelled there, and keeps its context
variables to itself."""

from __future__ import annotations

import asyncio
import contextvars

from execserver.aio.eager import start_eagerly

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="caller")


async def test_a_request_that_needs_no_wait_finishes_inline() -> None:
    done: list[str] = []

    async def serve() -> None:
        done.append("answered")

    assert start_eagerly(asyncio.get_running_loop(), serve()) is None
    assert done == ["answered"]  # before any other task ran


async def test_a_request_that_waits_goes_on_in_its_own_task() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def serve() -> None:
        steps.append("first step")
        steps.append(await gate)
        await asyncio.sleep(0)  # a bare yield to the loop as well
        steps.append("finished")

    task = start_eagerly(asyncio.get_running_loop(), serve())
    assert task is not None and not task.done()
    assert steps == ["first step"]
    gate.set_result("woken")
    await asyncio.wait_for(task, 10)
    assert steps == ["first step", "woken", "finished"]


async def test_a_waiting_request_is_cancelled_where_it_waits() -> None:
    cleaned: list[str] = []

    async def serve() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("cleanup ran")

    task = start_eagerly(asyncio.get_running_loop(), serve())
    assert task is not None
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert cleaned == ["cleanup ran"]


async def test_a_request_that_fails_after_waiting_fails_its_task() -> None:
    async def serve() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    task = start_eagerly(asyncio.get_running_loop(), serve())
    assert task is not None
    try:
        await asyncio.wait_for(task, 10)
    except ValueError as exc:
        assert str(exc) == "boom"
    else:
        raise AssertionError("the failure was lost")


async def test_context_variables_set_by_a_request_stay_in_it() -> None:
    seen: list[str] = []

    async def serve() -> None:
        MARK.set("request")
        await asyncio.sleep(0)
        seen.append(MARK.get())

    task = start_eagerly(asyncio.get_running_loop(), serve())
    assert MARK.get() == "caller"
    assert task is not None
    await asyncio.wait_for(task, 10)
    assert seen == ["request"]
    assert MARK.get() == "caller"
