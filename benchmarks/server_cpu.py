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


def tree_cpu_seconds(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            t = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total
