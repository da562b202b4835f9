"""fs/walk: a bounded breadth-first listing.

Reverse-engineered from the 0.169.0 binary:
* directories are read breadth-first, each one's entries sorted by name;
* ``maxEntries`` counts every entry examined (files, directories, symlinks,
  special files) except dangling symlinks, which are dropped unseen;
* ``truncated`` is set only when one more entry (or directory) would exceed a
  limit, so a walk that ends exactly at a limit is complete;
* ``maxDepth`` stops descending silently;
* entries whose names are not UTF-8 are reported in ``errors`` (the
  reference looks them up under their lossily decoded name);
* with ``followDirectorySymlinks`` a link to a directory is listed as a
  directory and descended into unless its target was already queued (the
  walk never visits one directory twice, so link loops end).
"""

from __future__ import annotations

import os
import stat

from execserver.fs.ops_read import lossy_name
from execserver.wire.file_uri import path_to_uri
from execserver.wire.rust.io_error import os_error_text

# The sandboxed fs helper imports this module: no typing (nor collections, for
# a deque: a list and an index do) at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["walk"]

_DIR, _FILE, _LINK_DIR, _OTHER = range(4)


def _classify(entry: os.DirEntry[str]) -> tuple[int, os.stat_result | None] | None:
    """Kind of a directory entry, and the stat of directories; None to drop it."""
    if entry.is_symlink():
        try:
            target = os.stat(entry.path)
        except OSError:
            return None
        return (_LINK_DIR, target) if stat.S_ISDIR(target.st_mode) else (_OTHER, None)
    if entry.is_dir(follow_symlinks=False):
        return _DIR, entry.stat(follow_symlinks=False)
    if entry.is_file(follow_symlinks=False):
        return _FILE, None
    return _OTHER, None


def _sorted_entries(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: os.fsencode(e.name))


def walk(
    path: str,
    max_depth: int,
    max_directories: int,
    max_entries: int,
    follow_directory_symlinks: bool,
    prune_hidden_directories: bool = False,
) -> dict[str, Any]:
    root_stat = os.stat(path)  # a missing root (or dangling link) is an error
    out_entries: list[dict[str, str]] = []
    errors: list[dict[str, str]] = []
    result = {"entries": out_entries, "errors": errors, "truncated": False}
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        return result  # a file, special file or symlink root lists nothing
    visited = {(root_stat.st_dev, root_stat.st_ino)}
    queue: list[tuple[str, int]] = [(path, 0)]
    head = 0  # breadth-first: the next directory to read
    directories_read = 0
    examined = 0
    while head < len(queue):
        directory, depth = queue[head]
        head += 1
        if directories_read >= max_directories:
            result["truncated"] = True
            break
        directories_read += 1
        try:
            children = _sorted_entries(directory)
        except OSError as exc:
            message = os_error_text(exc.errno or 0)
            errors.append({"path": path_to_uri(directory), "message": message})
            continue
        for entry in children:
            lossy = lossy_name(entry.name)
            if lossy != entry.name:
                # The reference works on the lossily decoded name, which names
                # no file: such entries end up in ``errors``.
                lossy_path = os.path.join(directory, lossy)
                try:
                    os.lstat(lossy_path)
                except OSError as exc:
                    message = os_error_text(exc.errno or 0)
                    errors.append({"path": path_to_uri(lossy_path), "message": message})
                    continue
            classified = _classify(entry)
            if classified is None:
                continue
            if examined >= max_entries:
                result["truncated"] = True
                return result
            examined += 1
            kind, dir_stat = classified
            child = os.path.join(directory, entry.name)
            if kind == _FILE:
                out_entries.append({"path": path_to_uri(child), "kind": "file"})
                continue
            if kind == _OTHER or (kind == _LINK_DIR and not follow_directory_symlinks):
                continue
            out_entries.append({"path": path_to_uri(child), "kind": "directory"})
            assert dir_stat is not None
            key = (dir_stat.st_dev, dir_stat.st_ino)
            hidden = prune_hidden_directories and entry.name.startswith(".")
            if depth < max_depth and not hidden and key not in visited:
                visited.add(key)
                queue.append((child, depth + 1))
    return result
