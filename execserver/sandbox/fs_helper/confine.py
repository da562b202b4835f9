"""A helper that starts with more than its policy's view shrinks itself to it.

A helper started without the private runtime (``runtime.py``: no bwrap, or a
policy that cannot take the private binds) needs the interpreter, this package
and the ``:minimal`` read set to start, which a process with the same policy
may not see. So before it serves a request it confines itself to what such a
process sees (``launch.policy_view``): paths outside it are reported missing, as they
are for that process, and Landlock makes the kernel refuse them too. Every
other check is the kernel's: EROFS outside the writable roots, EACCES on
denied files, symlinks resolved inside the view.

It runs inside the helper, so it imports nothing but the standard library
(and the launcher's Landlock call).
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["confine"]


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _visible(path: str, follow: bool, roots: list[str]) -> bool:
    """Whether ``path`` exists for a process with the request's policy (whose
    view is ``roots``): the path with its directory resolved here, and with
    ``follow`` its final target too, must lie inside the view."""
    directory, name = os.path.split(path)
    if not _inside(os.path.join(os.path.realpath(directory or "/"), name), roots):
        return False
    return not follow or _inside(os.path.realpath(path), roots)


def confine(view: Mapping[str, list[str]], args: Mapping[str, Any]) -> None:
    """Shrink this helper to the request's view before the operation runs.

    A path argument outside the policy's view is reported as missing (ENOENT,
    what the process would get), and Landlock — where the kernel has it — then
    refuses everything outside the view for the rest of this process's life,
    so no symlink swapped in afterwards gets around the check. Without Landlock
    the check above is all there is."""
    read, write = list(view.get("read", [])), list(view.get("write", []))
    roots = [*read, *write]
    follow = bool(args.get("follow_symlinks", True))
    for name, value in args.items():
        if isinstance(value, str) and (name == "path" or name.endswith("_path")):
            if not _visible(value, follow, roots):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    from execserver.sandbox import launcher

    libc = launcher._libc()
    try:
        launcher._apply_landlock(libc, read, write)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
