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
  is covered like a missing name and never bound as a read rule. It is marked
  under a temporary name and then moved into place (renameat2 with
  RENAME_NOREPLACE), so no daemon ever finds it under its name unmarked;
- the last release in a daemon removes the directory only when it is empty,
  was made as a mount point, and the lock can be taken exclusively (no other
  daemon's sandbox holds it).

A directory the user made is bound read-only, never removed. Without user
attributes a mount point another daemon made looks like the user's: it is then
bound (still read-only, and held, so the other daemon does not remove it) and
may be left behind empty.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import threading
from dataclasses import dataclass
from typing import Any

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


def _unmarked(path: str) -> bool:
    """``path`` carries no MARK. False also when it is gone: checked after an
    ``exists``, another daemon's last release may have removed its mount point in
    between, and a gone path is no directory of the user's to bind."""
    try:
        os.getxattr(path, MARK, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


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
            return os.path.exists(path) and _unmarked(path)

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
            fd = _make_marked(path)
            if fd is not None:
                return _Held(fd, 1, True, True)
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
                synthetic = _marked(fd)
            except BaseException:
                os.close(fd)
                raise
            return _Held(fd, 1, synthetic, False)

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


def _make_marked(path: str) -> int | None:
    """A new directory at ``path``, marked (where user attributes exist) and locked
    shared before it appears there: made under a temporary name beside it and moved
    into place with renameat2(RENAME_NOREPLACE). Its descriptor; None when
    ``path`` exists (or appeared meanwhile: the caller takes what is there). Raises
    OSError when it cannot be made.

    Made in place and marked afterwards, the directory was unmarked for a moment,
    and another daemon claiming the name then took it for the user's directory
    and bound it without a reference (``is_real``): the first daemon's last
    release removed it under that sandbox ("bwrap: Can't find source path
    .../.git", seen once in the tests)."""
    if os.path.lexists(path):
        return None  # before making anything (its parent may not even be writable)
    parent, name = os.path.split(path)
    temporary = os.path.join(parent, f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        os.mkdir(temporary, 0o755)
    except OSError:
        if os.path.lexists(path):
            return None
        raise
    fd = -1
    try:
        fd = os.open(temporary, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.setxattr(fd, MARK, b"1")
        except OSError:
            pass  # no user attributes here: removal relies on made_here
        fcntl.flock(fd, fcntl.LOCK_SH)  # nobody else knows this directory: never blocks
        moved = _rename_noreplace(temporary, path)
        if moved is None:
            # No RENAME_NOREPLACE here (an old kernel or libc, a file system without
            # it): made in place as before, with the window described above.
            os.rmdir(temporary)
            os.close(fd)
            fd = -1
            return _make_in_place(path)
        if moved and _same_directory(fd, path):
            return fd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.rmdir(temporary)
        raise
    # The name exists (another daemon's mount point, the user's directory), or
    # what is there is not ours (moved away under us): the caller takes it as found.
    os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(temporary)
    return None


def _make_in_place(path: str) -> int | None:
    """``_make_marked`` without renameat2: mkdir, then mark and lock."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None  # gone or replaced meanwhile: the caller looks again
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not _same_directory(fd, path):
            os.close(fd)
            return None
        with contextlib.suppress(OSError):
            os.setxattr(fd, MARK, b"1")
    except BaseException:
        os.close(fd)
        raise
    return fd


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1  # linux/fs.h
_NOREPLACE_UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)


def _libc_renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28 and later
    except (AttributeError, OSError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


_renameat2 = _libc_renameat2()


def _rename_noreplace(source: str, target: str) -> bool | None:
    """rename(2) that never replaces ``target``: True, moved; False, ``target``
    exists; None, not available here. Raises OSError otherwise."""
    if _renameat2 is None:
        return None
    result = _renameat2(
        _AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.EEXIST:
        return False
    if code in _NOREPLACE_UNSUPPORTED:
        return None
    raise OSError(code, os.strerror(code), source, None, target)


def _try_exclusive(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True
