"""Path resolution that refuses symlinks (``followSymlinks: false``).

The reference walks the ancestors with ``O_PATH | O_NOFOLLOW | O_DIRECTORY``
opens, so a symlink (or file) among the ancestors fails with ENOTDIR, and the
last component is then handled by each operation (ELOOP on open, or a
"path contains a symbolic link" refusal). We do the same with ``dir_fd``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["components", "open_dir_nofollow", "parent_fd"]

_DIR_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def components(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def open_dir_nofollow(name: str, dir_fd: int) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


@contextlib.contextmanager
def parent_fd(path: str) -> Iterator[tuple[int, str]]:
    """``(fd of the parent directory, last component)``; no symlink is followed."""
    parts = components(path)
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            next_fd = open_dir_nofollow(part, fd)
            os.close(fd)
            fd = next_fd
        yield fd, parts[-1] if parts else "."
    finally:
        os.close(fd)
