"""Whether every mounted file system is local, so a stat cannot hang.

Blocking file I/O goes to worker threads so that a slow file system (NFS,
FUSE, ...) can never stall the event loop. For the cheap metadata calls
(fs/getMetadata, fs/canonicalize) the thread hop costs ~60 us against ~1.5 us
for the stat itself, which made pipelined metadata calls 3.7x slower than
the reference (benchmarks/). Those calls run inline when the mount table
holds no network or user-space file system at all: any path, symlinks
included, then resolves on local storage. The table is re-read every few
seconds, so a mount added later sends the calls back to threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LOCAL_MOUNTS", "LocalMounts", "all_local", "mount_types"]

RECHECK_S = 5.0
# File system types (or prefixes) whose calls may block on a network or a user-space server.
_SLOW_TYPES = (
    "nfs",
    "cifs",
    "smb",
    "fuse",
    "9p",
    "ceph",
    "glusterfs",
    "lustre",
    "gfs",
    "ocfs",
    "afs",
    "virtiofs",
    "davfs",
    "sshfs",
    "beegfs",
    "gpfs",
)


def mount_types() -> list[str]:
    """The file system type of each mount of this process's mount namespace (psutil
    reads /proc/self/mounts: ~0.3 ms, once per RECHECK_S)."""
    # Imported here, by the first fs call: not every daemon makes one, and psutil is
    # ~10 ms of a start.
    import psutil

    return [partition.fstype for partition in psutil.disk_partitions(all=True)]


def all_local(types: list[str]) -> bool:
    return not any(t.startswith(_SLOW_TYPES) for t in types)


class LocalMounts:
    def __init__(
        self, read_types: Callable[[], list[str]] = mount_types, recheck_s: float = RECHECK_S
    ) -> None:
        self._read_types = read_types
        self._recheck_s = recheck_s
        self._checked_at = float("-inf")
        self._local = False

    def all_local(self) -> bool:
        now = time.monotonic()
        if now - self._checked_at >= self._recheck_s:
            try:
                self._local = all_local(self._read_types())
            except OSError:
                self._local = False  # unknown: stay on the safe side
            self._checked_at = now
        return self._local


LOCAL_MOUNTS = LocalMounts()
