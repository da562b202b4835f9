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
import uuid
from pathlib import Path

from benchmarks.machine_noise import other_cpu, page_fault_us, snapshot


def _spinning() -> tuple[subprocess.Popen[bytes], str]:
    """A busy child named as awkwardly as /proc/PID/stat allows (15 characters at
    most), unique to the test (the suite's other workers may run this file's other
    test at the same time); and the name it is grouped under (up to its "/")."""
    group = f"x) ({uuid.uuid4().hex[:6]}"
    name = f"{group}/1"
    spinner = f"open('/proc/self/comm', 'w').write({name!r})\nwhile True: pass\n"
    child = subprocess.Popen([sys.executable, "-c", spinner])
    comm = Path(f"/proc/{child.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_text().rstrip("\n") != name:
        assert time.monotonic() < deadline, "the child never renamed itself"
        time.sleep(0.01)
    return child, group


def test_a_busy_process_outside_is_named_and_one_inside_is_not() -> None:
    child, group = _spinning()
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
    assert by_name.get(group, 0.0) > 0.05, outside
    assert isinstance(outside["total"], float) and outside["total"] >= by_name[group]

    # The same child as part of the benchmark's tree (the test's process).
    inside = other_cpu(before, after, elapsed, leave_out=[os.getpid()])
    assert isinstance(inside["by_name"], dict)
    assert group not in inside["by_name"], inside


def test_a_process_that_started_or_ended_between_the_snapshots_is_not_counted() -> None:
    before = snapshot()
    child, group = _spinning()
    try:
        time.sleep(0.3)
        after = snapshot()
    finally:
        child.kill()
        child.wait()
    assert child.pid in after and child.pid not in before
    result = other_cpu(before, after, 0.3, leave_out=[])
    assert isinstance(result["by_name"], dict)
    assert group not in result["by_name"], result


def test_a_page_faults_cost_is_what_touching_fresh_pages_took() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cost = page_fault_us(size=8 << 20, rounds=3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # Every page of the three mappings faulted once (so the time is a fault's).
    assert faults >= 3 * (8 << 20) // mmap.PAGESIZE
    # Above Python's loop alone, below a millisecond a page.
    assert 0.05 < cost < 1000.0
