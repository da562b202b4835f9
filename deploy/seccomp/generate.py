"""Regenerate execserver.json from the containers-common runtime default profile.

    python3 deploy/seccomp/generate.py [SOURCE] > deploy/seccomp/execserver.json

SOURCE defaults to /usr/share/containers/seccomp.json (Debian package
golang-github-containers-common: the RuntimeDefault of Podman and CRI-O).
The output is that profile, rule for rule, except that the syscalls
bubblewrap needs to build its sandbox (user/mount/pid/ipc/net namespaces,
bind mounts, pivot_root) are moved out of the big allow list into one rule of
their own, named in its comment. That rule is the whole difference from a
Docker or containerd RuntimeDefault, which allow these only with
CAP_SYS_ADMIN (never granted here). Nothing else is added.
"""

from __future__ import annotations

import json
import sys
from typing import Any

DEFAULT_SOURCE = "/usr/share/containers/seccomp.json"
BWRAP_SYSCALLS = ("clone", "mount", "pivot_root", "umount2", "unshare")
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
            rule["names"] = [name for name in rule["names"] if name not in BWRAP_SYSCALLS]
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
    return profile


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SOURCE
    with open(path, encoding="utf-8") as handle:
        source = json.load(handle)
    sys.stdout.write(json.dumps(generate(source), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
