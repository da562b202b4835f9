"""A daemon without --state-dir that is SIGKILLed leaves none of its processes running
(execserver/processes/orphan_guard.py): what it started, with its session, its
descendants and the escapees a sweep attributed to it, dies with it. Before the
guard, a benchmark's SIGKILLed daemon left 309 `sleep 3600`s re-parented to init.
"""

from __future__ import annotations

import asyncio
import os
import signal

import psutil

from execserver.processes.tree import read_stat
from tests.support.procinfo import ORPHAN_GUARD_NAME, wait_until
from tests.support.rpc import connect
from tests.support.servers import start_server


def _guard_of(daemon: int) -> psutil.Process:
    [guard] = [p for p in psutil.Process(daemon).children() if p.name() == ORPHAN_GUARD_NAME]
    return guard


def _read_by(guard: psutil.Process) -> int:
    """The bytes the guard has read (its start-up's, then its stdin's)."""
    return int(guard.io_counters().read_chars)


def _line(pid: int) -> bytes:
    """What the daemon tells the guard of ``pid`` (processes/orphan_guard.py)."""
    info = read_stat(pid)
    assert info is not None
    return b"+ %d %d\n" % (pid, info.start)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_sigkilled_daemon_takes_its_processes_with_it() -> None:
    # The root (exec'd into `sleep 302`), a background job in its session, and an
    # escapee: setsid in a subshell that exits at once, so it is re-parented to the
    # daemon (a subreaper), and after the daemon's death to init.
    script = (
        "(setsid sleep 301 </dev/null >/dev/null 2>&1 & echo escapee $!); "
        "sleep 300 & echo job $!; echo root $$; exec sleep 302"
    )
    async with (
        start_server("execserver", extra=["--log-level", "warning"]) as server,
        connect(server.url) as peer,
    ):
        guard = _guard_of(server.process.pid)
        before = _read_by(guard)  # its own start-up's reads (nothing told yet)
        await peer.start("tree", ["sh", "-c", script])
        await peer.start("term", ["sh", "-c", "echo tty $$; exec sleep 303"], tty=True)
        for needle in (b"escapee", b"job", b"root"):
            await peer.wait_output("tree", needle)
        await peer.wait_output("term", b"tty")
        words = (peer.events("tree").output() + peer.events("term").output()).split()
        pids = [int(words[words.index(name) + 1]) for name in (b"escapee", b"job", b"root", b"tty")]
        assert all(_alive(pid) for pid in pids)
        # The two roots are told at their start, the escapee once a sweep of the
        # trees (one a second while they live) has attributed it: kill the daemon
        # when the guard has read all three lines.
        told = before + sum(len(_line(pid)) for pid in (pids[0], pids[2], pids[3]))
        assert await wait_until(lambda: _read_by(guard) >= told, 10), (_read_by(guard), told)
        os.kill(server.process.pid, signal.SIGKILL)
        await asyncio.wait_for(server.process.wait(), 10)
        assert await wait_until(lambda: not any(_alive(pid) for pid in pids), 10), {
            pid: _alive(pid) for pid in pids
        }
