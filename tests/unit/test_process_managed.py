"""ManagedProcess in-process with a fake session: event order, backpressure, waiters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from execserver.processes.output import CHUNKS_PER_READ, PAUSE_BACKLOG
from execserver.processes.supervisor import Supervisor
from execserver.processes.table import ProcessTable
from execserver.sandbox.plan import LaunchPlan


class FakeSession:
    """Collects notifications; ``gate`` (when set) blocks notify like a full queue."""

    id = "test"

    def __init__(self) -> None:
        self.attached = True
        self.notes: list[tuple[str, Any]] = []
        self.gate: asyncio.Event | None = None

    async def notify(self, method: str, params: Any) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.notes.append((method, params))

    async def notify_many(self, notes: Sequence[tuple[str, Any]]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.notes.extend(notes)


@pytest.fixture
async def table() -> AsyncIterator[tuple[ProcessTable, FakeSession]]:
    supervisor = Supervisor()
    session = FakeSession()
    t = ProcessTable(
        session,  # type: ignore[arg-type]
        supervisor,
        retention_s=60,
        retained_bytes=1 << 20,
        drain_timeout_s=5,
        limits=None,
    )
    yield t, session
    await t.aclose()
    await supervisor.aclose()


def _plan(script: str) -> LaunchPlan:
    return LaunchPlan(
        program="/bin/bash",
        argv=["bash", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        cwd="/tmp",
        tty=False,
        pipe_stdin=False,
    )


async def test_events_are_sent_in_seq_order_and_closed_last(
    table: tuple[ProcessTable, FakeSession],
) -> None:
    t, session = table
    proc = await t.start("p", _plan("echo a; echo b >&2; exit 7"), None)
    await proc.wait_closed(10)
    await asyncio.wait_for(proc._sender, 10)
    seqs = [params.seq for _, params in session.notes]
    assert seqs == list(range(1, len(seqs) + 1))
    assert session.notes[-1][0] == "process/closed"
    assert session.notes[-2][0] == "process/exited"
    assert session.notes[-2][1].exit_code == 7


async def test_a_blocked_connection_pauses_the_pumps_without_losing_output(
    table: tuple[ProcessTable, FakeSession],
) -> None:
    t, session = table
    session.gate = asyncio.Event()
    size = 8 * 1024 * 1024
    proc = await t.start("big", _plan(f"head -c {size} /dev/zero"), None)
    # While notify is blocked the log never runs ahead of the sender by more than
    # the pause threshold (plus one read), so nothing unsent can be evicted.
    for _ in range(50):
        await asyncio.sleep(0.01)
        assert proc.log.last_seq - proc._sent <= PAUSE_BACKLOG + CHUNKS_PER_READ
    assert not proc.exited  # the child is blocked on its full pipe
    session.gate.set()
    await proc.wait_closed(30)
    await asyncio.wait_for(proc._sender, 30)
    total = sum(len(p.chunk) for m, p in session.notes if m == "process/output")
    assert total == size


async def test_timed_out_long_polls_do_not_pile_up(
    table: tuple[ProcessTable, FakeSession],
) -> None:
    t, _ = table
    proc = await t.start("quiet", _plan("sleep 30"), None)
    for _ in range(200):
        await proc.wait_newer(0, 0.001)
    assert len(proc._waiters) <= 1  # only the sender's own wait
    assert proc.terminate() is True
    await proc.wait_closed(10)
    assert proc.exit_code == 137
