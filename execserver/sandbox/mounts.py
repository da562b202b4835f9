"""Host directories bwrap has to create as mount points, and their removal.

A protected name that does not exist inside a writable root (say ``ws/.git``)
is covered with a read-only tmpfs so the sandboxed command cannot create it.
bwrap creates the empty mount point on the host through the writable bind, so
it must be removed once no sandbox uses it any more.

Removal has to be reference counted: Linux lets ``rmdir`` remove a directory
that is a mount point in *another* mount namespace and then detaches that
mount there — removing it while a second sandbox still runs would silently
drop that sandbox's protection. So every live sandbox that relies on a
synthetic mount point holds a reference, a later sandbox that sees a
directory we created still treats it as synthetic (read-only tmpfs, not a bind
of whatever is there), and the last release removes it if it is still empty.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["SyntheticMounts"]


class SyntheticMounts:
    """Refcounts of mount-point directories created on the host for sandboxes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refs: dict[str, int] = {}

    def is_real(self, path: str) -> bool:
        """True when ``path`` exists and is not one of our synthetic mount points.

        A policy resolved while another sandbox's synthetic ``.agents`` existed
        names it as a read rule; by the time bwrap runs, the last release may
        have removed it. Such rules are dropped (the parent's protection
        covers the name anyway), under the same lock as the removal."""
        with self._lock:
            return path not in self._refs and os.path.exists(path)

    def claim(self, path: str) -> bool:
        """Decide, atomically with respect to ``release``, how to protect ``path``:
        True means it is (or becomes) a synthetic mount point and a reference was
        taken; False means a real directory exists there and must be bound.

        Checking existence and synthetic-ness separately raced with the last
        release removing the directory in between: the later sandbox then asked
        bwrap to bind a path that no longer existed."""
        with self._lock:
            if path in self._refs:
                self._refs[path] += 1
                return True
            if os.path.exists(path):
                return False
            self._refs[path] = 1
            return True

    def release(self, path: str) -> None:
        with self._lock:
            count = self._refs.get(path, 0) - 1
            if count > 0:
                self._refs[path] = count
                return
            self._refs.pop(path, None)
            # Only an empty directory is removed: anything else was put there by
            # someone outside the sandbox and is not ours to delete.
            with contextlib.suppress(OSError):
                os.rmdir(path)
