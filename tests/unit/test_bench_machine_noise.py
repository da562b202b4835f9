"""benchmarks/machine_noise.py: a scale level's record of what else the machine
ran finds a busy process outside the benchmark, by its name (even one holding
") (" and "/"), and leaves the benchmark's own tree out; a page fault's cost is
measured, not made up."""

from __future__ import annotations

import mmap
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.machine_noise import other_cpu, page_fault_us, snapshot

# A process name as awkward as /proc/PID/stat allows (15 characters at most).
NAME = "x) (noise/1"
SPINNER = f"open('/proc/self/comm', 'w').write({NAME!r})\nwhile True: pass\n"


def _spinning() -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", SPINNER])
    comm = Path(f"/proc/{child.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_text().rstrip("\n") != NAME:
        assert time.monotonic() < deadline, "the child never renamed itself"
        time.sleep(0.01)
    return child


def test_a_busy_process_outside_is_named_and_one_inside_is_not() -> None:
    child = _spinning()
    try:
        before = snapshot()
        start = time.monotonic()
        time.sleep(1.0)
        after = snapshot()
        elapsed = time.monotonic() - start
    finally:
        child.kill()
        child.wait()
    assert before[child.pid].parent == os.getpid()

    outside = other_cpu(before, after, elapsed, leave_out=[])
    by_name = outside["by_name"]
    assert isinstance(by_name, dict)
    # Grouped by the name up to its first "/".
    assert by_name.get("x) (noise", 0.0) > 0.05, outside
    assert isinstance(outside["total"], float) and outside["total"] >= by_name["x) (noise"]

    # The same child as part of the benchmark's tree (the test's process).
    inside = other_cpu(before, after, elapsed, leave_out=[os.getpid()])
    assert isinstance(inside["by_name"], dict)
    assert "x) (noise" not in inside["by_name"], inside


def test_a_process_that_started_or_ended_between_the_snapshots_is_not_counted() -> None:
    before = snapshot()
    child = _spinning()
    try:
        time.sleep(0.3)
        after = snapshot()
    finally:
        child.kill()
        child.wait()
    assert child.pid in after and child.pid not in before
    result = other_cpu(before, after, 0.3, leave_out=[])
    assert isinstance(result["by_name"], dict)
    assert "x) (noise" not in result["by_name"], result


def test_a_page_faults_cost_is_what_touching_fresh_pages_took() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cost = page_fault_us(size=8 << 20, rounds=3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # Every page of the three mappings faulted once (so the time is a fault's).
    assert faults >= 3 * (8 << 20) // mmap.PAGESIZE
    # Above Python's loop alone, below a millisecond a page.
    assert 0.05 < cost < 1000.0
