"""Pinning a figure's server and client to CPUs, for the round-trip figures.

On a VM a polling round trip costs every server about twice the CPU when the
server and the client sit on two vCPUs (the idle vCPU halts, its caches go
cold, and waking it takes an IPI) than when they share one. Left to the
scheduler, a figure measures where the processes happened to land as much as
the server; pinned, it measures one placement at a time:

* ``same``: the server (every thread, and its children) and the client on one CPU;
* ``split``: the server on one CPU and the client on another.

CPUs are taken in order from the ones this process may use, so a cpuset that
allows, say, CPUs 2 and 3 works the same way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psutil

# placement -> (server's CPU, client's CPU), as indexes into the allowed CPUs.
PLACEMENTS: dict[str, tuple[int, int]] = {"same": (0, 0), "split": (0, 1)}


def _pin_threads(pid: int, cpus: set[int], *, descendants: bool) -> None:
    """Every thread of ``pid`` (and of its descendants) onto ``cpus``; threads and
    children started later inherit it from their creator."""
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)] if descendants else [root]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            for thread in process.threads():
                with contextlib.suppress(OSError):  # a thread that just ended
                    os.sched_setaffinity(thread.id, cpus)


def cpus_needed(placement: str) -> int:
    return max(PLACEMENTS[placement]) + 1


@contextlib.contextmanager
def pinned(server_pid: int, placement: str | None) -> Iterator[None]:
    """Pin the server tree and this process (the client) as ``placement`` says,
    and give this process its CPUs back afterwards; None leaves both to the
    scheduler. RuntimeError when this machine has too few CPUs for it."""
    if placement is None:
        yield
        return
    allowed = sorted(os.sched_getaffinity(0))
    server_index, client_index = PLACEMENTS[placement]
    if cpus_needed(placement) > len(allowed):
        raise RuntimeError(f"placement {placement!r} needs {cpus_needed(placement)} CPUs")
    me = os.getpid()
    _pin_threads(me, {allowed[client_index]}, descendants=False)
    _pin_threads(server_pid, {allowed[server_index]}, descendants=True)
    try:
        yield
    finally:
        _pin_threads(me, set(allowed), descendants=False)
