"""What else the machine ran during a scale level: CPU time of the processes and
kernel threads outside the benchmark (its harness, the servers, the agents and
everything they started), from two snapshots of /proc.

The same level on the same VM image measured a loop-lag p99 of 43.9 ms one day
and 72 to 92 ms another. On the second machine the kernel's DAMON thread
(``kdamond``, which a VM host can run to find pages to reclaim; its work grows
with the memory in use, ~12 GB at N = 1,000) took 0.58 of a CPU during the level,
more than the daemon's own process; nothing in the report said so. Each level now
records it.

And what a page fault costs on the machine (``page_fault_us``, in the report's
``machine``): 3.1 µs on that second VM (a virtualised machine can fault through
its host each time), where a helper's start alone touches ~750 pages and N =
1,000 brings ~12 GB in; a figure to compare runs on different machines by.

Only what lives through both snapshots counts (kernel threads, system daemons):
a short-lived process outside the benchmark is missed. Tasks are grouped by
name up to the first ``/`` (``kworker/u8:0-events`` and ``kworker/1:1`` are
``kworker``).
"""

from __future__ import annotations

import mmap
import os
import statistics
import time
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["Snapshot", "other_cpu", "page_fault_us", "snapshot"]

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# Groups below this share of one CPU are summed in the total but not named.
NAMED_AT_LEAST = 0.01
PAGE = mmap.PAGESIZE


@dataclass(frozen=True)
class Task:
    name: str
    parent: int
    ticks: int


Snapshot = dict[int, Task]


def _read(pid: int) -> Task | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            line = f.read()
    except OSError:
        return None
    # The name is between the first "(" and the last ")": it may hold both.
    _, _, rest = line.partition(b" (")
    name, _, tail = rest.rpartition(b") ")
    fields = tail.split()
    try:
        return Task(
            name=name.decode(errors="replace").split("/", 1)[0],
            parent=int(fields[1]),
            ticks=int(fields[11]) + int(fields[12]),
        )
    except (IndexError, ValueError):
        return None


def snapshot() -> Snapshot:
    """Every process's name, parent and CPU ticks (user + system) now."""
    tasks: Snapshot = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (task := _read(int(entry))) is not None:
            tasks[int(entry)] = task
    return tasks


def _subtrees(tasks: Snapshot, roots: Collection[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, task in tasks.items():
        children.setdefault(task.parent, []).append(pid)
    found: set[int] = set()
    frontier = [root for root in roots if root in tasks]
    while frontier:
        pid = frontier.pop()
        if pid not in found:
            found.add(pid)
            frontier.extend(children.get(pid, ()))
    return found


def other_cpu(
    before: Snapshot, after: Snapshot, elapsed_s: float, leave_out: Collection[int]
) -> dict[str, object]:
    """CPUs used between the snapshots by tasks outside the subtrees of
    ``leave_out`` (pids), alive in both: ``{"total": CPUs, "by_name": {name:
    CPUs}}``, the names from the largest, those under NAMED_AT_LEAST left out."""
    ours = _subtrees(after, leave_out) | _subtrees(before, leave_out)
    by_name: dict[str, float] = {}
    for pid, task in after.items():
        earlier = before.get(pid)
        if pid in ours or earlier is None or earlier.name != task.name:
            continue
        used = (task.ticks - earlier.ticks) / TICKS_PER_S / elapsed_s
        if used > 0:
            by_name[task.name] = by_name.get(task.name, 0.0) + used
    named = sorted(
        ((name, cpus) for name, cpus in by_name.items() if cpus >= NAMED_AT_LEAST),
        key=lambda item: -item[1],
    )
    return {
        "total": round(sum(by_name.values()), 3),
        "by_name": {name: round(cpus, 3) for name, cpus in named},
    }


def page_fault_us(size: int = 64 << 20, rounds: int = 3) -> float:
    """Microseconds per first touch of a fresh anonymous page (a minor fault:
    the kernel zeroes and maps a page), the median of ``rounds`` fresh
    mappings of ``size`` bytes. Python's loop adds ~0.07 µs per page."""
    costs = []
    for _ in range(rounds):
        with mmap.mmap(-1, size) as memory:
            start = time.perf_counter()
            for offset in range(0, size, PAGE):
                memory[offset] = 1
            costs.append((time.perf_counter() - start) / (size // PAGE) * 1e6)
    return statistics.median(costs)
