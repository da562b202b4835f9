"""Process inspection for the tests: a server's descendants, processes found by
an argument of theirs, bounded waits."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable

import psutil


def live_descendant_pids(pid: int) -> set[int] | None:
    """The live (not zombie) pids under ``pid``, from its subtree alone: each
    process's ``/proc/<pid>/task/<tid>/children``, from ``pid`` down. psutil's
    ``children(recursive=True)`` reads every process on the machine for the same
    answer: with the parallel suite's hundreds of processes, the leak check after
    each test (tests/conftest.py) spent most of its worker's CPU there.

    The kernel lists a task's children as they are while the file is read and may
    skip one when another exits meanwhile (the kernel's
    Documentation/filesystems/proc.rst), so the subtree is walked twice and the
    two joined: a process that stays is in one walk at least. A zombie is not
    walked into (it has no children left): a pytest worker is a subreaper, and the
    orphans it inherits stay its zombies, hundreds of them by the end of a run.
    None when the kernel has no such file (built without CONFIG_PROC_CHILDREN)."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return None
    # What the first walk found exited is not read again by the second, a moment
    # later (a zombie's pid cannot be reused before it is reaped).
    zombies: set[int] = set()
    return _walk_live_children(pid, zombies) | _walk_live_children(pid, zombies)


def _walk_live_children(root: int, zombies: set[int]) -> set[int]:
    seen: set[int] = set()
    live: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    listed = f.read().split()
            except OSError:
                continue
            for child in map(int, listed):
                if child in seen or child in zombies:
                    continue
                seen.add(child)
                if _exited_child(child) if pid == root else is_zombie_or_gone(child):
                    zombies.add(child)
                else:
                    live.add(child)
                    todo.append(child)
    return live


def _exited_child(pid: int) -> bool:
    """Whether ``pid``, a child of this process, has exited: asked of the kernel with
    waitid(WNOWAIT), which leaves a zombie to whoever reaps it (asyncio, Popen).
    One system call, where reading its stat costs tens of microseconds: the leak
    check meets every orphan a worker adopted as a subreaper, and they stay its
    zombies, hundreds by the end of a run (~12 ms a check for 400 before).
    Not a child of ours after all (reaped and gone meanwhile): its stat says."""
    try:
        found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return is_zombie_or_gone(pid)
    return found is not None


def is_zombie_or_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie not reaped yet, or no process at all)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    # The state follows the command name, which is in parentheses and may hold any byte.
    end = stat.rfind(b")")
    return stat[end + 2 : end + 3] in (b"Z", b"X", b"")


def command_line(pid: int, words: int = 4) -> str:
    """The first ``words`` of ``pid``'s command line ('' once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return ""
    return " ".join(arg.decode(errors="replace") for arg in argv[:words])


# The daemon's own child for its whole life (execserver/processes/orphan_guard.py),
# which no session started.
ORPHAN_GUARD_NAME = "orphan-guard"


def live_descendants(pid: int) -> list[psutil.Process]:
    """What runs under the daemon ``pid`` (not zombies, not its orphan guard)."""
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if child.name() == ORPHAN_GUARD_NAME and child.ppid() == pid:
                continue
            out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


async def wait_until(predicate: object, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if predicate():  # type: ignore[operator]
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval)


def wait_until_blocking(
    predicate: Callable[[], bool], timeout: float, interval: float = 0.01
) -> bool:
    """``wait_until`` for a test without an event loop: poll ``predicate()`` until
    it is true or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def num_fds(pid: int) -> int:
    return psutil.Process(pid).num_fds()


def sleep_marker() -> str:
    """A unique ``sleep`` duration (300 s and up), so psutil finds exactly the
    remote process a test started by its command line."""
    return f"{300 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 1000:03d}"


def processes_with(arg: str) -> list[psutil.Process]:
    """Live (not zombie) processes with ``arg`` on their command line."""
    return [
        proc
        for proc in psutil.process_iter(["cmdline", "status"])
        if arg in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE
    ]


async def gone(arg: str, timeout: float = 10.0) -> bool:
    """Polls (bounded) until no live process has ``arg`` on its command line."""
    return await wait_until(lambda: not processes_with(arg), timeout, interval=0.05)
