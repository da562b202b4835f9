"""Blocking primitives behind fs/open, fs/readBlock and fs/writeBlock.

``open_for_handle`` is also run inside the sandbox helper, where it applies
the request's policy at open time; it returns the identity of what it opened
so the daemon can reopen exactly that inode (see handles.py).
"""

from __future__ import annotations

import os
import stat

from execserver.fs.errors import not_a_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "MAX_BLOCK",
    "MAX_FILE_OFFSET",
    "open_fd",
    "open_for_handle",
    "read_block",
    "write_block",
]

MAX_BLOCK = 1024 * 1024
MAX_FILE_OFFSET = (1 << 63) - 1

# O_NONBLOCK: a fifo must fail (ENXIO for writers) or be refused, never hang a worker.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_REPLACE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC


def open_fd(path: str, mode: str, *, truncate: bool = True) -> int:
    """Open ``path`` for a handle: ``read`` needs a regular file, ``replace``
    creates or truncates at once and is write-only."""
    if mode == "read":
        fd = os.open(path, _READ_FLAGS)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise not_a_file(path)
        except BaseException:
            os.close(fd)
            raise
    else:
        flags = _REPLACE_FLAGS if truncate else _REPLACE_FLAGS & ~(os.O_TRUNC | os.O_CREAT)
        fd = os.open(path, flags, 0o666)
    os.set_blocking(fd, True)
    return fd


def open_for_handle(path: str, mode: str) -> dict[str, Any]:
    """Sandbox-side fs/open: open (create/truncate) under the policy, report the inode."""
    fd = open_fd(path, mode)
    try:
        st = os.fstat(fd)
        return {"dev": st.st_dev, "ino": st.st_ino}
    finally:
        os.close(fd)


def read_block(fd: int, offset: int, length: int) -> bytes:
    if offset > MAX_FILE_OFFSET:
        # What pread(2) says about a negative off_t (Python refuses the int first).
        raise OSError(22, "Invalid argument")
    return os.pread(fd, length, offset)


def write_block(fd: int, offset: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
