"""The supervisor's periodic sweep reads /proc in a worker thread, not on the
event loop (a whole scan took 21 ms on a host of 1,230 processes, once a second
while any process lived), and what the supervisor recorded while that read ran
is not lost to the older table. Real processes; the read is only slowed down."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time

import uvloop

from execserver.processes.supervisor import Supervisor
from execserver.processes.tree import ProcTable, read_proc_table, read_stat
from tests.support.rpc import poll_until


def _sleeper(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


async def test_a_member_recorded_while_the_sweep_reads_proc_stays_tracked() -> None:
    loop_thread = threading.current_thread()
    readers: list[threading.Thread] = []
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def slow_read() -> ProcTable:
        """/proc as it is now, handed back only once the test has moved on (the
        first two reads; later ones at once)."""
        table = read_proc_table()
        n = len(readers)
        readers.append(threading.current_thread())
        if n < len(started):
            started[n].set()
            release[n].wait(30)
        return table

    supervisor = Supervisor(read_table=slow_read)
    env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "sweep"}
    root = _sleeper(env)
    late: subprocess.Popen[bytes] | None = None
    try:
        tree = supervisor.track(root.pid, env)
        # The first sweep comes within a second; the loop runs on meanwhile.
        assert await asyncio.to_thread(started[0].wait, 10)
        assert readers[0] is not loop_thread
        # Recorded after the table was taken, as an orphan adopted at its root's
        # exit is: that table does not know it.
        late = _sleeper(env)
        info = read_stat(late.pid)
        assert info is not None
        tree.tracked[late.pid] = info.start
        release[0].set()
        # The next sweep is scheduled once that table has been applied: when its
        # read starts, the first table's judgement is in.
        assert await asyncio.to_thread(started[1].wait, 10)
        assert late.pid in tree.tracked
        # And the next sweep, with a table that knows it, keeps it as one of ours.
        release[1].set()
        assert await poll_until(lambda: len(readers) > 2, 5)
        assert late.pid in tree.tracked
    finally:
        for gate in release:
            gate.set()
        for proc in (root, late):
            if proc is not None:
                _end(proc)
        await supervisor.aclose()


def test_a_sweep_asked_for_while_one_reads_runs_next_under_uvloop() -> None:
    """The daemon's loop is uvloop, whose call_later(0) is a call_soon: its handle
    has no when(), which the next scheduling read, so every process/start failed
    with an internal error after a sweep had been asked for during a read."""
    read = threading.Event()
    release = threading.Event()

    def slow_read() -> ProcTable:
        table = read_proc_table()
        read.set()
        release.wait(30)
        return table

    async def scenario() -> None:
        supervisor = Supervisor(read_table=slow_read)
        env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "sweep-again"}
        procs = [_sleeper(env)]
        try:
            supervisor.track(procs[0].pid, env)
            assert await asyncio.to_thread(read.wait, 10)  # the first sweep reads
            read.clear()
            # A kill asks for a sweep in 50 ms, while the first is still reading.
            supervisor.kill(supervisor.track(procs[0].pid, env))
            await asyncio.sleep(0.2)
            procs.append(_sleeper(env))
            release.set()
            # The read's table is applied and the sweep asked for meanwhile is made
            # due at once, in some turn of the loop; a start in that same turn (as
            # under load) schedules again, which reads the due one's time. One
            # start on every turn meets that turn.
            for _ in range(200):
                supervisor.track(procs[1].pid, env)
                await asyncio.sleep(0)
            assert await asyncio.to_thread(read.wait, 10)  # and it ran
        finally:
            release.set()
            for proc in procs:
                _end(proc)
            await supervisor.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


async def test_a_sweep_that_takes_long_spaces_the_next_ones() -> None:
    """A sweep over a host of many processes takes long; the next one waits twenty
    times as long as it took in CPU time (at least the usual second), so sweeping
    stays a small share of the daemon's time. Here each read costs 0.3 s: one
    sweep in the first 4.5 s after the tree's start, where a sweep every second
    would have made three or four."""
    reads: list[float] = []

    def slow_read() -> ProcTable:
        """A read that costs 0.3 s of CPU, as one over thousands of processes does
        (waiting would not count: the spacing follows the sweep's CPU time)."""
        reads.append(time.monotonic())
        spent = time.thread_time() + 0.3
        while time.thread_time() < spent:
            pass
        return read_proc_table()

    supervisor = Supervisor(read_table=slow_read)
    env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "spaced"}
    root = _sleeper(env)
    try:
        start = time.monotonic()
        supervisor.track(root.pid, env)
        await asyncio.sleep(4.5)
        within = [round(t - start, 2) for t in reads if t - start < 4.5]
        assert len(within) == 1, within
    finally:
        _end(root)
        await supervisor.aclose()
