"""Host directories made as mount points for protected names, and their removal.

A protected name that does not exist inside a writable root (say ``ws/.git``)
is covered with a read-only tmpfs so the sandboxed command cannot create it.
The tmpfs needs a mount point on the host, so the daemon makes an empty
directory there, and removes it once no sandbox uses it any more.

Removal has to be reference counted, across processes too: Linux lets
``rmdir`` remove a directory that is a mount point in *another* mount namespace
and then detaches that mount there. Removing it while a second sandbox still
runs would silently drop that sandbox's protection: its command would find
``ws/.git`` gone and could create ``ws/.git/hooks`` on the host
(tests/security/test_synthetic_mounts_across_daemons.py: two daemons sharing
one workspace did exactly that). So:

- every sandbox that covers a protected name holds a reference; within one
  daemon a count, and across daemons a shared ``flock`` on the directory that
  the daemon holds while any of its sandboxes does;
- a directory made this way carries the extended attribute ``MARK`` (where
  the file system keeps user attributes), so another daemon, or this one
  after a restart, knows it is a mount point and not the user's directory: it
  is covered like a missing name and never bound as a read rule;
- the last release in a daemon removes the directory only when it is empty,
  was made as a mount point, and the lock can be taken exclusively (no other
  daemon's sandbox holds it).

A directory the user made is bound read-only, never removed. Without user
attributes a mount point another daemon made looks like the user's: it is then
bound (still read-only, and held, so the other daemon does not remove it) and
may be left behind empty.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from dataclasses import dataclass

__all__ = ["MARK", "SyntheticMounts"]

# Set on every mount point a daemon makes (a user attribute: no privilege needed).
MARK = "user.execserver.mount-point"


@dataclass
class _Held:
    fd: int  # the directory, with a shared flock while referenced
    refs: int
    synthetic: bool  # covered with a tmpfs (made as a mount point), not bound
    made_here: bool  # this daemon made it: removable even without MARK


def _marked(path_or_fd: str | int) -> bool:
    try:
        if isinstance(path_or_fd, int):
            os.getxattr(path_or_fd, MARK)
        else:
            os.getxattr(path_or_fd, MARK, follow_symlinks=False)
    except OSError:
        return False
    return True


def _same_directory(fd: int, path: str) -> bool:
    try:
        there = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)


class SyntheticMounts:
    """References to the directories sandboxes use as mount points for protected
    names; ``claim`` and ``release`` are thread-safe and safe across daemons."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}

    def is_real(self, path: str) -> bool:
        """True when ``path`` exists and is not a mount point made for a protected
        name (this daemon's, or another's: it carries ``MARK``).

        A policy resolved while such a mount point existed names it as a read
        rule; by the time bwrap runs, the last release may have removed it. Such
        rules are dropped (the protected name is covered anyway), under the same
        lock as the removal."""
        with self._lock:
            held = self._held.get(path)
            if held is not None and held.synthetic:
                return False
            return os.path.exists(path) and not _marked(path)

    def claim(self, path: str) -> bool | None:
        """Take a reference to ``path`` for one sandbox and say how to protect it:
        True, cover it with a tmpfs (it is, or now becomes, a mount point made for
        this); False, bind it read-only (the user's directory). Either way the
        reference must be given back with ``release``. None: bind it read-only,
        no reference taken (not a directory: a worktree's ``.git`` file). Raises
        OSError when the mount point cannot be made.

        Deciding and taking the reference are one step with respect to
        ``release``: checking "exists" and "is ours" separately raced with the last
        release removing the directory in between, and the later sandbox asked
        bwrap to bind a path that no longer existed."""
        with self._lock:
            held = self._held.get(path)
            if held is not None:
                held.refs += 1
                return held.synthetic
            held = self._hold(path)
            if held is None:
                return None
            self._held[path] = held
            return held.synthetic

    def _hold(self, path: str) -> _Held | None:
        while True:
            made = False
            try:
                os.mkdir(path, 0o755)
                made = True
            except FileExistsError:
                pass
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # removed by another daemon meanwhile: make it again
            except NotADirectoryError:
                return None
            try:
                # Blocks only while another daemon decides to remove it (below).
                fcntl.flock(fd, fcntl.LOCK_SH)
                if not _same_directory(fd, path):
                    os.close(fd)  # it removed the one we opened: start over
                    continue
                if made:
                    try:
                        os.setxattr(fd, MARK, b"1")
                    except OSError:
                        pass  # no user attributes here: removal relies on made_here
                synthetic = made or _marked(fd)
            except BaseException:
                os.close(fd)
                raise
            return _Held(fd, 1, synthetic, made)

    def hold_elsewhere(self, path: str) -> int:
        """A second reference to ``path``, held, while ``path`` is referenced here,
        by another process that will outlive this daemon (the keeper of a sandbox
        it started): a new descriptor of the same directory with a shared lock of
        its own, so neither this daemon's last release nor another daemon's may
        remove the directory while that descriptor stays open. Its holder closes it
        when the sandbox is gone (and may then remove the directory as ``release``
        does: execserver/keeper/program.py). Raises OSError."""
        with self._lock:
            held = self._held.get(path)
            if held is None:
                raise OSError(errno.ENOENT, f"{path} is not held by this daemon")
            # Through our own descriptor, not the path: the very directory we hold.
            fd = os.open(f"/proc/self/fd/{held.fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                # We hold it shared, so nobody holds it exclusively: never blocks.
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BaseException:
                os.close(fd)
                raise
            return fd

    def release(self, path: str) -> None:
        with self._lock:
            held = self._held.get(path)
            if held is None:
                return
            held.refs -= 1
            if held.refs > 0:
                return
            del self._held[path]
            try:
                removable = held.synthetic and (held.made_here or _marked(held.fd))
                # Exclusive only when no other daemon's sandbox holds it. (flock
                # converts by dropping the shared lock first: we give it up anyway.)
                if removable and _try_exclusive(held.fd) and _same_directory(held.fd, path):
                    # Only an empty directory is removed: anything else was put
                    # there by someone outside the sandbox and is not ours to delete.
                    try:
                        os.rmdir(path)
                    except OSError:
                        pass
            finally:
                os.close(held.fd)  # drops the lock


def _try_exclusive(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True
