"""The scale benchmark's RSS and fd sampler: a server's process tree read
straight from /proc, in a thread of its own at a lower priority.

Every 0.5 s the benchmark sums the RSS and the open fds of the server's own
processes. At N = 1,000 that is ~2,000 processes with ~26,000 fds; through
psutil (a scan of every process on the host for the tree, then an object and
several reads per member) the sampler used 0.38 of a CPU during the window, in
the harness's process at normal priority, so in the same scheduling group as
the server and with the same weight as its event loop: the measuring took CPU
from what it measured. Here the tree is walked through each thread's
``children`` file (only the server's subtree is read), and the sampling thread
runs at ``nice`` 10 (benchmarks/scale.py ``SAMPLER_NICE``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor

from execserver.processes.tree import child_pids

__all__ = ["TreeSample", "memory_tree", "niced_executor", "sample_tree"]

PAGE = os.sysconf("SC_PAGE_SIZE")

TreeSample = dict[str, float]


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().rstrip(b"\n").decode(errors="replace")
    except OSError:
        return None


def _statm(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return f.read()
    except OSError:
        return None


def _fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _members(root: int, leave_out: Collection[str]) -> Iterator[tuple[int, bytes]]:
    """``root`` and its descendants but those named in ``leave_out``, with their
    statm line (a process gone meanwhile is skipped)."""
    root_name = _comm(root)
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        frontier += child_pids(pid)
        name = _comm(pid) if pid != root else root_name
        if pid != root and name in leave_out:
            continue
        memory = _statm(pid)
        if memory is None:
            continue  # gone meanwhile
        if pid != root and name == root_name and memory == _statm(root):
            # A child between its (v)fork and its exec, sharing the server's memory:
            # the server's own RSS and fds counted again (a peak would depend on
            # whether a sample caught one).
            continue
        yield pid, memory


def sample_tree(root: int, leave_out: Collection[str]) -> TreeSample:
    """RSS and fds of ``root`` and its descendants but those named in
    ``leave_out``, and of ``root`` alone."""
    rss = fds = root_rss = root_fds = processes = 0
    for pid, memory in _members(root, leave_out):
        open_fds = _fds(pid)
        if open_fds is None:
            continue  # gone meanwhile
        resident = int(memory.split()[1]) * PAGE
        rss, fds, processes = rss + resident, fds + open_fds, processes + 1
        if pid == root:
            root_rss, root_fds = resident, open_fds
    return {
        "rss_MB": rss / 1e6,
        "root_rss_MB": root_rss / 1e6,
        "fds": float(fds),
        "root_fds": float(root_fds),
        "processes": float(processes),
    }


def _pss_kB(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def memory_tree(root: int, leave_out: Collection[str]) -> TreeSample:
    """RSS and proportional set size (MB) of the same processes as
    ``sample_tree``'s, in one walk: in PSS each page shared by k processes counts
    1/k in each, where RSS counts it whole in every one, so a server made of many
    processes running one program (execserver's fs helpers: one interpreter each)
    pays its shared pages once per process in RSS. Reading PSS walks every
    mapping's page tables, so it is read once per level, not sampled."""
    rss = pss = 0
    for pid, memory in _members(root, leave_out):
        rss += int(memory.split()[1]) * PAGE
        pss += (_pss_kB(pid) or 0) * 1024
    return {"rss_MB": rss / 1e6, "pss_MB": pss / 1e6}


def niced_executor(nice: int) -> ThreadPoolExecutor:
    """One thread at ``nice`` (Linux keeps a nice value per thread)."""

    def lower() -> None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)

    return ThreadPoolExecutor(1, thread_name_prefix="sampler", initializer=lower)
