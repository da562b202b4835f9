"""Runs one filesystem operation inside the sandbox (``python -m execserver.sandbox.fs_runner``).

Protocol: one JSON object on stdin ``{"func": "package.module:function", "args": {...}}``;
one JSON object on stdout, the only thing ever written there:

* ``{"ok": <result>}``
* ``{"os_error": {"errno": N, "strerror": "..."}}`` (mapped to the reference's
  code/message by the daemon)
* ``{"rpc_error": {"code": N, "message": "..."}}`` (an RpcError raised by func)
* ``{"error": "..."}`` (anything else; becomes -32603)

The kernel does the enforcing: this process simply runs inside the mount view
and seccomp filter of the request's policy, so a write outside the writable
roots fails here with EROFS, a read of a denied file with EACCES, and symlinks
are resolved by the kernel inside that view.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from execserver.wire.errors import RpcError

__all__ = ["confine", "main", "run"]


def _load(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"func must be 'package.module:function', got {spec!r}")
    func = getattr(importlib.import_module(module_name), attr)
    if not callable(func):
        raise TypeError(f"{spec} is not callable")
    return func  # type: ignore[no-any-return]


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


def confine(view: dict[str, list[str]], args: dict[str, Any]) -> None:
    """Shrink this helper to the request's view before the operation runs.

    The helper could read more than the policy grants (``:minimal``, the
    interpreter, this package): a path outside the policy's view is reported
    as missing (ENOENT, what the process would get), and Landlock — where the
    kernel has it — then refuses everything outside the view for the rest of
    this process's life, so no symlink swapped in afterwards gets around the
    check. Without Landlock the check above is all there is."""
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


def run(request: dict[str, Any]) -> dict[str, Any]:
    try:
        func = _load(str(request["func"]))
        args = request.get("args", {})
        view = request.get("view")
        if view is not None:
            confine(view, args)
        return {"ok": func(**args)}
    except RpcError as exc:
        return {"rpc_error": {"code": exc.code, "message": exc.message}}
    except OSError as exc:
        return {"os_error": {"errno": exc.errno, "strerror": exc.strerror}}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    request = json.loads(sys.stdin.buffer.read())
    response = run(request)
    sys.stdout.write(json.dumps(response))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
