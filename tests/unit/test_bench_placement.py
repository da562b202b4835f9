"""benchmarks/placement.py pins a figure's server tree and its client, and gives
the client its CPUs back (a real child process, real affinities)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from benchmarks.placement import cpus_needed, pinned
from tests.support.procinfo import wait_until_blocking


def _server() -> subprocess.Popen[bytes]:
    # A server with a child of its own: the pin must reach descendants too.
    return subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)


def _stop(server: subprocess.Popen[bytes]) -> None:
    os.killpg(server.pid, signal.SIGKILL)  # the shell and its sleep
    server.wait()


def _child_of(pid: int) -> int:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return int(f.read().split()[0])


def _wait_for_child(pid: int, timeout: float = 10.0) -> int:
    """The shell's sleep, once it has started it (a bounded wait by the clock: a
    count of sched_yield calls ran out on a loaded machine)."""
    if not wait_until_blocking(lambda: _has_child(pid), timeout):
        raise AssertionError(f"the shell {pid} started no child in {timeout} s")
    return _child_of(pid)


def _has_child(pid: int) -> bool:
    try:
        _child_of(pid)
    except (IndexError, OSError):
        return False
    return True


def test_same_pins_server_tree_and_client_to_one_cpu_then_restores_the_client() -> None:
    allowed = os.sched_getaffinity(0)
    server = _server()
    try:
        child = _wait_for_child(server.pid)
        with pinned(server.pid, None):  # left to the scheduler
            assert os.sched_getaffinity(server.pid) == allowed
            assert os.sched_getaffinity(0) == allowed
        with pinned(server.pid, "same"):
            first = min(allowed)
            assert os.sched_getaffinity(0) == {first}
            assert os.sched_getaffinity(server.pid) == {first}
            assert os.sched_getaffinity(child) == {first}
        assert os.sched_getaffinity(0) == allowed
    finally:
        _stop(server)


def test_split_puts_the_client_on_another_cpu_or_says_it_cannot() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    server = _server()
    try:
        if len(allowed) < cpus_needed("split"):
            with pytest.raises(RuntimeError, match="needs 2 CPUs"), pinned(server.pid, "split"):
                raise AssertionError("pinned on too few CPUs")
            assert os.sched_getaffinity(0) == set(allowed)
            return
        with pinned(server.pid, "split"):
            assert os.sched_getaffinity(server.pid) == {allowed[0]}
            assert os.sched_getaffinity(0) == {allowed[1]}
        assert os.sched_getaffinity(0) == set(allowed)
    finally:
        _stop(server)
