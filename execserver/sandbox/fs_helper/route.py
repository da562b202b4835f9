"""The switch in the sandboxed fs path: which calls a persistent helper serves.

``run_sandboxed_fs_call`` asks ``call_persistent`` first; it answers
``(False, None)`` for anything it does not serve — a function outside the fs
service's operations (tests run their own functions through the one-shot
helper), a policy only the one-shot helper can enforce (see
``pool.eligible``), or a daemon configured for one-shot helpers only
(``SandboxConfig.persistent_fs_helper``) — and the one-shot helper runs the
call instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.pool import eligible, loop_pool
from execserver.sandbox.policy import ResolvedPolicy
from execserver.wire.base64_text import base64_text, trusted_base64_bytes

__all__ = ["call_persistent"]


def _decoded_write(args: dict[str, Any]) -> dict[str, Any]:
    data = trusted_base64_bytes(args["data_base64"])
    rest = {k: v for k, v in args.items() if k != "data_base64"}
    return {**rest, "data": data}


def _same(args: dict[str, Any]) -> dict[str, Any]:
    return args


def _keep(result: Any) -> Any:
    return result


# func spec -> (helper operation, args transform, result transform)
_ROUTES: Final[
    dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]], Callable[[Any], Any]]]
] = {
    "execserver.fs.ops_read:read_file": ("read_file", _same, base64_text),
    "execserver.fs.ops_read:get_metadata": ("get_metadata", _same, _keep),
    "execserver.fs.ops_read:canonicalize": ("canonicalize", _same, _keep),
    "execserver.fs.ops_read:read_directory": ("read_directory", _same, _keep),
    "execserver.fs.walk:walk": ("walk", _same, _keep),
    "execserver.fs.ops_write:write_file_bytes": ("write_file", _same, _keep),
    "execserver.fs.ops_write:write_file": ("write_file", _decoded_write, _keep),
    "execserver.fs.ops_write:create_directory": ("create_directory", _same, _keep),
    "execserver.fs.ops_write:remove": ("remove", _same, _keep),
    "execserver.fs.ops_write:copy": ("copy", _same, _keep),
    "execserver.fs.handle_io:open_for_handle": ("open_for_handle", _same, _keep),
}


async def call_persistent(
    policy: ResolvedPolicy, backend: SandboxBackend, func: str, args: dict[str, Any]
) -> tuple[bool, Any]:
    """Serve the call in a persistent helper when one can: ``(True, result)``."""
    route = _ROUTES.get(func)
    if route is None or not eligible(policy, backend):
        return False, None
    op, prepare, finish = route
    served, result = await loop_pool().call(policy, backend, op, prepare(args))
    return (True, finish(result)) if served else (False, None)
