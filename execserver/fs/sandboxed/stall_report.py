"""What a helper's processes were doing, for the daemon's log, when the helper
did not come up in time.

A helper that never answered its first call was seen only under load (1,000
agents on two CPUs, docs/scale.md), never in isolation, and nothing showed
where it waited. The pool now gives up on such a helper and starts another
(``helper.py``); this is what it logs first, so that the next time says where:
for bwrap and each process below it, its state and the kernel function it
sleeps in (``wchan``), per thread, and the top of the main thread's kernel
stack where the daemon may read it (root only). A few small /proc reads, once
per such helper.
"""

from __future__ import annotations

import os
from typing import Final

from execserver.processes.tree import child_pids, read_proc_table

__all__ = ["group_members", "process_tree_report", "socket_holders"]

# Enough to tell a bwrap waiting for its child from a helper blocked in the
# kernel; bounded so that a runaway tree cannot flood the log.
_MAX_PROCESSES: Final = 8
_MAX_THREADS: Final = 8
_STACK_FRAMES: Final = 8


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError as exc:
        return f"<{exc.strerror or type(exc).__name__}>"


def _state(stat: str) -> str:
    """The state letter of a /proc stat line (after the command, which may hold spaces)."""
    _, _, rest = stat.rpartition(")")
    fields = rest.split()
    return fields[0] if fields else "?"


def _thread_line(pid: int, tid: str) -> str:
    base = f"/proc/{pid}/task/{tid}"
    return f"tid {tid} {_state(_read(f'{base}/stat'))} in {_read(f'{base}/wchan') or '-'}"


def _process_lines(pid: int) -> list[str]:
    if not os.path.exists(f"/proc/{pid}"):
        return [f"pid {pid}: gone"]
    comm = _read(f"/proc/{pid}/comm")
    lines = [f"pid {pid} ({comm}) {_state(_read(f'/proc/{pid}/stat'))}"]
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return [*lines, "  gone"]
    lines += [f"  {_thread_line(pid, tid)}" for tid in tids[:_MAX_THREADS]]
    if len(tids) > _MAX_THREADS:
        lines.append(f"  and {len(tids) - _MAX_THREADS} more threads")
    stack = _read(f"/proc/{pid}/stack").splitlines()[:_STACK_FRAMES]
    if stack and not stack[0].startswith("<"):
        lines += [f"  | {frame}" for frame in stack]
    return lines


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (a scan of /proc: seldom)."""
    return sorted(
        pid for pid, info in read_proc_table().items() if info.pgid == pgid and info.state != "Z"
    )


def socket_holders(inodes: tuple[int, ...]) -> list[str]:
    """Every process with a descriptor on one of the sockets ``inodes``, as
    ``pid (comm) fd N`` (a scan of every process's descriptors: seldom, and in a
    worker thread)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found = []
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                found.append(f"{pid} ({_read(f'/proc/{pid}/comm')}) fd {fd}")
    return found


def process_tree_report(root: int) -> str:
    """``root`` (a helper's bwrap) and the processes below it, one line each and
    one per thread, breadth first, at most ``_MAX_PROCESSES`` of them. When
    ``root`` is gone, the members of its process group in its place (bwrap's
    child stays in it until the sandbox is set up)."""
    lines: list[str] = []
    queue = [root]
    if not os.path.exists(f"/proc/{root}"):
        queue = group_members(root)
        lines.append(f"pid {root}: gone; {len(queue)} left in its process group")
    seen = 0
    while queue and seen < _MAX_PROCESSES:
        pid = queue.pop(0)
        seen += 1
        lines += _process_lines(pid)
        queue += child_pids(pid)
    if queue:
        lines.append(f"and {len(queue)} more processes")
    return "\n".join(lines)
