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

With ``--tenants``, each principal has a group of its own between the daemon's
cgroup and its processes' (``tenant-<daemon pid>-<name>`` on v2,
``execserver-<daemon pid>/tenant-<name>`` on v1), holding the principal's quota
(memory, pids, CPU over everything it runs); a process's own limits sit inside
it. The kernel enforces a parent's limit over all its descendants, so no
tenant's processes can take another's share however many it starts.

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
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

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


def needed_controllers(limits: ProcessLimitsConfig) -> set[str]:
    """The controllers ``limits`` needs delegated."""
    return {
        name
        for name, value in (
            ("memory", limits.memory_max_bytes),
            ("pids", limits.pids_max),
            ("cpu", limits.cpu_max_cores),
        )
        if value is not None
    }


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


def _weight_files(
    version: int, controllers: frozenset[str], child_nice: int
) -> list[tuple[str, str, str]]:
    """(controller, file, value) that give a cgroup made beside the daemon's own the
    weight of ``child_nice`` nice steps (--child-nice). On v2 the processes' cgroups
    and the principals' groups are siblings of the daemon's leaf, where a thread's
    nice value does not reach: at the default weight each busy one would count as
    much as the daemon's event loop. On v1 they all sit in one ``execserver-<pid>``
    cgroup, which weighs as much as one of the daemon's threads already."""
    if version != 2 or "cpu" not in controllers or child_nice <= 0:
        return []
    return [("cpu", "cpu.weight.nice", str(child_nice))]


# Files that may be missing without weakening the limit the flag asked for
# (swap accounting is off on many kernels: then there is no swap to escape into).
_OPTIONAL_FILES: Final = {"memory.swap.max", "memory.memsw.limit_in_bytes"}
_CONTROLLERS: Final = ("memory", "pids", "cpu")
# A principal's group's leaf for its processes without a cgroup of their own
# (``ProcessCgroups.per_process``).
GROUP_MEMBERS: Final = "members"


def _group_files(version: int, quota: ProcessLimitsConfig) -> list[tuple[str, str, str]]:
    """(controller, file, value) to write into a principal's group, in this order: its
    quota, and "no limit" for what the quota leaves out, so that a reload that drops
    or raises a limit lifts it. v1 refuses a memory limit above the memory+swap one,
    so that one is lifted first and set again last."""
    files: list[tuple[str, str, str]] = []
    if version == 2:
        if quota.memory_max_bytes is None:
            files += [("memory", "memory.max", "max"), ("memory", "memory.swap.max", "max")]
        if quota.pids_max is None:
            files.append(("pids", "pids.max", "max"))
        if quota.cpu_max_cores is None:
            files.append(("cpu", "cpu.max", f"max {CPU_PERIOD_US}"))
    else:
        files.append(("memory", "memory.memsw.limit_in_bytes", "-1"))
        if quota.memory_max_bytes is None:
            files.append(("memory", "memory.limit_in_bytes", "-1"))
        if quota.pids_max is None:
            files.append(("pids", "pids.max", "max"))
        if quota.cpu_max_cores is None:
            files.append(("cpu", "cpu.cfs_quota_us", "-1"))
    return files + _limit_files(version, quota)


