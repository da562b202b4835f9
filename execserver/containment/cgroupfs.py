"""Reading and writing cgroupfs files: the one place the package touches them.

cgroupfs files are short ASCII texts; a read that fails (the cgroup went away,
the controller is absent, the file is not ours to read) answers None, so the
callers treat a missing figure as unknown rather than as an error. Writes raise
OSError: a limit or a placement that cannot be written must fail the caller.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["int_value", "join_path", "keyed_value", "member_pids", "read_file", "write_file"]


def read_file(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def write_file(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def keyed_value(text: str | None, key: str) -> int:
    """``key N`` line of a flat-keyed file (memory.events, cpu.stat, ...); 0 if absent."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def int_value(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def member_pids(procs_file: str) -> list[int]:
    """The pids listed in a ``cgroup.procs`` file (none when it cannot be read)."""
    return [int(p) for p in (read_file(procs_file) or "").split()]


def join_path(mount: str, path: str) -> str:
    """``path`` (as /proc/<pid>/cgroup names it) under the hierarchy mounted at ``mount``."""
    return os.path.join(mount, path.lstrip("/")).rstrip("/") or "/"
