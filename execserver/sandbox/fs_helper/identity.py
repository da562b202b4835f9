"""Who the files a sandbox's mounts sit on are, in a form a later file cannot take.

A long-lived helper's mount view is only as good as the files its mounts sit
on: when the host renames a file over a masked one, or removes a read-only
carve-out, the kernel detaches the helper's mount on that name. The fs helper
pool (``execserver/fs/sandboxed/pool.py``) records these identities when it
starts a helper and compares them before each call.
"""

from __future__ import annotations

import os

from execserver.sandbox.policy import PROTECTED_NAMES, ResolvedPolicy
from execserver.sandbox.statx import statx

__all__ = ["Identity", "lasting_identity", "protected_identity", "rules_identity"]

Identity = tuple[tuple[str, object], ...]


def lasting_identity(path: str) -> object:
    """Who the file at ``path`` (a final symlink not followed) is, in a form a
    later file cannot take over: device, inode and birth time. An inode number
    alone goes to the next file created once this one is gone (ext4 reuses the
    lowest free number); a birth time is new with each file. Where the file
    system keeps no birth time the helper's own mount check is what catches a
    recycled number. None when nothing is there."""
    found = statx(path, follow_symlinks=False, holding_gil=True)
    if found is not None:
        return found
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)  # a libc without statx


def _identity(paths: list[str]) -> Identity:
    return tuple((path, lasting_identity(path)) for path in paths)


def rules_identity(policy: ResolvedPolicy) -> Identity:
    return _identity([r.path for r in policy.rules])


def protected_identity(policy: ResolvedPolicy) -> Identity:
    return _identity(
        [
            os.path.join(r.path, name)
            for r in policy.rules
            if r.access == "write" and r.is_dir
            for name in PROTECTED_NAMES
        ]
    )