class ProcessCgroups:
    """Creates the per-process cgroups of one daemon (``runtime.containment``)."""

    def __init__(
        self,
        limits: ProcessLimitsConfig,
        version: int,
        parents: dict[str, str],
        controllers: frozenset[str] = frozenset(),
        child_nice: int = 0,
    ) -> None:
        self.limits = limits
        self.version = version
        self._parents = parents  # v2: {"": dir}; v1: {controller: execserver-<pid> dir}
        # The controllers enabled for our children (v2: what a group passes on).
        self._controllers = controllers
        self._counter = itertools.count(1)
        self._files = _limit_files(version, limits)
        # Only for the cgroups made beside the daemon's (_weight_files).
        self._weights = _weight_files(version, controllers, child_nice)
        # Per principal: the directories its processes' cgroups are made in.
        self._groups: dict[str, dict[str, str]] = {}
        self.group_limits: dict[str, ProcessLimitsConfig] = {}
        # Per group (None: the daemon's own), the cgroup the next create takes,
        # made by ``prepare`` after a spawn rather than on the next one's path.
        self._ready: dict[str | None, ProcessCgroup] = {}
        self._preparing = threading.Lock()
        self._closed = False

    def create(self, group: str | None = None) -> ProcessCgroup:
        """A new cgroup with the limits set, inside ``group``'s (a principal's) when
        given; raises OSError (the caller fails the start): a principal without its
        group has no process of its own outside its quota. The one ``prepare`` made,
        when it is still there."""
        ready = self._ready.pop(group, None)
        if ready is not None:
            if all(os.path.isdir(d) for d in ready.directories):
                return ready
            ready.remove()  # its parent went (removed as stale by another daemon)
        return self._make(group)

    @property
    def per_process(self) -> bool:
        """Whether each process gets a cgroup of its own: only for per-process limits
        (``--process-*-max``). A principal's quota alone bounds the principal as a
        whole, so its processes go straight into its group's shared leaf
        (``group_placement``): no cgroup to make, read or remove per spawn. Their
        tree kill is then the supervisor's (/proc), as for any process without
        per-process limits, and their figures come from rusage."""
        return self.limits.requested

    def group_placement(self, group: str) -> Placement:
        """The placement into ``group``'s shared leaf (see ``per_process``); raises
        OSError when the principal has no group. Close it after the spawn."""
        return Placement(self.group_members(group), self.version)

    def group_members(self, group: str) -> list[str]:
        """The directories of ``group``'s shared leaf, one per hierarchy (hierarchies
        mounted together appear once)."""
        found = self._groups.get(group)
        if found is None:
            raise OSError(errno.ENOENT, f"no cgroup for tenant {group}")
        return list(dict.fromkeys(os.path.join(d, GROUP_MEMBERS) for d in found.values()))

    def prepare(self, group: str | None = None) -> None:
        """Make ``group``'s next cgroup now, off the next spawn's path: its directories
        and limit files (0.15 ms with three v1 hierarchies, more with five). Safe in
        a worker thread, where the daemon calls it. A failure is left for that
        spawn's ``create`` to meet and report."""
        with self._preparing:
            if self._closed or group in self._ready:
                return
            with contextlib.suppress(OSError):
                self._ready[group] = self._make(group)

    def _make(self, group: str | None) -> ProcessCgroup:
        if group is None:
            parents = self._parents
        else:
            found = self._groups.get(group)
            if found is None:
                raise OSError(errno.ENOENT, f"no cgroup for tenant {group}")
            parents = found
        n = next(self._counter)
        leaf = f"proc-{os.getpid()}-{n}" if self.version == 2 else f"p{n}"
        dirs, made = _make_dirs(parents, leaf, exist_ok=False)
        try:
            cgroup = ProcessCgroup(self.version, dirs)
            for controller, name, value in self._files:
                target = cgroup.directory_of(controller)
                assert target is not None
                try:
                    write_file(os.path.join(target, name), value)
                except OSError:
                    if name not in _OPTIONAL_FILES:
                        raise
            if group is None:
                _write_weights(cgroup.directory_of("cpu"), self._weights)
            return cgroup
        except BaseException:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
            raise

    def set_groups(self, quotas: Mapping[str, ProcessLimitsConfig]) -> None:
        """Make (or update) a group per principal with its quota, at start-up and on
        each reload. Raises ContainmentError when a quota cannot be applied: the
        caller then refuses to start, or keeps the previous tenants table. A group
        whose principal is gone stays until its processes have ended (``close``)."""
        lacking = set().union(*map(needed_controllers, quotas.values())) - set(
            self._controllers if self.version == 2 else self._parents
        )
        if lacking:
            raise ContainmentError(
                f"tenant quotas need the {', '.join(sorted(lacking))} cgroup controller(s), "
                "which this daemon's cgroups do not have (they are chosen at start-up)"
            )
        groups: dict[str, dict[str, str]] = {}
        try:
            for name, quota in quotas.items():
                groups[name] = self._make_group(name, quota)
        except OSError as exc:
            raise ContainmentError(
                f"cannot set up the cgroup of tenant {name}: {exc.filename or ''} {exc.strerror}"
            ) from None
        self._groups.update(groups)
        self.group_limits = dict(quotas)

    def _make_group(self, name: str, quota: ProcessLimitsConfig) -> dict[str, str]:
        leaf = f"tenant-{os.getpid()}-{name}" if self.version == 2 else f"tenant-{name}"
        # Kept when it exists: a reload updates the group its processes are in.
        dirs, _ = _make_dirs(self._parents, leaf, exist_ok=True)
        if self.version == 2 and self._controllers:
            # A group holds no process itself, so it may pass the controllers on.
            control = os.path.join(dirs[""], "cgroup.subtree_control")
            write_file(control, " ".join(f"+{c}" for c in sorted(self._controllers)))
        target: dict[str, str | None] = {
            c: (dirs[""] if c in self._controllers else None) if self.version == 2 else dirs.get(c)
            for c in _CONTROLLERS
        }
        for controller, file, value in _group_files(self.version, quota):
            place = target[controller]
            if place is None:
                continue  # a controller no quota needs (checked by set_groups)
            try:
                write_file(os.path.join(place, file), value)
            except OSError:
                if file not in _OPTIONAL_FILES:
                    raise
        _write_weights(target["cpu"], self._weights)
        # The leaf its processes without a cgroup of their own share: on v2 a
        # group that passes controllers on may hold no process itself.
        _make_dirs(dirs, GROUP_MEMBERS, exist_ok=True)
        return dirs

    @contextlib.asynccontextmanager
    async def helper_cgroup(self) -> AsyncIterator[Callable[[], None]]:
        """For a short-lived helper of the daemon's (the sandboxed fs program): yields
        the pre-exec hook placing it in a fresh limited cgroup; afterwards kills what
        is left in it and removes it."""
        cgroup = self.create()
        placement = Placement(cgroup.directories, cgroup.version)
        try:
            yield placement.preexec
        finally:
            placement.close()
            cgroup.kill()
            if not cgroup.remove():
                log.warning("helper cgroup %s still busy", cgroup.directories)

    def close(self) -> None:
        """Daemon shutdown (after every tree was killed): remove what is left of ours."""
        with self._preparing:
            self._closed = True
            self._ready.clear()  # among what is left: removed below with the rest
        pid = os.getpid()
        for parent in self._parents.values():
            with contextlib.suppress(OSError):
                names = os.listdir(parent)
            for name in names:
                if self.version == 2:
                    ours = name.startswith((f"proc-{pid}-", f"tenant-{pid}-"))
                else:
                    ours = (name.startswith("p") and name[1:].isdigit()) or name.startswith(
                        "tenant-"
                    )
                if ours:
                    _remove_tree(os.path.join(parent, name))
            if self.version == 1:
                with contextlib.suppress(OSError):
                    os.rmdir(parent)


