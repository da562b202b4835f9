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

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from execserver.wire.errors import RpcError


def _load(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"func must be 'package.module:function', got {spec!r}")
    func = getattr(importlib.import_module(module_name), attr)
    if not callable(func):
        raise TypeError(f"{spec} is not callable")
    return func  # type: ignore[no-any-return]


def run(request: dict[str, Any]) -> dict[str, Any]:
    try:
        func = _load(str(request["func"]))
        return {"ok": func(**request.get("args", {}))}
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
