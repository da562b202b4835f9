"""File metadata as the reference reports it, birth time included.

Python 3.11 has no ``st_birthtime`` on Linux, and the reference reports
``createdAtMs`` from statx(2) (0 when the file system has no birth time), so
statx is called through ctypes (``execserver.sandbox.statx``).
"""

from __future__ import annotations

import os
import stat

from execserver.sandbox.statx import statx

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["birth_time_ms", "metadata_dict"]


def birth_time_ms(path: str, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> int:
    """Milliseconds since the epoch of the file's creation, or 0 when unknown."""
    found = statx(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    if found is None or found.btime is None:
        return 0
    sec, nsec = found.btime
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