def _write_weights(directory: str | None, files: list[tuple[str, str, str]]) -> None:
    """The weight files (``_weight_files``); one the kernel refuses is skipped, as a
    weight is a preference, not a limit anyone asked to be enforced."""
    if directory is None:
        return
    for _, name, value in files:
        with contextlib.suppress(OSError):
            write_file(os.path.join(directory, name), value)


def _asked_by(limits: ProcessLimitsConfig, for_tenants: set[str]) -> str:
    """What asked for the cgroups: the --process-* flags, the tenants' quotas."""
    asked = [FLAGS[n] for n in sorted(needed_controllers(limits))]
    if for_tenants:
        asked.append("the tenants' quotas")
    return ", ".join(asked)


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


_OURS = re.compile(r"^(?:proc|execserver|tenant)-(\d+)(?:-[\w.-]+)?$")


def _make_dirs(
    parents: Mapping[str, str], leaf: str, *, exist_ok: bool
) -> tuple[dict[str, str], list[str]]:
    """``leaf`` under each controller's parent: (controller -> its directory, the
    directories made, by real path). Hierarchies mounted together (v1 ``cpu,cpuacct``)
    share one directory, made once. On failure nothing made here is left."""
    dirs: dict[str, str] = {}
    made: list[str] = []
    try:
        for controller, parent in parents.items():
            directory = os.path.join(parent, leaf)
            real = os.path.join(os.path.realpath(parent), leaf)
            if real not in made:
                try:
                    os.mkdir(directory, 0o755)
                    made.append(real)
                except FileExistsError:
                    if not exist_ok:
                        raise
                except FileNotFoundError:
                    # Our v1 parent was removed under us (e.g. as stale by a
                    # daemon in another pid namespace): make it again.
                    os.makedirs(directory, 0o755)
                    made.append(real)
            dirs[controller] = directory
    except BaseException:
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    return dirs, made


