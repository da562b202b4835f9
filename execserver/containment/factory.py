"""The daemon's per-process cgroup factory, opened once at start-up.

Where the cgroups live:

* **cgroup v2** when the daemon's own cgroup is delegated to it (systemd
  ``Delegate=yes``, a Kubernetes pod with a writable cgroup namespace) and offers
  the needed controllers. v2 lets a cgroup with processes enable no controllers
  for its children, so the daemon first moves the members of its cgroup into a
  leaf (``execserver.daemon``) and then creates ``proc-<daemon pid>-<n>`` siblings.
* **cgroup v1** otherwise: a writable memory / pids / cpu hierarchy (plus
  cpuacct for CPU time and freezer for the kill, when present); each gets
  ``execserver-<daemon pid>/p<n>`` under the daemon's own cgroup there.

``open_process_cgroups`` makes the factory (or refuses to start: fail closed);
the server provides it in its ``Resources`` (execserver/server/runner.py), and
whoever starts a process gets it from there.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
from collections.abc import AsyncIterator, Callable
from typing import Final

import psutil

from execserver.config import ProcessLimitsConfig
from execserver.containment.cgroupfs import member_pids, read_file, write_file
from execserver.containment.host import (
    DELEGATION_HINT,
    FLAGS,
    V1_OPTIONAL,
    HostCgroups,
    probe_host,
)
from execserver.containment.process_cgroup import Placement, ProcessCgroup

__all__ = [
    "ContainmentError",
    "ProcessCgroups",
    "open_process_cgroups",
]

log = logging.getLogger(__name__)

CPU_PERIOD_US: Final = 100_000
DAEMON_LEAF: Final = "execserver.daemon"


class ContainmentError(Exception):
    """Limits were asked for and cannot be applied: the daemon refuses to start."""


def _limit_files(version: int, limits: ProcessLimitsConfig) -> list[tuple[str, str, str]]:
    """(controller, file, value) to write into a new cgroup, in this order."""
    files: list[tuple[str, str, str]] = []
    if limits.memory_max_bytes is not None:
        value = str(limits.memory_max_bytes)
        if version == 2:
            # No swap: a memory limit that swaps only turns an OOM kill into thrashing.
            files += [("memory", "memory.max", value), ("memory", "memory.swap.max", "0")]
        else:
            files += [
                ("memory", "memory.limit_in_bytes", value),
                ("memory", "memory.memsw.limit_in_bytes", value),
            ]
    if limits.pids_max is not None:
        files.append(("pids", "pids.max", str(limits.pids_max)))
    if limits.cpu_max_cores is not None:
        quota = max(1000, round(limits.cpu_max_cores * CPU_PERIOD_US))
        if version == 2:
            files.append(("cpu", "cpu.max", f"{quota} {CPU_PERIOD_US}"))
        else:
            files += [
                ("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US)),
                ("cpu", "cpu.cfs_quota_us", str(quota)),
            ]
    return files


# Files that may be missing without weakening the limit the flag asked for
# (swap accounting is off on many kernels: then there is no swap to escape into).
_OPTIONAL_FILES: Final = {"memory.swap.max", "memory.memsw.limit_in_bytes"}


class ProcessCgroups:
    """Creates the per-process cgroups of one daemon (``runtime.containment``)."""

    def __init__(self, limits: ProcessLimitsConfig, version: int, parents: dict[str, str]) -> None:
        self.limits = limits
        self.version = version
        self._parents = parents  # v2: {"": dir}; v1: {controller: execserver-<pid> dir}
        self._counter = itertools.count(1)
        self._files = _limit_files(version, limits)

    def create(self) -> ProcessCgroup:
        """A new cgroup with the limits set; raises OSError (the caller fails the start)."""
        n = next(self._counter)
        dirs: dict[str, str] = {}
        made: list[str] = []
        try:
            for controller, parent in self._parents.items():
                leaf = f"proc-{os.getpid()}-{n}" if self.version == 2 else f"p{n}"
                directory = os.path.join(parent, leaf)
                real = os.path.realpath(parent)
                shared = next((d for d in made if os.path.dirname(d) == real), None)
                if shared is None:
                    try:
                        os.mkdir(directory, 0o755)
                    except FileNotFoundError:
                        # Our v1 parent was removed under us (e.g. as stale by a
                        # daemon in another pid namespace): make it again.
                        os.makedirs(directory, 0o755)
                    made.append(os.path.join(real, leaf))
                dirs[controller] = directory
            cgroup = ProcessCgroup(self.version, dirs)
            for controller, name, value in self._files:
                target = cgroup.directory_of(controller)
                assert target is not None
                try:
                    write_file(os.path.join(target, name), value)
                except OSError:
                    if name not in _OPTIONAL_FILES:
                        raise
            return cgroup
        except BaseException:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
            raise

    @contextlib.asynccontextmanager
    async def helper_cgroup(self) -> AsyncIterator[Callable[[], None]]:
        """For a short-lived helper of the daemon's (the sandboxed fs program): yields
        the pre-exec hook placing it in a fresh limited cgroup; afterwards kills what
        is left in it and removes it."""
        cgroup = self.create()
        placement = Placement(cgroup.directories)
        try:
            yield placement.preexec
        finally:
            placement.close()
            cgroup.kill()
            if not cgroup.remove():
                log.warning("helper cgroup %s still busy", cgroup.directories)

    def close(self) -> None:
        """Daemon shutdown (after every tree was killed): remove what is left of ours."""
        for controller, parent in self._parents.items():
            if self.version == 2:
                prefix = f"proc-{os.getpid()}-"
                with contextlib.suppress(OSError):
                    for name in os.listdir(parent):
                        if name.startswith(prefix):
                            with contextlib.suppress(OSError):
                                os.rmdir(os.path.join(parent, name))
            else:
                with contextlib.suppress(OSError):
                    for name in os.listdir(parent):
                        if name.startswith("p") and name[1:].isdigit():
                            with contextlib.suppress(OSError):
                                os.rmdir(os.path.join(parent, name))
                with contextlib.suppress(OSError):
                    os.rmdir(parent)
            del controller


def _missing_message(needed: set[str], host: HostCgroups) -> str:
    flags = " and ".join(FLAGS[n] for n in sorted(needed))
    verb = "needs" if len(needed) == 1 else "need"
    missing_v2 = host.problems.get("v2")
    if missing_v2 is None and host.v2_dir is not None:
        lacking = sorted(needed - host.v2_controllers)
        missing_v2 = f"{host.v2_dir} lacks the {', '.join(lacking)} controller(s)"
    lacking_v1 = [host.problems[n] for n in sorted(needed) if n not in host.v1_dirs]
    return (
        f"{flags} {verb} cgroup controllers delegated to this daemon: cgroup v2: {missing_v2}; "
        f"cgroup v1: {'; '.join(lacking_v1)}; {DELEGATION_HINT}"
    )


_OURS = re.compile(r"^(?:proc|execserver)-(\d+)(?:-\d+)?$")


def _remove_stale(directory: str) -> None:
    """Empty cgroups a previous daemon (a pid no longer running) left behind when it
    was killed; rmdir refuses any that still has members."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            match = _OURS.match(name)
            if match is None or psutil.pid_exists(int(match.group(1))):
                continue
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                for leaf in os.listdir(path):
                    if os.path.isdir(os.path.join(path, leaf)):
                        with contextlib.suppress(OSError):
                            os.rmdir(os.path.join(path, leaf))
            with contextlib.suppress(OSError):
                os.rmdir(path)


