"""CPU time a server spent, read from /proc/<pid>/stat (via psutil) of the
server and every live descendant.

utime + stime of each live process, plus cutime + cstime (children it has
already reaped): a helper or a sandboxed command that ran and exited is
counted once, in its reaping parent. The difference of two readings is what
the server tree burned in between — independent of how fast the (Python)
benchmark client is, so a client-bound figure still compares the servers.
"""

from __future__ import annotations

import psutil


def tree_cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the tree. Apart because they move apart: on
    the benchmark VM a round trip's system time is mostly waking the peer's vCPU,
    which varies 2x from run to run and costs both servers alike (the same three
    syscalls per process/read poll, strace), while user time is the server's own
    work."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0
    user = system = 0.0
    for process in processes:
        try:
            t = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        user += t.user + t.children_user
        system += t.system + t.children_system
    return user, system
