"""File metadata as the reference reports it, birth time included.

Python 3.11 has no ``st_birthtime`` on Linux, and the reference reports
``createdAtMs`` from statx(2) (0 when the file system has no birth time), so
statx is called through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from typing import Any

__all__ = ["birth_time_ms", "lasting_identity", "metadata_dict"]

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_INO = 0x100
_STATX_BTIME = 0x800
_STATX_BUFSIZE = 256
_MASK_OFFSET = 0
_INO_OFFSET = 32  # struct statx: stx_ino (u64)
_BTIME_OFFSET = 80  # struct statx: stx_btime {i64 tv_sec; u32 tv_nsec; i32 pad}
_DEV_OFFSET = 136  # struct statx: stx_dev_major, stx_dev_minor (u32 each)

# The process's own symbols, libc's among them. ctypes.util.find_library("c") ran
# `/sbin/ldconfig -p` and imported subprocess, shutil and tempfile: ~12-19 ms at
# every start of the daemon and of each sandboxed fs helper, where the policy's
# view may not even hold ldconfig.
_libc = ctypes.CDLL(None, use_errno=True)
_statx: Any = getattr(_libc, "statx", None)
if _statx is not None:
    _statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    _statx.restype = ctypes.c_int


def birth_time_ms(path: str, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> int:
    """Milliseconds since the epoch of the file's creation, or 0 when unknown."""
    if _statx is None:
        return 0
    buf = ctypes.create_string_buffer(_STATX_BUFSIZE)
    flags = 0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW
    fd = _AT_FDCWD if dir_fd is None else dir_fd
    if _statx(fd, os.fsencode(path), flags, _STATX_BTIME, buf) != 0:
        return 0
    (mask,) = struct.unpack_from("<I", buf.raw, _MASK_OFFSET)
    if not mask & _STATX_BTIME:
        return 0
    sec, nsec = struct.unpack_from("<qI", buf.raw, _BTIME_OFFSET)
    return int(sec * 1000 + nsec // 1_000_000)


def lasting_identity(path: str) -> tuple[int, ...] | None:
    """Who the file at ``path`` (not following a final symlink) is, in a form a
    later file cannot take over: device, inode and birth time. An inode number
    alone is handed to the next file created once this one is gone (ext4 reuses
    the lowest free number), the birth time is new with each file. Where the file
    system keeps no birth time the tuple has device and inode only. None when
    nothing is there (or it cannot be looked at)."""
    buf = ctypes.create_string_buffer(_STATX_BUFSIZE)
    if _statx is None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)
    if _statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW, _STATX_INO | _STATX_BTIME, buf):
        return None
    raw = buf.raw
    (mask,) = struct.unpack_from("<I", raw, _MASK_OFFSET)
    (ino,) = struct.unpack_from("<Q", raw, _INO_OFFSET)
    major, minor = struct.unpack_from("<II", raw, _DEV_OFFSET)
    if not mask & _STATX_BTIME:
        return (major, minor, ino)
    sec, nsec = struct.unpack_from("<qI", raw, _BTIME_OFFSET)
    return (major, minor, ino, sec, nsec)


def mtime_ms(st: os.stat_result) -> int:
    return st.st_mtime_ns // 1_000_000


def metadata_dict(st: os.stat_result, *, is_symlink: bool, created_ms: int) -> dict[str, Any]:
    """The fs/getMetadata result (wire keys) for the stat of the target."""
    return {
        "isDirectory": stat.S_ISDIR(st.st_mode),
        "isFile": stat.S_ISREG(st.st_mode),
        "isSymlink": is_symlink,
        "size": st.st_size,
        "createdAtMs": created_ms,
        "modifiedAtMs": mtime_ms(st),
    }
