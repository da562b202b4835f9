"""FairGate (execserver/kernel/fair_gate.py): a bound on concurrent holders whose
queue serves callers in turn, so one caller's flood never goes ahead of another's
single request."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from execserver.kernel.fair_gate import FairGate


async def _hold(
    gate: FairGate, key: Hashable, name: str, order: list[str], go: asyncio.Event
) -> None:
    async with gate.slot(key):
        order.append(name)
        await go.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_no_more_than_capacity_hold_at_once() -> None:
    gate = FairGate(3)
    order: list[str] = []
    go = asyncio.Event()
    tasks = [asyncio.create_task(_hold(gate, "a", f"a{i}", order, go)) for i in range(7)]
    await _settle()
    assert (gate.held, gate.waiting, order) == (3, 4, ["a0", "a1", "a2"])
    go.set()
    await asyncio.gather(*tasks)
    assert (gate.held, gate.waiting, len(order)) == (0, 0, 7)


async def test_a_flooding_caller_waits_behind_its_own_requests_not_in_front_of_others() -> None:
    gate = FairGate(1)
    order: list[str] = []
    release = [asyncio.Event() for _ in range(8)]
    a = [asyncio.create_task(_hold(gate, "a", f"a{i}", order, release[i])) for i in range(5)]
    await _settle()
    b = [asyncio.create_task(_hold(gate, "b", f"b{i}", order, release[5 + i])) for i in range(2)]
    c = asyncio.create_task(_hold(gate, "c", "c0", order, release[7]))
    await _settle()
    for event in release:  # each holder in turn lets go
        event.set()
        await _settle()
    await asyncio.gather(*a, *b, c)
    # a0 held the slot; then one each, in the order the callers first queued.
    assert order == ["a0", "a1", "b0", "c0", "a2", "b1", "a3", "a4"]


async def test_a_waiter_that_gives_up_leaves_no_trace() -> None:
    gate = FairGate(1)
    order: list[str] = []
    go = asyncio.Event()
    holder = asyncio.create_task(_hold(gate, "a", "a0", order, go))
    quitter = asyncio.create_task(_hold(gate, "b", "b0", order, go))
    after = asyncio.create_task(_hold(gate, "c", "c0", order, go))
    await _settle()
    assert gate.waiting == 2
    quitter.cancel()
    await _settle()
    assert gate.waiting == 1
    go.set()
    await asyncio.gather(holder, after)
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert (order, gate.held, gate.waiting) == (["a0", "c0"], 0, 0)


async def test_a_waiter_cancelled_after_its_slot_was_granted_hands_it_on() -> None:
    gate = FairGate(1)
    order: list[str] = []
    go = asyncio.Event()
    go.set()
    async with gate.slot("a"):
        granted_then_cancelled = asyncio.create_task(_hold(gate, "b", "b0", order, go))
        last = asyncio.create_task(_hold(gate, "c", "c0", order, go))
        await _settle()
        assert gate.waiting == 2
    # Leaving the block granted b0 its slot; b0 has not run yet when it is cancelled.
    granted_then_cancelled.cancel()
    await asyncio.wait_for(last, 5)  # a slot lost with b0 would hold c0 forever
    with pytest.raises(asyncio.CancelledError):
        await granted_then_cancelled
    assert (order, gate.held, gate.waiting) == (["c0"], 0, 0)


def test_a_gate_needs_one_slot_at_least() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1, not 0"):
        FairGate(0)
