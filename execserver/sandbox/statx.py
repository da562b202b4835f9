"""statx(2) through ctypes' C core: the one binding of it in the daemon.

Python 3.11's ``os.stat`` has no birth time on Linux; both the fs service
(``createdAtMs``, as the reference reports it) and the fs helper pool (an
identity a later file cannot take over) need it.

The binding is made from ``_ctypes`` (the C module under the ``ctypes``
package) with the few C types it needs declared here, as ``ctypes`` declares
them: the sandboxed fs helper imports this module, one interpreter per sandbox
policy, and the ``ctypes`` package (its type zoo and ``_endian``) added 0.13 MB
of RSS and ~1.5 ms of start to each (tests/unit/test_fs_helper_imports.py keeps
it out). ``_ctypes`` has been the package's core since Python 2.5.
"""

from __future__ import annotations

import _ctypes
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


# The C types statx takes, as ctypes/__init__.py declares c_int, c_uint,
# c_char_p, c_char and a char array. (The type: ignores: typeshed describes
# these classes as the ctypes package uses them, generic and taking a CDLL.)
class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"


class _UInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "I"


class _CharPointer(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "z"


class _Char(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "c"


class _StatxBuffer(_ctypes.Array):  # type: ignore[type-arg]
    _type_ = _Char
    _length_ = _BUFSIZE


class _CFunction(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _CFunctionHoldingGil(_ctypes.CFuncPtr):
    # As ctypes.PyDLL's functions: the GIL stays taken during the call.
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI
    _restype_ = _Int


class _OwnSymbols:
    """The process's own symbols, libc's among them (``ctypes.CDLL(None)``).
    ctypes.util.find_library("c") ran `/sbin/ldconfig -p` and imported
    subprocess, shutil and tempfile: ~12-19 ms at every start of the daemon and
    of each sandboxed fs helper, where the policy's view may not even hold
    ldconfig."""

    _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]


def _bind_statx(kind: type[_ctypes.CFuncPtr]) -> Any:
    try:
        function: Any = kind(("statx", _OwnSymbols))  # type: ignore[arg-type]
    except AttributeError:  # this libc has no statx
        return None
    function.argtypes = [_Int, _CharPointer, _Int, _UInt, _StatxBuffer]
    return function


_statx: Any = _bind_statx(_CFunction)
_statx_holding_gil: Any = _bind_statx(_CFunctionHoldingGil)


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


def statx(
    path: str,
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = True,
    holding_gil: bool = False,
) -> Statx | None:
    """Device, inode and birth time of ``path``; None when it cannot be looked
    at (or this libc has no statx).

    ``holding_gil``: the GIL stays taken during the system call (a few µs on a
    cached path), for a caller on the event loop's thread. Released, the loop
    would wait to take it back whenever a worker thread runs Python meanwhile
    (execserver/server/gil_tuning.py). Not for a path that may block (a hung
    network mount would stall every thread)."""
    function = _statx_holding_gil if holding_gil else _statx
    if function is None:
        return None
    buf = _StatxBuffer()
    flags = 0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW
    fd = _AT_FDCWD if dir_fd is None else dir_fd
    if function(fd, os.fsencode(path), flags, _STATX_INO | _STATX_BTIME, buf) != 0:
        return None
    raw = bytes(buf)  # (not buf.raw: mypy 2.4 fails internally on it)
    (mask,) = struct.unpack_from("<I", raw, _MASK)
    (ino,) = struct.unpack_from("<Q", raw, _INO)
    major, minor = struct.unpack_from("<II", raw, _DEV)
    btime = struct.unpack_from("<qI", raw, _BTIME) if mask & _STATX_BTIME else None
    return Statx((major, minor), ino, btime)
