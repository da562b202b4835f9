"""A CPU cgroup for the servers under test, as a container or a Kubernetes pod
gives a deployed daemon.

Where a task sits in the root CPU cgroup, a kernel with autogroup (the default of
most distributions' kernels; ``/proc/sys/kernel/sched_autogroup_enabled``) makes
every session a scheduling group of its own. Both servers start each command,
and execserver each fs helper, as a session leader (bwrap's ``--new-session``
too), so on such a machine every busy command weighs as much as the whole
daemon, and with hundreds of agents the daemon's event loop waits for a CPU
behind hundreds of groups. Inside a CPU cgroup other than the root (a container,
a pod, a systemd unit with CPU accounting) the kernel does not use autogroup: the
daemon and its commands share the cgroup's weight task by task.

The benchmark measures the daemons as they are deployed: each server (and so
everything it starts) runs in a fresh cgroup of its own with the cpu controller,
the same for both servers. The agents, the loop-lag probe and the harness stay
where they are. Where no such cgroup can be made (not root, no writable cpu
controller), the servers run where the harness runs and the report says why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from execserver.containment.cgroupfs import read_file
from execserver.containment.host import own_cgroups

__all__ = ["ServerCgroup", "cpu_cgroup_of", "make_server_cgroup"]

CGROUP_ROOT = Path("/sys/fs/cgroup")

# Moves the shell itself (a "0" written to cgroup.procs names the writer), then
# becomes the server: the server's pid is the shell's, so it and every process it
# starts are in the cgroup from their first instruction.
_ENTER = 'printf 0 > "$0" && exec "$@"'


@dataclass(frozen=True)
class ServerCgroup:
    """A cpu cgroup made for one server; ``wrapper`` goes in front of its argv."""

    path: Path
    version: int

    @property
    def wrapper(self) -> list[str]:
        return ["/bin/sh", "-c", _ENTER, str(self.path / "cgroup.procs")]

    def remove(self, linger_s: float = 5.0) -> None:
        """Once the server has stopped: rmdir, after what is still in it ``linger_s``
        seconds later is killed. Blocks while it waits (call it off an event loop)."""
        _remove(self.path, linger_s)


def _cpu_hierarchy() -> tuple[Path, int] | str:
    """Where new cpu cgroups go (the hierarchy's root) and its version, or why none."""
    if os.geteuid() != 0:
        return "not root: cannot make cgroups"
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.shares").exists():
        return v1, 1
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists():
        if "cpu" not in controllers.read_text().split():
            return "cgroup v2 without the cpu controller"
        subtree = CGROUP_ROOT / "cgroup.subtree_control"
        if "cpu" not in subtree.read_text().split():
            try:
                subtree.write_text("+cpu")
            except OSError as error:
                return f"cannot enable the cpu controller: {error.strerror}"
        return CGROUP_ROOT, 2
    return "no cpu cgroup hierarchy"


def _members(path: Path) -> list[int]:
    try:
        return [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def _wait_empty(path: Path, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while _members(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _remove(path: Path, wait_s: float = 5.0) -> None:
    """rmdir once the server's last process has gone (a stopped server's children
    may take a moment to be reaped). What is still there after ``wait_s`` was left
    behind by the server: it is named on stderr and killed."""
    if not _wait_empty(path, wait_s):
        left = _members(path)
        print(
            f"server_cgroup: {len(left)} process(es) left behind in {path}, killed: {left}",
            file=sys.stderr,
            flush=True,
        )
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_empty(path, wait_s)
    try:
        with contextlib.suppress(FileNotFoundError):
            path.rmdir()
    except OSError as error:
        print(f"server_cgroup: cannot remove {path}: {error.strerror}", file=sys.stderr)


def make_server_cgroup(name: str) -> ServerCgroup | str:
    """A fresh cpu cgroup ``<name>-<our pid>-<n>`` at the default weight (the
    caller removes it: ``ServerCgroup.remove``), or a string saying why none could
    be made."""
    found = _cpu_hierarchy()
    if isinstance(found, str):
        return found
    root, version = found
    for attempt in range(100):
        path = root / f"{name}-{os.getpid()}-{attempt}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as error:
            return f"cannot make a cgroup in {root}: {error.strerror}"
        return ServerCgroup(path, version)
    return f"no free cgroup name under {root}"


def cpu_cgroup_of(pid: int) -> str:
    """The CPU cgroup ``pid`` runs in ("/" for the root): its v1 cpu hierarchy's,
    else its v2 one's (the daemon's /proc/PID/cgroup reader)."""
    own = own_cgroups(read_file(f"/proc/{pid}/cgroup"))
    return own.v1.get("cpu") or own.v2 or "/"
