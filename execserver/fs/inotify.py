"""Minimal inotify(7) binding through ctypes (no third-party dependency).

Only what fs/watchMissing needs: create a non-blocking instance, add watches,
and parse the events read from it.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from typing import Any

__all__ = [
    "IN_ATTRIB",
    "IN_CREATE",
    "IN_DELETE_SELF",
    "IN_MASK_ADD",
    "IN_MODIFY",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "add_watch",
    "inotify_init",
    "read_events",
]

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_MASK_ADD = 0x20000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len

_libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc (fs/metadata.py says why)
_init1: Any = _libc.inotify_init1
_init1.argtypes = [ctypes.c_int]
_init1.restype = ctypes.c_int
_add_watch: Any = _libc.inotify_add_watch
_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_add_watch.restype = ctypes.c_int


def _check(result: int) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def inotify_init() -> int:
    return _check(_init1(IN_NONBLOCK | IN_CLOEXEC))


def add_watch(fd: int, path: str, mask: int) -> int:
    return _check(_add_watch(fd, os.fsencode(path), mask))


def read_events(fd: int) -> Iterator[tuple[int, int, str]]:
    """``(wd, mask, name)`` of every event ready on ``fd`` (non-blocking)."""
    while True:
        try:
            buf = os.read(fd, 64 * 1024)
        except BlockingIOError:
            return
        offset = 0
        while offset + _EVENT.size <= len(buf):
            wd, mask, _cookie, length = _EVENT.unpack_from(buf, offset)
            raw_name = buf[offset + _EVENT.size : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            yield wd, mask, os.fsdecode(raw_name.rstrip(b"\0"))
