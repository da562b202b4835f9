"""One cgroup per started process tree: limits, placement, accounting, tree kill.

Where the cgroups live:

* **cgroup v2** when the daemon's own cgroup is delegated to it (systemd
  ``Delegate=yes``, a Kubernetes pod with a writable cgroup namespace) and offers
  the needed controllers. v2 lets a cgroup with processes enable no controllers
  for its children, so the daemon first moves the members of its cgroup into a
  leaf (``execserver.daemon``) and then creates ``proc-<daemon pid>-<n>`` siblings.
* **cgroup v1** otherwise: a writable memory / pids / cpu hierarchy (plus
  cpuacct for CPU time and freezer for the kill, when present); each gets
  ``execserver-<daemon pid>/p<n>`` under the daemon's own cgroup there.

The child is placed by itself between fork and exec (``Placement.preexec``
writes ``0`` — "the writing process" — into each ``cgroup.procs`` opened by the
parent). That is race-free: the command's first instruction already runs inside
its cgroup, and so does any process it forks. Moving the pid from the parent
after the spawn would leave a window in which the child can fork a descendant
outside the limits; ``clone3(CLONE_INTO_CGROUP)`` would avoid the Python
pre-exec hook but no spawn API of the standard library reaches it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Final

import psutil

from execserver.config import ProcessLimitsConfig

__all__ = [
    "CgroupUsage",
    "ContainmentError",
    "OwnCgroups",
    "ProcessCgroup",
    "ProcessCgroups",
    "active",
    "cgroup_dir_of",
    "contained_helper",
    "describe_host",
    "open_process_cgroups",
    "own_cgroups",
    "parse_size",
    "probe_host",
]

log = logging.getLogger(__name__)

# The flag each limit is set by, for messages.
FLAGS: Final = {
    "memory": "--process-memory-max",
    "pids": "--process-pids-max",
    "cpu": "--process-cpu-max",
}
V1_OPTIONAL: Final = ("cpuacct", "freezer")  # accounting and the freeze-kill, when present
CPU_PERIOD_US: Final = 100_000
DAEMON_LEAF: Final = "execserver.daemon"
DELEGATION_HINT: Final = (
    "run under systemd with Delegate=yes, or give the pod a writable cgroup namespace "
    "(docs/deploying.md, Resource limits)"
)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ContainmentError(Exception):
    """Limits were asked for and cannot be applied: the daemon refuses to start."""


def parse_size(text: str) -> int:
    """``2G``, ``512M``, ``100m``, ``1.5G``, ``65536``: bytes (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"invalid size {text!r} (expected e.g. 512M, 2G or a byte count)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value < 1:
        raise ValueError(f"invalid size {text!r}: must be positive")
    return value


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def _keyed(text: str | None, key: str) -> int:
    """``key N`` line of a flat-keyed file (memory.events, cpu.stat, ...); 0 if absent."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _pids(path: str) -> list[int]:
    return [int(p) for p in (_read(path) or "").split()]


# ---- what the host offers ----------------------------------------------------------


@dataclass(frozen=True)
class OwnCgroups:
    """This process's cgroup paths: the v2 one and one per v1 controller."""

    v2: str | None
    v1: dict[str, str]


def own_cgroups(text: str | None = None) -> OwnCgroups:
    if text is None:
        text = _read("/proc/self/cgroup") or ""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        else:
            for name in controllers.split(","):
                v1[name] = path
    return OwnCgroups(v2, v1)


def _v2_mount(root: str) -> str | None:
    """The cgroup2 mount: ``root`` itself (pure v2) or ``root/unified`` (hybrid)."""
    for candidate in (root, os.path.join(root, "unified")):
        if os.path.exists(os.path.join(candidate, "cgroup.controllers")):
            return candidate
    return None


def cgroup_dir_of(pid: int, controller: str, root: str) -> str | None:
    """The directory of ``pid``'s cgroup holding ``controller`` (v1 hierarchy, else v2)."""
    own = own_cgroups(_read(f"/proc/{pid}/cgroup"))
    if controller in own.v1 and os.path.isdir(os.path.join(root, controller)):
        return _join(os.path.join(root, controller), own.v1[controller])
    mount = _v2_mount(root)
    if mount is not None and own.v2 is not None:
        return _join(mount, own.v2)
    return None


def _join(mount: str, path: str) -> str:
    return os.path.join(mount, path.lstrip("/")).rstrip("/") or "/"


@dataclass(frozen=True)
class HostCgroups:
    """What the daemon may use: the v2 cgroup and its delegated controllers, and the
    writable v1 hierarchies; ``problems`` says why each missing one is missing."""

    v2_dir: str | None
    v2_controllers: frozenset[str]
    v1_dirs: dict[str, str]
    problems: dict[str, str]

    def v2_usable(self, needed: set[str]) -> bool:
        return self.v2_dir is not None and needed <= self.v2_controllers

    def v1_usable(self, needed: set[str]) -> bool:
        return needed <= set(self.v1_dirs)


def probe_host(root: str, own: OwnCgroups | None = None) -> HostCgroups:
    own = own or own_cgroups()
    problems: dict[str, str] = {}
    v2_dir: str | None = None
    v2_controllers: frozenset[str] = frozenset()
    mount = _v2_mount(root)
    if mount is None:
        problems["v2"] = f"no cgroup v2 mounted at {root}"
    elif own.v2 is None:
        problems["v2"] = "this process is in no cgroup v2"
    else:
        directory = _join(mount, own.v2)
        available = frozenset((_read(os.path.join(directory, "cgroup.controllers")) or "").split())
        if not (
            os.access(directory, os.W_OK)
            and os.access(os.path.join(directory, "cgroup.subtree_control"), os.W_OK)
            and os.access(os.path.join(directory, "cgroup.procs"), os.W_OK)
        ):
            problems["v2"] = f"{directory} is not delegated (not writable by this user)"
        elif not available & set(FLAGS):
            problems["v2"] = f"{directory} offers none of memory, pids, cpu"
            v2_dir = directory
        else:
            v2_dir = directory
        v2_controllers = available if v2_dir is not None else frozenset()
    v1_dirs: dict[str, str] = {}
    for name in (*FLAGS, *V1_OPTIONAL):
        hierarchy = os.path.join(root, name)
        if not os.path.exists(os.path.join(hierarchy, "cgroup.procs")):
            problems[name] = f"no cgroup v1 {name} hierarchy at {hierarchy}"
            continue
        if name not in own.v1:
            problems[name] = f"this process is in no v1 {name} cgroup"
            continue
        directory = _join(hierarchy, own.v1[name])
        if not os.access(directory, os.W_OK):
            problems[name] = f"{directory} is not writable by this user"
            continue
        v1_dirs[name] = directory
    return HostCgroups(v2_dir, v2_controllers, v1_dirs, problems)


def describe_host(root: str) -> list[tuple[str, bool, str]]:
    """``execserver doctor``: (what, usable, detail) per cgroup version."""
    host = probe_host(root)
    rows: list[tuple[str, bool, str]] = []
    if host.v2_dir is not None:
        usable = sorted(host.v2_controllers & set(FLAGS))
        rows.append(
            (
                "v2",
                bool(usable),
                f"{host.v2_dir}: " + (", ".join(usable) if usable else "no memory/pids/cpu"),
            )
        )
    else:
        rows.append(("v2", False, host.problems.get("v2", "unavailable")))
    v1 = [name for name in (*FLAGS, *V1_OPTIONAL) if name in host.v1_dirs]
    rows.append(
        (
            "v1",
            any(name in host.v1_dirs for name in FLAGS),
            ", ".join(v1) + " writable" if v1 else host.problems.get("memory", "unavailable"),
        )
    )
    needed = set(FLAGS)
    if host.v2_usable(needed):
        verdict = "all three limits usable (cgroup v2)"
    elif host.v1_usable(needed):
        verdict = "all three limits usable (cgroup v1)"
    else:
        usable = sorted(n for n in FLAGS if host.v2_usable({n}) or host.v1_usable({n}))
        verdict = (
            "usable: " + ", ".join(FLAGS[n] for n in usable)
            if usable
            else "no --process-*-max limit usable: " + DELEGATION_HINT
        )
    rows.append(("limits", host.v2_usable(needed) or host.v1_usable(needed), verdict))
    return rows


# ---- one process tree's cgroup -------------------------------------------------------


@dataclass(frozen=True)
class CgroupUsage:
    peak_memory_bytes: int | None
    cpu_s: float | None
    oom_kills: int  # processes of the tree the memory limit killed
    pids_refused: int  # forks refused by the pids limit


class Placement:
    """``cgroup.procs`` of each hierarchy, opened by the parent; ``preexec`` runs in
    the forked child before exec (see the module docstring for why there)."""

    def __init__(self, directories: list[str]) -> None:
        self._fds: list[int] = []
        try:
            for directory in directories:
                self._fds.append(
                    os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
                )
        except OSError:
            self.close()
            raise

    def preexec(self) -> None:  # pragma: no cover - runs in the forked child
        # Only a write per fd: nothing that could take a lock another thread of the
        # daemon held at fork time. An error aborts the spawn (fail closed).
        for fd in self._fds:
            os.write(fd, b"0")

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

    def _dir(self, controller: str) -> str | None:
        if self.version == 2:
            return self._dirs[""]
        return self._dirs.get(controller)

    @contextlib.contextmanager
    def placement(self) -> Iterator[Callable[[], None]]:
        placement = Placement(self.directories)
        try:
            yield placement.preexec
        finally:
            placement.close()

    def pids(self) -> list[int]:
        found: list[int] = []
        for directory in self.directories:
            found.extend(
                p for p in _pids(os.path.join(directory, "cgroup.procs")) if p not in found
            )
        return found

    def populated(self) -> bool:
        if self.removed:
            return False
        if self.version == 2:
            return _keyed(_read(os.path.join(self._dirs[""], "cgroup.events")), "populated") == 1
        return bool(self.pids())

    def kill(self) -> None:
        """SIGKILL every member: ``cgroup.kill`` on v2 (atomic, forks included); else
        freeze, kill what is listed, thaw, until empty (a frozen cgroup cannot fork)."""
        if self.removed:
            return
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(os.path.join(self._dirs[""], "cgroup.kill"), "1")
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
            _write(path, value)
        except OSError:
            return False
        if not freeze:
            return True
        # Freezing completes asynchronously; a few reads cover it (no sleep on the loop).
        state_file = os.path.join(self._dirs[""], "cgroup.events") if self.version == 2 else path
        for _ in range(200):
            state = _read(state_file) or ""
            if (done in state) if self.version == 2 else state.strip() == done:
                break
        return True

    def usage(self) -> CgroupUsage:
        if self.version == 2:
            directory = self._dirs[""]
            peak = _int(_read(os.path.join(directory, "memory.peak")))
            usec = _keyed(_read(os.path.join(directory, "cpu.stat")), "usage_usec")
            cpu = usec / 1e6 if os.path.exists(os.path.join(directory, "cpu.stat")) else None
            oom = _keyed(_read(os.path.join(directory, "memory.events")), "oom_kill")
            refused = _keyed(_read(os.path.join(directory, "pids.events")), "max")
            return CgroupUsage(peak, cpu, oom, refused)
        memory = self._dirs.get("memory")
        cpuacct = self._dirs.get("cpuacct")
        pids = self._dirs.get("pids")
        peak = _int(_read(os.path.join(memory, "memory.max_usage_in_bytes"))) if memory else None
        nanos = _int(_read(os.path.join(cpuacct, "cpuacct.usage"))) if cpuacct else None
        oom = _keyed(_read(os.path.join(memory, "memory.oom_control")), "oom_kill") if memory else 0
        refused = _keyed(_read(os.path.join(pids, "pids.events")), "max") if pids else 0
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


# ---- the daemon's factory ------------------------------------------------------------


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
                target = cgroup._dir(controller)
                assert target is not None
                try:
                    _write(os.path.join(target, name), value)
                except OSError:
                    if name not in _OPTIONAL_FILES:
                        raise
            return cgroup
        except BaseException:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
            raise

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
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None


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
    enabled = set((_read(control) or "").split())
    if needed <= enabled:
        return
    request = " ".join(f"+{name}" for name in sorted(needed))
    try:
        _write(control, request)
        return
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
    leaf = os.path.join(directory, DAEMON_LEAF)
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf, 0o755)
    for pid in _pids(os.path.join(directory, "cgroup.procs")):
        with contextlib.suppress(ProcessLookupError):
            try:
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
    _write(control, request)


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
    global _ACTIVE
    _ACTIVE = cgroups
    log.info(
        "per-process limits on cgroup v%d: %s",
        cgroups.version,
        ", ".join(f"{n} in {d}" for n, d in cgroups._parents.items()),
    )
    return cgroups


# The daemon's factory, for spawners that get no runtime (the sandboxed fs helper).
# One daemon per process: set when the server opens it, cleared when it closes.
_ACTIVE: ProcessCgroups | None = None


def active() -> ProcessCgroups | None:
    return _ACTIVE


@contextlib.asynccontextmanager
async def contained_helper() -> AsyncIterator[Callable[[], None] | None]:
    """For a short-lived helper (the sandboxed fs runner): yields the pre-exec hook
    placing it in a fresh limited cgroup (None without limits); afterwards kills what
    is left in it and removes it."""
    factory = _ACTIVE
    if factory is None:
        yield None
        return
    cgroup = factory.create()
    placement = Placement(cgroup.directories)
    try:
        yield placement.preexec
    finally:
        placement.close()
        cgroup.kill()
        if not cgroup.remove():
            log.warning("fs helper cgroup %s still busy", cgroup.directories)
