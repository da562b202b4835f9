"""ProcessTable.start with the spawn in a thread (the event loop runs meanwhile):
the id stays taken while its child starts, and a session closed meanwhile still
kills that child, and a child started meanwhile is not taken for another tree's
escapee, and the child's /proc stat is read in the thread too."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import uvloop

from execserver.processes.supervisor import Supervisor
from execserver.processes.table import ProcessTable
from execserver.processes.tree import read_stat
from execserver.sandbox.plan import LaunchPlan
from execserver.wire.errors import RpcError
from tests.support.procinfo import wait_until


class RecordingSession:
    """The session a table notifies: what it was sent, in order."""

    id = "s"
    attached = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def notify(self, method: str, params: Any) -> None:
        self.sent.append((method, params))

    async def notify_many(self, notes: Sequence[tuple[str, Any]]) -> None:
        self.sent.extend(notes)


@pytest.fixture
async def table() -> AsyncIterator[tuple[ProcessTable, Supervisor]]:
    supervisor = Supervisor()
    supervisor.spawn_took(1.0)  # as after spawns that waited for a CPU: in threads now
    assert supervisor.spawns_wait()

    processes = ProcessTable(
        RecordingSession(),  # type: ignore[arg-type]
        supervisor,
        retention_s=60,
        retained_bytes=1 << 20,
        drain_timeout_s=5,
        limits=None,
    )
    yield processes, supervisor
    await processes.aclose()
    await supervisor.aclose()


def plan(script: str, env: dict[str, str] | None = None) -> LaunchPlan:
    return LaunchPlan(
        program="/bin/sh",
        argv=["sh", "-c", script],
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
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


async def test_a_start_cancelled_while_its_child_spawns_still_registers_the_child(
    table: tuple[ProcessTable, Supervisor],
) -> None:
    processes, _ = table
    starting = asyncio.ensure_future(processes.start("orphan?", plan("sleep 30"), None))
    await asyncio.sleep(0)  # the spawn is in its thread
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert await wait_until(lambda: processes.get("orphan?") is not None, 10), "never registered"
    proc = processes.get("orphan?")
    assert proc is not None and not proc.exited  # owned: the session's close kills it


async def test_a_child_started_while_a_start_is_under_way_is_not_taken_for_an_escapee(
    table: tuple[ProcessTable, Supervisor],
) -> None:
    """A spawn's child exists before its pid reaches the loop. Meanwhile a kill of
    another tree must not take it for that tree's escapee, however alike their
    environments (here a child we start ourselves stands for it)."""
    processes, _ = table
    env = {"PATH": "/usr/bin:/bin", "MARKER": "same"}
    first = await processes.start("first", plan("sleep 30", env), None)
    second = asyncio.ensure_future(processes.start("second", plan("sleep 30", env), None))
    await asyncio.sleep(0)  # its spawn is under way in a thread
    # Blocking on purpose, from here to the kill: the loop must not run the spawn's
    # completion in between.
    newborn = subprocess.Popen(  # noqa: ASYNC220
        ["sh", "-c", "echo ready; exec sleep 30"],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert newborn.stdout is not None
    try:
        assert newborn.stdout.readline() == b"ready\n"  # exec'd: its environment is readable
        assert first.terminate() is True  # the kill's escapee search runs now
        assert newborn.pid not in first.tree.tracked, "taken for the other tree's escapee"
        # (Once the spawn has ended, a later sweep would rightly attribute this
        # stand-in, which is no spawn's child: so no await before the check.)
        time.sleep(0.1)  # noqa: ASYNC251 (the loop must not run: see above)
        assert newborn.poll() is None, "a newborn child was killed as the other tree's escapee"
    finally:
        newborn.kill()
        newborn.wait()
        newborn.stdout.close()
        await second


# /proc stat files opened while a test watches, with the thread that opened each.
# (An audit hook cannot be removed: it stays for the process, idle unless watching.)
_stat_opens: list[tuple[str, threading.Thread]] | None = None


def _watch_stat_opens(event: str, args: tuple[object, ...]) -> None:
    if _stat_opens is None or event != "open":
        return
    path = args[0]
    if isinstance(path, str) and path.startswith("/proc/") and path.endswith("/stat"):
        _stat_opens.append((path, threading.current_thread()))


sys.addaudithook(_watch_stat_opens)


async def test_a_child_spawned_in_a_thread_has_its_start_read_there_not_on_the_loop(
    table: tuple[ProcessTable, Supervisor],
) -> None:
    """Right after its exec a child may still hold its exec lock, which a read of
    its /proc stat waits for (on a busy machine, until the child gets a CPU): that
    read goes with the spawn into the thread, never on the event loop's."""
    global _stat_opens
    processes, _ = table
    loop_thread = threading.current_thread()
    _stat_opens = []
    try:
        proc = await processes.start("watched", plan("sleep 30"), None)
        opens = list(_stat_opens)
    finally:
        _stat_opens = None
    pid = proc.pid
    own = [thread for path, thread in opens if path == f"/proc/{pid}/stat"]
    assert own, "the child's start was not read at all"
    assert loop_thread not in own, "the child's /proc stat was read on the event loop"
    info = read_stat(pid)
    assert info is not None and proc.tree.root_start == info.start


def test_spawns_move_to_threads_while_they_wait_for_a_cpu_and_back_when_they_do_not() -> None:
    supervisor = Supervisor()
    assert not supervisor.spawns_wait()  # an idle machine's spawn: ~0.2 ms, in the loop
    supervisor.spawn_took(0.0002)
    assert not supervisor.spawns_wait()
    supervisor.spawn_took(0.040)  # a child that waited 40 ms for a CPU
    assert supervisor.spawns_wait()
    for _ in range(20):
        supervisor.spawn_took(0.0002)
    assert not supervisor.spawns_wait()


def test_a_start_returns_before_any_notification_of_its_process() -> None:
    """The request's response is queued when ``start`` returns: a command that
    prints and exits at once must not have its output or exit sent before that.
    On the daemon's loop, uvloop, which runs I/O callbacks in its poll phase, after
    the callbacks already queued: that decides what may overtake the response."""

    async def starts() -> None:
        supervisor = Supervisor()
        supervisor.spawn_took(1.0)  # spawns in threads
        session = RecordingSession()
        processes = ProcessTable(
            session,  # type: ignore[arg-type]
            supervisor,
            retention_s=60,
            retained_bytes=1 << 20,
            drain_timeout_s=5,
            limits=None,
        )
        try:
            for i in range(20):
                proc = await processes.start(f"quick{i}", plan("echo hi"), None)
                early = [m for m, params in session.sent if params.process_id == f"quick{i}"]
                assert early == [], f"sent before the start returned: {early}"
                await proc.wait_closed(10)
        finally:
            await processes.aclose()
            await supervisor.aclose()

    uvloop.run(starts())
