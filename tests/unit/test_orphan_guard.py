"""The orphan-guard program (execserver/processes/native/orphan_guard.c), driven as the
daemon drives it: lines on its stdin, then the pipe's end. Real processes, real
signals; tests/integration/test_orphan_guard.py has the daemon SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import psutil
import pytest

from execserver.processes.orphan_guard import ORPHAN_GUARD_PROGRAM
from execserver.processes.tree import read_stat
from tests.support.procinfo import wait_until_blocking


@pytest.fixture
def program() -> str:
    assert ORPHAN_GUARD_PROGRAM is not None, "make builds orphan-guard: the suite runs with it"
    return ORPHAN_GUARD_PROGRAM


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _session(started: list[subprocess.Popen[bytes]], script: str) -> subprocess.Popen[bytes]:
    """``sh -c script`` in a session of its own, as the daemon starts a command."""
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True, stdout=subprocess.PIPE)
    started.append(proc)
    return proc


def _pids(proc: subprocess.Popen[bytes], count: int) -> list[int]:
    assert proc.stdout is not None
    return [int(proc.stdout.readline()) for _ in range(count)]


def _start(pid: int) -> int:
    info = read_stat(pid)
    assert info is not None
    return info.start


def _guard(program: str, lines: list[str]) -> subprocess.CompletedProcess[bytes]:
    """The guard told ``lines``, then its pipe's end, as at the daemon's exit."""
    return subprocess.run(
        [program], input="".join(lines).encode(), capture_output=True, timeout=30, check=True
    )


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pids: list[int], within: float = 5.0) -> bool:
    return wait_until_blocking(lambda: not any(_alive(pid) for pid in pids), within)


def test_at_the_pipes_end_a_watched_process_dies_with_its_session_and_descendants(
    program: str, started: list[subprocess.Popen[bytes]]
) -> None:
    # A root, a child in its session, and a grandchild that left the session (setsid)
    # but is still under the child: each one's pid on its own line.
    root = _session(
        started,
        "echo $$; sleep 300 & echo $!; setsid sh -c 'echo $$; exec sleep 301' & wait",
    )
    pids = _pids(root, 3)
    bystander = _session(started, "echo $$; exec sleep 302")
    [other] = _pids(bystander, 1)
    done = _guard(program, [f"+ {root.pid} {_start(root.pid)}\n"])
    assert _gone(pids), [pid for pid in pids if _alive(pid)]
    assert _alive(other), "a process the guard was not told of was killed"
    assert b"SIGKILLs sent" in done.stderr


def test_a_process_said_to_have_ended_is_left_alone(
    program: str, started: list[subprocess.Popen[bytes]]
) -> None:
    proc = _session(started, "echo $$; exec sleep 300")
    [pid] = _pids(proc, 1)
    done = _guard(program, [f"+ {pid} {_start(pid)}\n", f"- {pid}\n"])
    assert _alive(pid)
    assert done.stderr == b""


def test_a_recycled_pid_is_not_taken_for_the_process_told_of(
    program: str, started: list[subprocess.Popen[bytes]]
) -> None:
    proc = _session(started, "echo $$; exec sleep 300")
    [pid] = _pids(proc, 1)
    # The start time told is not this process's: the pid is another's by now.
    _guard(program, [f"+ {pid} {_start(pid) - 1}\n"])
    assert _alive(pid)


def test_the_guard_ignores_the_signals_a_terminal_or_a_group_kill_sends(program: str) -> None:
    ignored = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    read_end, write_end = os.pipe()
    guard = subprocess.Popen([program], stdin=read_end)
    os.close(read_end)
    try:
        # Its handlers set (a signal before that would end it): /proc says so.
        ignoring = wait_until_blocking(lambda: set(ignored) <= _ignored_by(guard.pid), 5)
        assert ignoring, _ignored_by(guard.pid)
        for sig in ignored:
            guard.send_signal(sig)
    finally:
        os.close(write_end)
    # Only the pipe's end ended it: a signal would have made the status negative.
    assert guard.wait(timeout=10) == 0


def _ignored_by(pid: int) -> set[int]:
    """The signals ``pid`` ignores (/proc/PID/status, SigIgn)."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def test_many_entries_of_processes_long_gone_do_not_hide_a_live_one(
    program: str, started: list[subprocess.Popen[bytes]]
) -> None:
    # Escapees are told of and never said to have ended: the list is pruned of the
    # dead as it grows (past 256, 512, ... entries), and a live entry survives it.
    proc = _session(started, "echo $$; exec sleep 300")
    [pid] = _pids(proc, 1)
    dead = subprocess.Popen(["true"])
    dead.wait()
    lines = [f"+ {pid} {_start(pid)}\n"] + [f"+ {dead.pid} 1\n"] * 5000
    _guard(program, lines)
    assert _gone([pid])
