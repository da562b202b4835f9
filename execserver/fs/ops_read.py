"""Read-type fs operations: readFile, getMetadata, canonicalize, readDirectory.

Every function here is plain and blocking (native paths in, wire-shaped dicts
or bytes out): the service runs it in a worker thread, or inside a sandboxed
helper (``execserver/fs/operations.py`` names which) for restricted policies.
"""

from __future__ import annotations

import os
import stat

from execserver.fs.errors import contains_symlink, not_a_file, not_a_regular_file
from execserver.fs.metadata import birth_time_ms, metadata_dict
from execserver.fs.nofollow import parent_fd
from execserver.wire.base64_text import base64_text
from execserver.wire.file_uri import path_to_uri

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "canonicalize",
    "get_metadata",
    "lossy_name",
    "read_cached_file_bytes",
    "read_directory",
    "read_file",
    "read_file_bytes",
]

_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC
# Absent from a Python built against headers older than Linux 4.14: every read
# then goes to a worker.
_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)


def read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb", buffering=0, closefd=False) as stream:
        return stream.readall()


def _open_regular(path: str, follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """An fd on the regular file at ``path`` and its fstat; refuses anything else
    with fs/readFile's errors."""
    if follow_symlinks:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise not_a_file(path)
        # O_NONBLOCK: a fifo swapped in after the stat must not hang this worker
        # in open(); the fstat below then refuses it.
        fd = os.open(path, _READ_FLAGS | os.O_NONBLOCK)
    else:
        with parent_fd(path) as (dir_fd, name):
            # O_NONBLOCK so a fifo cannot hang the worker before the type check.
            fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_a_file(path) if follow_symlinks else not_a_regular_file()
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_file_bytes(path: str, follow_symlinks: bool = True) -> bytes:
    fd, _ = _open_regular(path, follow_symlinks)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def read_cached_file_bytes(path: str, follow_symlinks: bool, limit: int) -> bytes | None:
    """The whole file, when it holds at most ``limit`` bytes and every one of them is
    in the page cache: read with RWF_NOWAIT, which fails rather than wait for a disk,
    so the event loop can run this. None when it must be read in a worker instead:
    larger, not (all) cached, a file system without RWF_NOWAIT (procfs, FUSE), or a
    size that fstat does not tell. Opening it raises ``read_file_bytes``' errors."""
    fd, st = _open_regular(path, follow_symlinks)
    try:
        size = st.st_size
        if size > limit or _RWF_NOWAIT is None:
            return None
        # One byte more than fstat says: a file that grew since reads past it.
        buffer = bytearray(size + 1)
        try:
            got = os.preadv(fd, [buffer], 0, _RWF_NOWAIT)
        except OSError:  # EAGAIN (not cached), EOPNOTSUPP, ...: the worker reads it
            return None
        if got != size:
            return None
        del buffer[size:]
        return bytes(buffer)
    finally:
        os.close(fd)


def read_file(path: str, follow_symlinks: bool = True) -> str:
    """fs/readFile: the whole file, base64 (a worker thread encodes it, not the loop)."""
    data = read_file_bytes(path, follow_symlinks)
    return base64_text(data)


def get_metadata(path: str, follow_symlinks: bool = True) -> dict[str, Any]:
    """fs/getMetadata: type/size of the target, ``isSymlink`` of the path itself."""
    if follow_symlinks:
        lst = os.lstat(path)
        is_link = stat.S_ISLNK(lst.st_mode)
        st = os.stat(path) if is_link else lst
        # The 0.169.0 binary (a musl build) reports no birth time on this path-based
        # lookup, only on the fd-based no-follow one below: createdAtMs is 0 here.
        return metadata_dict(st, is_symlink=is_link, created_ms=0)
    with parent_fd(path) as (dir_fd, name):
        lst = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(lst.st_mode):
            raise contains_symlink()
        created = birth_time_ms(name, dir_fd=dir_fd, follow_symlinks=False)
        return metadata_dict(lst, is_symlink=False, created_ms=created)


def canonicalize(path: str) -> str:
    """fs/canonicalize: every component must exist; returns a file URI."""
    return path_to_uri(os.path.realpath(path, strict=True))


def lossy_name(name: str) -> str:
    """A file name as Rust's ``to_string_lossy`` shows it (invalid UTF-8 -> U+FFFD)."""
    return os.fsencode(name).decode("utf-8", errors="replace")


def read_directory(path: str) -> list[dict[str, Any]]:
    """fs/readDirectory: one level in OS order; symlinks typed by their target,
    dangling symlinks left out."""
    entries: list[dict[str, Any]] = []
    with os.scandir(path) as it:
        for entry in it:
            if entry.is_symlink():
                try:
                    st = os.stat(entry.path)
                except OSError:
                    continue
                is_dir, is_file = stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)
            else:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = entry.is_file(follow_symlinks=False)
            entries.append(
                {"fileName": lossy_name(entry.name), "isDirectory": is_dir, "isFile": is_file}
            )
    return entries
