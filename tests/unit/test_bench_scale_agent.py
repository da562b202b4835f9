"""The scale benchmark's agents leave their warm-up out of step (benchmarks/scale_agent.py
``Agent._stagger``): agents that start together would otherwise keep taking the same
step at the same moment for the whole level. The operations here are stand-ins (a
fixed pause each): what is tested is the agents' own timing, not a server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from benchmarks.scale_agent import OPERATIONS, Agent, Window

STEP_S = 0.05
AGENTS = 30


class SteppingAgent(Agent):
    """An agent whose every operation is a pause of STEP_S."""

    def operations(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [(name, self._step) for name in OPERATIONS]

    async def _step(self) -> None:
        await asyncio.sleep(STEP_S)


def _agents(tmp_path: Path) -> list[SteppingAgent]:
    return [
        SteppingAgent("ws://127.0.0.1:9", i, tmp_path / f"a{i}", tmp_path / "secret")
        for i in range(AGENTS)
    ]


def _close(window: Window) -> None:
    """Close the window now (opening it first if it never was)."""
    now = time.perf_counter()
    if window.start is None:
        window.start = now
    window.end = now


async def _warm_times(
    agents: list[SteppingAgent], window: Window
) -> tuple[list[float], list[dict[str, int]]]:
    """When the agents, started together, each became warm (seconds after the
    start), and what each had recorded then (operations by name). Then they are
    ended as a level ends them: the window closes and each stops after a pass."""
    start = time.perf_counter()
    warmed = [asyncio.Event() for _ in agents]
    runs = [
        asyncio.ensure_future(a.run(window, 0.0, w)) for a, w in zip(agents, warmed, strict=True)
    ]
    times: list[float] = []
    recorded: list[dict[str, int]] = []

    async def note(agent: SteppingAgent, event: asyncio.Event) -> None:
        await event.wait()
        times.append(time.perf_counter() - start)
        recorded.append({name: len(v) for name, v in agent.stats.latencies.items()})

    try:
        async with asyncio.timeout(30):
            await asyncio.gather(*(note(a, w) for a, w in zip(agents, warmed, strict=True)))
        _close(window)
        async with asyncio.timeout(30):
            await asyncio.gather(*runs)
    finally:
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
    return times, recorded


@pytest.mark.asyncio
async def test_agents_started_together_are_spread_over_a_pass_when_warm(tmp_path: Path) -> None:
    agents = _agents(tmp_path)
    times, recorded = await _warm_times(agents, Window())
    one_pass = len(OPERATIONS) * STEP_S
    # Each waits a random part of its first pass after it: over 30 agents the
    # spread is most of a pass; in lock-step it would be the loop's jitter.
    assert max(times) - min(times) > 0.4 * one_pass, sorted(times)
    assert all(t >= one_pass for t in times), sorted(times)
    # The warm-up is not measured.
    assert all(not any(counts.values()) for counts in recorded), recorded


@pytest.mark.asyncio
async def test_no_pause_once_the_window_is_open(tmp_path: Path) -> None:
    """A warm-up cut short by its bound (the window already open) adds no pause to
    what is measured."""
    window = Window()
    window.open(60.0)
    agents = _agents(tmp_path)
    times, recorded = await _warm_times(agents, window)
    one_pass = len(OPERATIONS) * STEP_S
    assert max(times) - min(times) < 0.4 * one_pass, sorted(times)
    # Inside the window the first pass is measured.
    assert all(set(counts.values()) == {1} for counts in recorded), recorded


class FailingAgent(Agent):
    """An agent whose ``poll`` fails and whose ``tty`` never ends (with ``hang``),
    each saying what it waits for as the real operations do."""

    hang = False

    def operations(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        special: dict[str, Callable[[], Awaitable[None]]] = {
            "poll": self._fail,
            "tty": self._hang,
        }
        return [(name, special.get(name, self._step)) for name in OPERATIONS]

    async def _step(self) -> None:
        await asyncio.sleep(0)

    async def _fail(self) -> None:
        self.waiting_for = "process/read after 7"
        raise RuntimeError("the long command ended")

    async def _hang(self) -> None:
        self.waiting_for = "the echo of ping-1"
        if self.hang:
            await asyncio.Event().wait()


@pytest.mark.asyncio
async def test_failures_and_stuck_operations_of_the_warm_up_are_counted_not_dropped(
    tmp_path: Path,
) -> None:
    """An operation that started before the window is in no figure, but its failure
    is counted (``warmup_errors``, named in ``first_errors``) and, when the level's
    time runs out with it still under way, what it waited for is kept
    (``stuck_in_warmup``): a hang in the warm-up was otherwise seen only as a
    level that ran to its grace's end."""
    agent = FailingAgent("ws://127.0.0.1:9", 0, tmp_path / "a0", tmp_path / "secret")
    agent.hang = True
    window = Window()  # never opened: the whole pass is warm-up
    run = asyncio.ensure_future(agent.run(window, 0.0))
    await asyncio.sleep(0.1)
    agent.censor(time.perf_counter())
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    assert agent.stats.warmup_errors == 1
    assert sum(agent.stats.errors.values()) == 0
    assert agent.stats.first_errors == [
        "poll (warm-up): RuntimeError: the long command ended (waiting for process/read after 7)"
    ]
    assert len(agent.stats.stuck_in_warmup) == 1
    assert agent.stats.stuck_in_warmup[0].startswith("tty: ")
    assert agent.stats.stuck_in_warmup[0].endswith("waiting for the echo of ping-1")
    assert not any(agent.stats.unfinished.values())