def _remove_tree(directory: str, depth: int = 3) -> None:
    """rmdir ``directory`` and the cgroups under it, deepest first; one that still has
    members stays (rmdir refuses it), and so do its parents."""
    if depth > 0:
        with contextlib.suppress(OSError):
            for entry in os.scandir(directory):
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path, depth - 1)
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def _remove_stale(directory: str) -> None:
    """Empty cgroups a previous daemon (a pid no longer running) left behind when it
    was killed: its process cgroups, its tenants' groups and what is in them."""
    import psutil  # here: a daemon without per-process limits never needs it

    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            match = _OURS.match(name)
            if match is None or psutil.pid_exists(int(match.group(1))):
                continue
            _remove_tree(os.path.join(directory, name))


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


def open_process_cgroups(
    limits: ProcessLimitsConfig,
    quotas: Mapping[str, ProcessLimitsConfig] | None = None,
    child_nice: int = 0,
) -> ProcessCgroups | None:
    """None without limits (nothing changes); raises ContainmentError when they cannot
    be applied. The daemon then refuses to start: fail closed, like the sandbox.

    ``quotas``: with --tenants, each principal's quota (an empty config for one
    without). Any quota set opens the factory even without per-process limits;
    whenever it is open, every principal gets its group. ``child_nice``: the
    --child-nice steps, as a CPU weight where a nice value does not reach
    (``_weight_files``)."""
    quotas = quotas or {}
    for_tenants = set().union(*map(needed_controllers, quotas.values()))
    if not limits.requested and not for_tenants:
        return None
    needed = needed_controllers(limits) | for_tenants
    host = probe_host(limits.cgroup_root)
    cgroups: ProcessCgroups
    try:
        if host.v2_usable(needed):
            assert host.v2_dir is not None
            # cpu is enabled for the CPU-time accounting even without a CPU limit.
            wanted = needed | ({"cpu", "memory"} & host.v2_controllers)
            _remove_stale(host.v2_dir)
            _setup_v2(host.v2_dir, wanted)
            cgroups = ProcessCgroups(limits, 2, {"": host.v2_dir}, frozenset(wanted), child_nice)
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
            cgroups = ProcessCgroups(limits, 1, parents, frozenset(parents), child_nice)
        else:
            what = _missing_message(needed, host)
            if for_tenants:
                what = f"the tenants' quotas: {what}"
            raise ContainmentError(what)
        # Prove that a cgroup with these limits can be made before serving anyone.
        trial = cgroups.create()
        trial.remove()
    except OSError as exc:
        raise ContainmentError(
            f"cannot set up per-process cgroups ({_asked_by(limits, for_tenants)}): "
            f"{exc.filename or ''} {exc.strerror}; {DELEGATION_HINT}"
        ) from None
    if quotas:
        # Every principal gets its group, quota or not: its processes are all in it.
        cgroups.set_groups(quotas)
    log.info(
        "per-process limits on cgroup v%d: %s",
        cgroups.version,
        ", ".join(f"{n} in {d}" for n, d in cgroups._parents.items()),
    )
    return cgroups
