"""What the host offers the daemon: its own cgroups, the cgroup v2 controllers
delegated to it, the writable v1 hierarchies, and why each missing one is missing
(for the start-up refusal and ``execserver doctor``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from execserver.containment.cgroupfs import join_path, read_file

__all__ = [
    "DELEGATION_HINT",
    "FLAGS",
    "V1_OPTIONAL",
    "HostCgroups",
    "OwnCgroups",
    "cgroup_dir_of",
    "describe_host",
    "own_cgroups",
    "probe_host",
    "v2_mount",
]

# The flag each limit is set by, for messages.
FLAGS: Final = {
    "memory": "--process-memory-max",
    "pids": "--process-pids-max",
    "cpu": "--process-cpu-max",
}
V1_OPTIONAL: Final = ("cpuacct", "freezer")  # accounting and the freeze-kill, when present
DELEGATION_HINT: Final = (
    "run under systemd with Delegate=yes, or give the pod a writable cgroup namespace "
    "(docs/deploying.md, Resource limits)"
)


@dataclass(frozen=True)
class OwnCgroups:
    """This process's cgroup paths: the v2 one and one per v1 controller."""

    v2: str | None
    v1: dict[str, str]


def own_cgroups(text: str | None = None) -> OwnCgroups:
    if text is None:
        text = read_file("/proc/self/cgroup") or ""
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


def v2_mount(root: str) -> str | None:
    """The cgroup2 mount: ``root`` itself (pure v2) or ``root/unified`` (hybrid)."""
    for candidate in (root, os.path.join(root, "unified")):
        if os.path.exists(os.path.join(candidate, "cgroup.controllers")):
            return candidate
    return None


def cgroup_dir_of(pid: int, controller: str, root: str) -> str | None:
    """The directory of ``pid``'s cgroup holding ``controller`` (v1 hierarchy, else v2)."""
    own = own_cgroups(read_file(f"/proc/{pid}/cgroup"))
    if controller in own.v1 and os.path.isdir(os.path.join(root, controller)):
        return join_path(os.path.join(root, controller), own.v1[controller])
    mount = v2_mount(root)
    if mount is not None and own.v2 is not None:
        return join_path(mount, own.v2)
    return None


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
    mount = v2_mount(root)
    if mount is None:
        problems["v2"] = f"no cgroup v2 mounted at {root}"
    elif own.v2 is None:
        problems["v2"] = "this process is in no cgroup v2"
    else:
        directory = join_path(mount, own.v2)
        available = frozenset(
            (read_file(os.path.join(directory, "cgroup.controllers")) or "").split()
        )
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
        directory = join_path(hierarchy, own.v1[name])
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
