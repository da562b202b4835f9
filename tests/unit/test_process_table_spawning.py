"""ProcessTable.start with the spawn in a thread (the event loop runs meanwhile):
the id stays taken while its child starts, and a session closed meanwhile still
kills that child."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from execserver.processes.supervisor import Supervisor
from execserver.processes.table import ProcessTable
from execserver.sandbox.plan import LaunchPlan
from execserver.wire.errors import RpcError
from tests.support.procinfo import wait_until


@pytest.fixture
async def table() -> AsyncIterator[tuple[ProcessTable, Supervisor]]:
    supervisor = Supervisor()

    class Session:
        id = "s"
        attached = True

        async def notify(self, method: str, params: object) -> None:
            pass

        async def notify_many(self, notes: object) -> None:
            pass

    processes = ProcessTable(
        Session(),  # type: ignore[arg-type]
        supervisor,
        retention_s=60,
        retained_bytes=1 << 20,
        drain_timeout_s=5,
        limits=None,
    )
    yield processes, supervisor
    await processes.aclose()
    await supervisor.aclose()


def plan(script: str) -> LaunchPlan:
    return LaunchPlan(
        program="/bin/sh",
        argv=["sh", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        cwd="/tmp",
        tty=False,
        pipe_stdin=False,
    )


async def test_an_id_stays_taken_while_its_child_is_being_spawned(
    table: tuple[ProcessTable, Supervisor],
) -> None:
    processes, _ = table
    first, second = await asyncio.gather(
        processes.start("same", plan("sleep 30"), None),
        processes.start("same", plan("sleep 30"), None),
        return_exceptions=True,
    )
    assert not isinstance(first, BaseException)
    assert isinstance(second, RpcError) and second.message == "process same already exists"
    assert processes.get("same") is first


async def test_a_session_closed_while_a_child_starts_still_kills_it(
    table: tuple[ProcessTable, Supervisor],
) -> None:
    processes, _ = table
    starting = asyncio.ensure_future(processes.start("late", plan("sleep 30"), None))
    await asyncio.sleep(0)  # the spawn is in its thread
    await processes.aclose()
    proc = await starting
    assert proc.pid > 0
    assert await wait_until(lambda: proc.exited, 10), "the child outlived its session"
    assert proc.exit_code == 137
