"""Write-type fs operations: writeFile, createDirectory, remove, copy.

Plain blocking functions over native paths, run in a worker thread or inside
a sandboxed helper (see ops_read). Semantics follow the
0.169.0 binary, including its defaults (``recursive``/``force`` omitted mean
true) and Rust's std::fs behaviour (create_dir_all, fs::copy).
"""

from __future__ import annotations

import os
import stat

from execserver.fs.errors import contains_symlink
from execserver.fs.nofollow import components, open_dir_nofollow, parent_fd
from execserver.wire.errors import RpcError

__all__ = ["copy", "create_directory", "remove", "write_file_bytes"]

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_file_bytes(path: str, data: bytes, follow_symlinks: bool = True) -> None:
    """fs/writeFile: create or truncate."""
    # A fifo blocks here until a reader comes, as on the reference (it is written
    # to): that wait happens on a worker thread, never on the event loop.
    if follow_symlinks:
        fd = os.open(path, _WRITE_FLAGS, 0o666)
    else:
        with parent_fd(path) as (dir_fd, name):
            fd = os.open(name, _WRITE_FLAGS | os.O_NOFOLLOW, 0o666, dir_fd=dir_fd)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def create_dir_all(path: str) -> None:
    """Rust's ``create_dir_all``: an existing directory is fine, anything else is not."""
    try:
        os.mkdir(path)
        return
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent == path:
            raise
        create_dir_all(parent)
    except OSError:
        if os.path.isdir(path):
            return
        raise
    try:
        os.mkdir(path)
    except OSError:
        if not os.path.isdir(path):
            raise


def _create_dir_all_nofollow(path: str) -> None:
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in components(path):
            try:
                next_fd = open_dir_nofollow(part, fd)
            except FileNotFoundError:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass  # created concurrently; the open below checks what it is
                next_fd = open_dir_nofollow(part, fd)
            os.close(fd)
            fd = next_fd
    finally:
        os.close(fd)


def create_directory(
    path: str, recursive: bool | None = None, follow_symlinks: bool = True
) -> None:
    """fs/createDirectory; ``recursive`` omitted means true."""
    recursive = True if recursive is None else recursive
    if follow_symlinks:
        if recursive:
            create_dir_all(path)
        else:
            os.mkdir(path)
    elif recursive:
        _create_dir_all_nofollow(path)
    else:
        with parent_fd(path) as (dir_fd, name):
            os.mkdir(name, dir_fd=dir_fd)


def remove(
    path: str,
    recursive: bool | None = None,
    force: bool | None = None,
    follow_symlinks: bool = True,
) -> None:
    """fs/remove; omitted ``recursive`` and ``force`` mean true. A symlink is
    removed itself, never its target."""
    recursive = True if recursive is None else recursive
    force = True if force is None else force
    if recursive and not follow_symlinks:
        # Checked before anything else, even existence.
        raise RpcError.internal("recursive no-follow removal is unsupported")
    try:
        if follow_symlinks:
            _remove_path(path, recursive)
        else:
            with parent_fd(path) as (dir_fd, name):
                lst = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(lst.st_mode):
                    raise contains_symlink()
                if stat.S_ISDIR(lst.st_mode):
                    os.rmdir(name, dir_fd=dir_fd)
                else:
                    os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        if not force:
            raise


def _remove_path(path: str, recursive: bool) -> None:
    lst = os.lstat(path)
    if not stat.S_ISDIR(lst.st_mode):
        os.unlink(path)
    elif recursive:
        rmtree(path)
    else:
        os.rmdir(path)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_ino == b.st_ino and a.st_dev == b.st_dev


def rmtree(path: str) -> None:
    """``shutil.rmtree(path)`` as Python 3.11 runs it on Linux (the walk by
    directory fds, never through a symlink; the first error raised), without
    importing shutil: the sandboxed fs helper runs this, and shutil (fnmatch,
    re, bz2, lzma) was ~1.6 MB of every helper."""
    top = os.lstat(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        if not _same_file(top, os.fstat(fd)):
            # Swapped for a symlink to a directory since the lstat.
            raise OSError("Cannot call rmtree on a symbolic link")
        _rmtree_fd(fd, path)
    finally:
        os.close(fd)
    os.rmdir(path)


def _rmtree_fd(top_fd: int, path: str) -> None:
    try:
        with os.scandir(top_fd) as scandir_it:
            entries = list(scandir_it)
    except OSError as err:
        err.filename = path
        raise
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            before = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(before.st_mode)
        if not is_dir:
            os.unlink(entry.name, dir_fd=top_fd)
            continue
        dir_fd = os.open(entry.name, os.O_RDONLY, dir_fd=top_fd)
        try:
            if not _same_file(before, os.fstat(dir_fd)):
                raise OSError("Cannot call rmtree on a symbolic link")
            _rmtree_fd(dir_fd, os.path.join(path, entry.name))
        finally:
            os.close(dir_fd)
        os.rmdir(entry.name, dir_fd=top_fd)


def _is_same_or_inside(candidate: str, directory: str) -> bool:
    return candidate == directory or candidate.startswith(directory.rstrip("/") + "/")


def copy_file(source: str, destination: str) -> None:
    """Rust's ``fs::copy``: truncate-and-write the destination, copy permissions.

    Like the reference, copying a file onto itself truncates it.
    """
    src_fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # no fifo hang
    try:
        src_stat = os.fstat(src_fd)
        mode = stat.S_IMODE(src_stat.st_mode)
        dst_fd = os.open(destination, _WRITE_FLAGS, mode)
        try:
            os.fchmod(dst_fd, mode)
            while os.sendfile(dst_fd, src_fd, None, 1 << 30) > 0:
                pass
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def _copy_dir(source: str, destination: str) -> None:
    create_dir_all(destination)
    with os.scandir(source) as it:
        for entry in it:
            target = os.path.join(destination, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                _copy_dir(entry.path, target)
            elif entry.is_file(follow_symlinks=False):
                copy_file(entry.path, target)
            # Special files inside a copied tree are skipped silently, as the reference does.


def copy(source_path: str, destination_path: str, recursive: bool) -> None:
    """fs/copy: files, directory trees (merging into an existing directory) and
    symlinks (copied as links)."""
    lst = os.lstat(source_path)
    if stat.S_ISLNK(lst.st_mode):
        os.symlink(os.readlink(source_path), destination_path)
    elif stat.S_ISDIR(lst.st_mode):
        if not recursive:
            raise RpcError.invalid_request(
                "fs/copy requires recursive: true when sourcePath is a directory"
            )
        real_source = os.path.realpath(source_path)
        if _is_same_or_inside(os.path.realpath(destination_path), real_source):
            raise RpcError.invalid_request(
                "fs/copy cannot copy a directory to itself or one of its descendants"
            )
        _copy_dir(source_path, destination_path)
    elif stat.S_ISREG(lst.st_mode):
        copy_file(source_path, destination_path)
    else:
        raise RpcError.invalid_request(
            "fs/copy only supports regular files, directories, and symlinks"
        )
