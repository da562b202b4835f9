"""statx(2) through ctypes: the one binding of it in the daemon.

Python 3.11's ``os.stat`` has no birth time on Linux; both the fs service
(``createdAtMs``, as the reference reports it) and the fs helper pool (an
identity a later file cannot take over) need it.
"""

from __future__ import annotations

import ctypes
import os
import struct

# The sandboxed fs helper imports this module: no typing or dataclasses at run
# time (execserver/fs/sandboxed/program.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["Statx", "statx"]

_AT_FDCWD: Final = -100
_AT_SYMLINK_NOFOLLOW: Final = 0x100
_STATX_INO: Final = 0x100
_STATX_BTIME: Final = 0x800
_BUFSIZE: Final = 256
# Offsets in struct statx (linux/stat.h).
_MASK: Final = 0  # u32 stx_mask
_INO: Final = 32  # u64 stx_ino
_BTIME: Final = 80  # stx_btime {i64 tv_sec; u32 tv_nsec; i32 pad}
_DEV: Final = 136  # u32 stx_dev_major, u32 stx_dev_minor

# The process's own symbols, libc's among them. ctypes.util.find_library("c") ran
# `/sbin/ldconfig -p` and imported subprocess, shutil and tempfile: ~12-19 ms at
# every start of the daemon and of each sandboxed fs helper, where the policy's
# view may not even hold ldconfig.
_libc = ctypes.CDLL(None, use_errno=True)
_statx: Any = getattr(_libc, "statx", None)
if _statx is not None:
    _statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    _statx.restype = ctypes.c_int


class Statx:
    """``dev`` (major, minor), ``ino``, ``btime`` (seconds, nanoseconds), None
    where the file system keeps no birth time. Compared and hashed by value."""

    __slots__ = ("btime", "dev", "ino")
    dev: tuple[int, int]
    ino: int
    btime: tuple[int, int] | None

    def __init__(self, dev: tuple[int, int], ino: int, btime: tuple[int, int] | None) -> None:
        self.dev = dev
        self.ino = ino
        self.btime = btime

    def _key(self) -> tuple[tuple[int, int], int, tuple[int, int] | None]:
        return (self.dev, self.ino, self.btime)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Statx):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Statx(dev={self.dev!r}, ino={self.ino!r}, btime={self.btime!r})"


def statx(path: str, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> Statx | None:
    """Device, inode and birth time of ``path``; None when it cannot be looked
    at (or this libc has no statx)."""
    if _statx is None:
        return None
    buf = ctypes.create_string_buffer(_BUFSIZE)
    flags = 0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW
    fd = _AT_FDCWD if dir_fd is None else dir_fd
    if _statx(fd, os.fsencode(path), flags, _STATX_INO | _STATX_BTIME, buf) != 0:
        return None
    raw = buf.raw
    (mask,) = struct.unpack_from("<I", raw, _MASK)
    (ino,) = struct.unpack_from("<Q", raw, _INO)
    major, minor = struct.unpack_from("<II", raw, _DEV)
    btime = struct.unpack_from("<qI", raw, _BTIME) if mask & _STATX_BTIME else None
    return Statx((major, minor), ino, btime)
