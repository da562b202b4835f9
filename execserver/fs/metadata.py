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

__all__ = ["birth_time_ms", "metadata_dict"]

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BTIME = 0x800
_STATX_BUFSIZE = 256
_MASK_OFFSET = 0
_BTIME_OFFSET = 80  # struct statx: stx_btime {i64 tv_sec; u32 tv_nsec; i32 pad}

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
