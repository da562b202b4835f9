"""The persistent fs helper's check that its mount view is still the one it
was started with (runs inside the helper).

A helper's masks (denied files) and read-only carve-outs are mounts on host
files. When the host renames a file over a masked one, or removes a carve-out
directory, the kernel detaches those mounts in every namespace, the helper's
too: the name would then be served unmasked. The daemon compares file
identities before each call; this is the second, independent line, in the
helper, against whatever the first one misses.

``/proc/self/mountinfo`` reports a change of the namespace's mount table as a
priority event on poll(2) (proc(5)), so the common case — nothing changed —
costs one zero-timeout poll. On an event the table is read again; when a mount
of the start-up table is missing the view is broken for good: every later call
is refused (the daemon then starts a fresh helper). A mount that is *added* (the
host's mounts propagate into the sandbox's slave mounts) takes nothing away.
"""

from __future__ import annotations

import _thread
import os
import select

# Runs in the sandboxed fs helper: no typing or threading at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["MountWatch"]

MOUNTINFO: Final = "/proc/self/mountinfo"
_CHUNK: Final = 65536


class MountWatch:
    def __init__(self, path: str = MOUNTINFO) -> None:
        # Opened before the baseline is read: a change after the open is an event.
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLPRI)
        self._lock = _thread.allocate_lock()
        self._baseline = self._mounts()
        self.broken: str | None = None

    def _mounts(self) -> dict[int, str]:
        """Mount id -> mount point, read from the start of the table."""
        os.lseek(self._fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self._fd, _CHUNK):
            chunks.append(chunk)
        mounts: dict[int, str] = {}
        for line in b"".join(chunks).splitlines():
            fields = line.split(b" ", 5)
            if len(fields) >= 5:
                mounts[int(fields[0])] = os.fsdecode(fields[4])
        return mounts

    def intact(self) -> bool:
        """Whether every mount the helper started with is still attached."""
        with self._lock:
            if self.broken is not None:
                return False
            if not self._poll.poll(0):
                return True
            present = self._mounts()
            missing = [point for mount, point in self._baseline.items() if mount not in present]
            if missing:
                self.broken = f"the sandbox's mount on {missing[0]} is gone"
                return False
            return True
