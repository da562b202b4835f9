"""Path resolution that refuses symlinks (``followSymlinks: false``).

The reference walks the ancestors with ``O_PATH | O_NOFOLLOW | O_DIRECTORY``
opens, so a symlink (or file) among the ancestors fails with ENOTDIR, and the
last component is then handled by each operation (ELOOP on open, or a
"path contains a symbolic link" refusal). We do the same with ``dir_fd``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["components", "open_dir_nofollow", "parent_fd"]

_DIR_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def components(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def open_dir_nofollow(name: str, dir_fd: int) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


class _ParentFd:
    # A class, not contextlib.contextmanager: the sandboxed fs helper imports
    # this module and contextlib with it would be ~0.5 MB of every helper.
    __slots__ = ("_fd", "_path")

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> tuple[int, str]:
        parts = components(self._path)
        fd = os.open("/", _DIR_FLAGS)
        try:
            for part in parts[:-1]:
                next_fd = open_dir_nofollow(part, fd)
                os.close(fd)
                fd = next_fd
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return fd, parts[-1] if parts else "."

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        os.close(self._fd)


def parent_fd(path: str) -> _ParentFd:
    """``with parent_fd(path) as (dir_fd, name)``: the fd of the parent directory
    (closed when the block ends) and the last component; no symlink is followed."""
    return _ParentFd(path)
