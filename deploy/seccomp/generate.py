"""Regenerate execserver.json from the containers-common runtime default profile.

    python3 deploy/seccomp/generate.py [SOURCE] > deploy/seccomp/execserver.json

SOURCE defaults to /usr/share/containers/seccomp.json (Debian package
golang-github-containers-common: the RuntimeDefault of Podman and CRI-O).
That profile allows more without capabilities than the RuntimeDefault of
Docker and containerd (what most clusters run), so first it is brought down to
theirs: the calls in ``NOT_IN_DOCKER_DEFAULT`` leave its unconditional allow
list (Docker/containerd allow them only with a capability we never grant, or
not at all), and ``clone3`` answers ENOSYS as there, so that libc falls back to
``clone``. Then the five calls bubblewrap needs to build its sandbox
(``BWRAP_SYSCALLS``: user/mount/pid/ipc/net namespaces, bind mounts,
pivot_root) are allowed by one rule of their own, named in its comment. That
rule is the whole difference from the Docker/containerd default posture;
nothing else is added.
"""

from __future__ import annotations

import json
import sys
from typing import Any

DEFAULT_SOURCE = "/usr/share/containers/seccomp.json"
BWRAP_SYSCALLS = ("clone", "mount", "pivot_root", "umount2", "unshare")
# Unconditional in containers-common, capability-gated or absent in Docker's and
# containerd's default: the new mount API (CAP_SYS_ADMIN), setns (CAP_SYS_ADMIN),
# NUMA policy (CAP_SYS_NICE), pidfd_getfd (CAP_SYS_PTRACE), syslog (CAP_SYSLOG),
# reboot (CAP_SYS_BOOT), keyctl (never), the one-argument umount (CAP_SYS_ADMIN).
NOT_IN_DOCKER_DEFAULT = (
    "clone3",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_mempolicy",
    "keyctl",
    "mbind",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "pidfd_getfd",
    "reboot",
    "set_mempolicy",
    "setns",
    "syslog",
    "umount",
)
_ENOSYS = 38
# CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (Docker's mask).
_CLONE_NAMESPACE_FLAGS = 0x7E020000
BWRAP_COMMENT = (
    "execserver: bubblewrap builds its sandbox with these (unshare/clone of user, mount, "
    "pid, ipc and net namespaces; bind mounts; pivot_root; umount2). Docker's and "
    "containerd's default profiles allow them only with CAP_SYS_ADMIN."
)


def generate(source: dict[str, Any]) -> dict[str, Any]:
    profile = json.loads(json.dumps(source))
    moved: set[str] = set()
    for rule in profile["syscalls"]:
        unconditional = (
            rule["action"] == "SCMP_ACT_ALLOW"
            and not rule.get("args")
            and not rule.get("includes")
            and not rule.get("excludes")
        )
        if unconditional:
            moved |= {name for name in rule["names"] if name in BWRAP_SYSCALLS}
            dropped = (*BWRAP_SYSCALLS, *NOT_IN_DOCKER_DEFAULT)
            rule["names"] = [name for name in rule["names"] if name not in dropped]
    missing = set(BWRAP_SYSCALLS) - moved
    # Whatever the source did not allow unconditionally is added here, and only that.
    profile["syscalls"].insert(
        1,
        {
            "names": list(BWRAP_SYSCALLS),
            "action": "SCMP_ACT_ALLOW",
            "args": [],
            "comment": BWRAP_COMMENT
            + (f" Not in the source profile: {', '.join(sorted(missing))}." if missing else ""),
            "includes": {},
            "excludes": {},
        },
    )
    # As Docker/containerd: clone without any namespace flag (fork, threads). The
    # bubblewrap rule above allows every clone; without it this is what is left.
    s390 = {"arches": ["s390", "s390x"]}
    for index, arches in (
        (0, {"includes": {}, "excludes": s390}),
        (1, {"includes": s390, "excludes": {}}),  # s390 passes clone's flags second
    ):
        profile["syscalls"].insert(
            2,
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ALLOW",
                "args": [
                    {
                        "index": index,
                        "value": _CLONE_NAMESPACE_FLAGS,
                        "valueTwo": 0,
                        "op": "SCMP_CMP_MASKED_EQ",
                    }
                ],
                "comment": "as Docker/containerd: clone without namespace flags",
                **arches,
            },
        )
    profile["syscalls"].insert(
        2,
        {
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": _ENOSYS,
            "args": [],
            "comment": "as Docker/containerd: ENOSYS, so that libc falls back to clone",
            "includes": {},
            "excludes": {},
        },
    )
    return profile


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SOURCE
    with open(path, encoding="utf-8") as handle:
        source = json.load(handle)
    sys.stdout.write(json.dumps(generate(source), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
