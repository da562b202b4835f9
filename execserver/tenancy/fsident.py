"""An fs/* call performed with a tenant's permissions, in a worker thread.

Linux keeps a file-system uid and gid per *thread* (setfsuid(2), setfsgid(2)) and
the raw setgroups system call changes only the calling thread's supplementary
groups (glibc's setgroups() would change every thread of the daemon: it
broadcasts set*id calls, so the raw call is made through syscall(2)). A worker
thread takes the tenant's identity for one operation and gives it back in a
``finally``; the kernel then checks every open, stat and rename against the
tenant's uid, so a path that raced past ``ceiling.check_fs_path`` (a symlink
swapped after the check) still reaches only what the tenant could reach anyway.
The daemon's own (effective) uid is untouched, so signals and /proc keep treating
it as the daemon.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

from execserver.sandbox.plan import Credentials

__all__ = ["FsIdentityError", "as_account", "available"]

T = TypeVar("T")

# setgroups(2) numbers; a platform missing here cannot run tenants' fs calls.
_SETGROUPS: Final = {"x86_64": 116, "aarch64": 159}

# The process's own symbols, libc's among them (as sandbox/statx.py):
# ctypes.util.find_library("c") ran `/sbin/ldconfig -p` and imported subprocess,
# shutil and tempfile at every daemon start, ~12-19 ms, for this module alone.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.setfsuid.restype = ctypes.c_int
_libc.setfsgid.restype = ctypes.c_int
_SYSCALL_SETGROUPS = _SETGROUPS.get(platform.machine())
# The daemon's own groups, given back to a worker after each tenant call.
_DAEMON_GROUPS: Final = tuple(os.getgroups())
_DAEMON_UID: Final = os.geteuid()
_DAEMON_GID: Final = os.getegid()
_local = threading.local()


class FsIdentityError(OSError):
    pass


def available() -> bool:
    return _SYSCALL_SETGROUPS is not None


def _setgroups(groups: tuple[int, ...]) -> None:
    assert _SYSCALL_SETGROUPS is not None
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    if _libc.syscall(_SYSCALL_SETGROUPS, ctypes.c_size_t(len(groups)), array) != 0:
        err = ctypes.get_errno()
        raise FsIdentityError(err, f"setgroups: {os.strerror(err)}")


def _setfs(uid: int, gid: int) -> None:
    # setfsuid/setfsgid report the *previous* id and never fail loudly; reading the
    # id back (-1 asks without changing) is how a refusal is detected.
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    if _libc.setfsuid(-1) != uid or _libc.setfsgid(-1) != gid:
        raise FsIdentityError(1, "setfsuid/setfsgid refused (the daemon needs CAP_SETUID)")


def as_account(credentials: Credentials, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in this thread with ``credentials``' file-system identity."""
    if getattr(_local, "active", False):
        raise RuntimeError("as_account does not nest")
    if not available():
        raise FsIdentityError(38, f"tenant fs calls are not supported on {platform.machine()}")
    _local.active = True
    try:
        # Groups first: while they change, the fs uid is still the daemon's, never a
        # tenant's uid with the daemon's groups.
        _setgroups(credentials.groups)
        _setfs(credentials.uid, credentials.gid)
        return func(*args, **kwargs)
    finally:
        try:
            _setfs(_DAEMON_UID, _DAEMON_GID)
            _setgroups(_DAEMON_GROUPS)
        except OSError:
            # A worker that cannot be given back its identity must not serve again.
            os.abort()
        _local.active = False
