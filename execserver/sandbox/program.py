"""The one program lookup of ``process/start``, sandboxed or not.

A bare name is searched in the child's ``PATH`` (the daemon's when the child
has none, as Rust's ``Command`` does for a non-tty child). A relative ``PATH``
entry (``bin``, ``./bin``, an empty entry) is taken relative to the request's
cwd, never the daemon's: measured on the reference 0.169.0, a program found
only under ``<request cwd>/bin`` runs, with and without a sandbox, pipes and
tty alike, while one found only under ``<daemon cwd>/bin`` is "No such file or
directory" (tests/integration/test_process_program_lookup.py).

This is the one place that decides whether and where a program is found. Inside
a sandbox the exec itself is still bwrap's or ``launcher.py``'s execvp (bwrap
has no way to set argv[0], and the program must see the name it was started
by); both run in the request's cwd with the same PATH, so they find what was
found here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["check_program_path", "child_search_path", "find_program"]


def child_search_path(env: Mapping[str, str]) -> str:
    """The PATH a non-tty child's program is looked up in."""
    path = env.get("PATH")
    return path if path is not None else os.environ.get("PATH", os.defpath)


def find_program(name: str, search_path: str, cwd: str) -> str | None:
    """The first executable regular file ``name`` on ``search_path`` (relative
    entries against ``cwd``), or None. ``name`` must not contain a slash."""
    for entry in search_path.split(os.pathsep):
        candidate = os.path.join(cwd, entry or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def check_program_path(program: str, cwd: str) -> int | None:
    """For a program named by path: None when it can be exec'd, else the errno
    execve would report (ENOENT missing, EACCES a directory / not executable)."""
    path = os.path.join(cwd, program)
    if not os.path.exists(path):
        return 2
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        return 13
    return None