def _setup_v2(directory: str, needed: set[str]) -> None:
    """Enable the controllers for our children; v2 lets only a cgroup without
    processes do so, so the members of ours move into a leaf first."""
    control = os.path.join(directory, "cgroup.subtree_control")
    enabled = set((read_file(control) or "").split())
    if needed <= enabled:
        return
    request = " ".join(f"+{name}" for name in sorted(needed))
    try:
        write_file(control, request)
        return
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
    leaf = os.path.join(directory, DAEMON_LEAF)
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf, 0o755)
    for pid in member_pids(os.path.join(directory, "cgroup.procs")):
        with contextlib.suppress(ProcessLookupError):
            try:
                write_file(os.path.join(leaf, "cgroup.procs"), str(pid))
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
    write_file(control, request)


def open_process_cgroups(limits: ProcessLimitsConfig) -> ProcessCgroups | None:
    """None without limits (nothing changes); raises ContainmentError when they cannot
    be applied. The daemon then refuses to start: fail closed, like the sandbox."""
    if not limits.requested:
        return None
    needed = {
        name
        for name, value in (
            ("memory", limits.memory_max_bytes),
            ("pids", limits.pids_max),
            ("cpu", limits.cpu_max_cores),
        )
        if value is not None
    }
    host = probe_host(limits.cgroup_root)
    cgroups: ProcessCgroups
    try:
        if host.v2_usable(needed):
            assert host.v2_dir is not None
            # cpu is enabled for the CPU-time accounting even without a CPU limit.
            wanted = needed | ({"cpu", "memory"} & host.v2_controllers)
            _remove_stale(host.v2_dir)
            _setup_v2(host.v2_dir, wanted)
            cgroups = ProcessCgroups(limits, 2, {"": host.v2_dir})
        elif host.v1_usable(needed):
            parents: dict[str, str] = {}
            for name in (*sorted(needed), *V1_OPTIONAL):
                if name not in host.v1_dirs:
                    continue
                _remove_stale(host.v1_dirs[name])
                parent = os.path.join(host.v1_dirs[name], f"execserver-{os.getpid()}")
                try:
                    os.makedirs(parent, 0o755, exist_ok=True)
                except OSError:
                    if name in needed:
                        raise
                    continue
                parents[name] = parent
            cgroups = ProcessCgroups(limits, 1, parents)
        else:
            raise ContainmentError(_missing_message(needed, host))
        # Prove that a cgroup with these limits can be made before serving anyone.
        trial = cgroups.create()
        trial.remove()
    except OSError as exc:
        raise ContainmentError(
            f"cannot set up per-process cgroups ({', '.join(FLAGS[n] for n in sorted(needed))}): "
            f"{exc.filename or ''} {exc.strerror}; {DELEGATION_HINT}"
        ) from None
    log.info(
        "per-process limits on cgroup v%d: %s",
        cgroups.version,
        ", ".join(f"{n} in {d}" for n, d in cgroups._parents.items()),
    )
    return cgroups
