"""One process tree's cgroup: placing the child in it before exec, its members,
the tree kill, its usage figures, its removal.

The child is placed by itself between fork and exec (``Placement.preexec``
writes ``0`` — "the writing process" — into each placement file opened by the
parent). That is race-free: the command's first instruction already runs inside
its cgroup, and so does any process it forks. Moving the pid from the parent
after the spawn would leave a window in which the child can fork a descendant
outside the limits; ``clone3(CLONE_INTO_CGROUP)`` would avoid the Python
pre-exec hook but no spawn API of the standard library reaches it.

On cgroup v1 the placement file is ``tasks``, not ``cgroup.procs``: the writer
is always single-threaded (a child between fork and exec, or exec-as), so moving
its one thread moves the process, and the kernel moves a writer that names
itself ("0") through ``tasks`` without taking ``cgroup_threadgroup_rwsem`` for
writing (``cgroup_procs_write_start`` in kernel/cgroup/cgroup.c), whose
``cgroup.procs`` route waits for an RCU grace period: 5-12 ms p50 for spawns
200 ms apart on a 6.18 kernel, 0.05 ms through ``tasks``
(``python -m benchmarks.cgroup_costs``). On v2, ``cgroup.threads`` refuses a
move between domain cgroups, so ``cgroup.procs`` it is.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from execserver.containment.cgroupfs import (
    int_value,
    keyed_value,
    member_pids,
    read_file,
    write_file,
)

__all__ = ["CgroupUsage", "Placement", "ProcessCgroup", "placement_file"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CgroupUsage:
    peak_memory_bytes: int | None
    cpu_s: float | None
    oom_kills: int  # processes of the tree the memory limit killed
    pids_refused: int  # forks refused by the pids limit


def placement_file(version: int) -> str:
    """The file a single-threaded child writes ``0`` into to enter a cgroup (the
    module docstring says why ``tasks`` on v1)."""
    return "tasks" if version == 1 else "cgroup.procs"


class Placement:
    """The placement file of each hierarchy, opened by the parent; ``preexec`` runs
    in the forked child before exec (see the module docstring for why there)."""

    def __init__(self, directories: list[str], version: int) -> None:
        self._fds: list[int] = []
        name = placement_file(version)
        try:
            for directory in directories:
                self._fds.append(os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            self.close()
            raise

    def preexec(self) -> None:  # pragma: no cover - runs in the forked child
        # Only a write per fd: nothing that could take a lock another thread of the
        # daemon held at fork time. An error aborts the spawn (fail closed).
        for fd in self._fds:
            os.write(fd, b"0")

    @property
    def fds(self) -> tuple[int, ...]:
        """The open placement files, for a child that writes them itself
        (``execserver/processes/exec_as.py``) instead of a pre-exec hook."""
        return tuple(self._fds)

    def close(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []


class ProcessCgroup:
    def __init__(self, version: int, directories: dict[str, str]) -> None:
        self.version = version
        # v2: {"": dir}; v1: {controller: dir}, hierarchies sharing a mount deduplicated.
        self._dirs = directories
        self.removed = False

    @property
    def directories(self) -> list[str]:
        return list(dict.fromkeys(self._dirs.values()))

    def directory_of(self, controller: str) -> str | None:
        """The directory holding ``controller``'s files (v2: the one directory)."""
        if self.version == 2:
            return self._dirs[""]
        return self._dirs.get(controller)

    @contextlib.contextmanager
    def placement(self) -> Iterator[Placement]:
        placement = Placement(self.directories, self.version)
        try:
            yield placement
        finally:
            placement.close()

    def pids(self) -> list[int]:
        found: list[int] = []
        for directory in self.directories:
            found.extend(
                p for p in member_pids(os.path.join(directory, "cgroup.procs")) if p not in found
            )
        return found

    def populated(self) -> bool:
        if self.removed:
            return False
        if self.version == 2:
            return (
                keyed_value(read_file(os.path.join(self._dirs[""], "cgroup.events")), "populated")
                == 1
            )
        return bool(self.pids())

    def kill(self) -> None:
        """SIGKILL every member: ``cgroup.kill`` on v2 (atomic, forks included); else
        freeze, kill what is listed, thaw, until empty (a frozen cgroup cannot fork)."""
        if self.removed:
            return
        if self.version == 2:
            with contextlib.suppress(OSError):
                write_file(os.path.join(self._dirs[""], "cgroup.kill"), "1")
                return
        for _ in range(20):
            members = self.pids()
            if not members:
                return
            frozen = self._freeze(True)
            for pid in self.pids() if frozen else members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if frozen:
                self._freeze(False)

    def _freeze(self, freeze: bool) -> bool:
        if self.version == 2:
            path, value, done = os.path.join(self._dirs[""], "cgroup.freeze"), "1", "frozen 1"
            if not freeze:
                value = "0"
        else:
            directory = self._dirs.get("freezer")
            if directory is None:
                return False
            path = os.path.join(directory, "freezer.state")
            value, done = ("FROZEN", "FROZEN") if freeze else ("THAWED", "THAWED")
        try:
            write_file(path, value)
        except OSError:
            return False
        if not freeze:
            return True
        # Freezing completes asynchronously; a few reads cover it (no sleep on the loop).
        state_file = os.path.join(self._dirs[""], "cgroup.events") if self.version == 2 else path
        for _ in range(200):
            state = read_file(state_file) or ""
            if (done in state) if self.version == 2 else state.strip() == done:
                break
        return True

    def usage(self) -> CgroupUsage:
        if self.version == 2:
            directory = self._dirs[""]
            peak = int_value(read_file(os.path.join(directory, "memory.peak")))
            usec = keyed_value(read_file(os.path.join(directory, "cpu.stat")), "usage_usec")
            cpu = usec / 1e6 if os.path.exists(os.path.join(directory, "cpu.stat")) else None
            oom = keyed_value(read_file(os.path.join(directory, "memory.events")), "oom_kill")
            refused = keyed_value(read_file(os.path.join(directory, "pids.events")), "max")
            return CgroupUsage(peak, cpu, oom, refused)
        memory = self._dirs.get("memory")
        cpuacct = self._dirs.get("cpuacct")
        pids = self._dirs.get("pids")
        peak = (
            int_value(read_file(os.path.join(memory, "memory.max_usage_in_bytes")))
            if memory
            else None
        )
        nanos = int_value(read_file(os.path.join(cpuacct, "cpuacct.usage"))) if cpuacct else None
        oom = (
            keyed_value(read_file(os.path.join(memory, "memory.oom_control")), "oom_kill")
            if memory
            else 0
        )
        refused = keyed_value(read_file(os.path.join(pids, "pids.events")), "max") if pids else 0
        return CgroupUsage(peak, nanos / 1e9 if nanos is not None else None, oom, refused)

    def remove(self) -> bool:
        """rmdir every directory; False while a member is still alive (EBUSY)."""
        if self.removed:
            return True
        done = True
        for directory in self.directories:
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    log.warning("cannot remove cgroup %s: %s", directory, exc.strerror)
                done = False
        self.removed = done
        return done
