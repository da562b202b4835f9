"""The fs operations that may run in a sandboxed helper, each named once.

One table for both ends: the daemon runs ``local`` in a worker thread when no
sandbox restricts the access, and otherwise sends ``name`` to a helper, whose
program (``execserver/fs/sandboxed/program.py``) runs ``in_helper`` under that
name; the helper's answer goes through ``finish`` on the daemon. The functions
are imported, never named by string, so the import graph sees every edge.
"""

from __future__ import annotations

from execserver.fs import handle_io, ops_read, ops_write, walk
from execserver.wire.base64_text import base64_text

# The sandboxed fs helper imports this module: no typing or dataclasses at run
# time (execserver/fs/sandboxed/program.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

__all__ = [
    "CANONICALIZE",
    "COPY",
    "CREATE_DIRECTORY",
    "FS_OPERATIONS",
    "GET_METADATA",
    "OPEN_FOR_HANDLE",
    "READ_DIRECTORY",
    "READ_FILE",
    "REMOVE",
    "WALK",
    "WRITE_FILE",
    "FsOperation",
]


def _same(result: Any) -> Any:
    return result


class FsOperation:
    """``name``: the helper operation; ``local``: the blocking function run
    in-process; ``in_helper`` (default ``local``): what the helper runs;
    ``finish``: applied on the daemon to the helper's answer (bytes cross the
    helper's channel raw, so a read is base64-encoded once, here).

    ``program``: for an operation of another service (which fs may not import),
    the module of that service's helper program: ``program.main`` of
    ``execserver/fs/sandboxed/program.py`` with its own operations table. Such a
    call runs in a confined helper of its own; None is the fs program."""

    __slots__ = ("finish", "in_helper", "local", "name", "program")
    # A plain class, not a dataclass: the sandboxed fs helper imports this module.
    name: str
    local: Callable[..., Any]
    in_helper: Callable[..., Any] | None
    finish: Callable[[Any], Any]
    program: str | None

    def __init__(
        self,
        name: str,
        local: Callable[..., Any],
        in_helper: Callable[..., Any] | None = None,
        finish: Callable[[Any], Any] = _same,
        program: str | None = None,
    ) -> None:
        self.name = name
        self.local = local
        self.in_helper = in_helper
        self.finish = finish
        self.program = program

    def __repr__(self) -> str:
        return f"FsOperation({self.name!r})"

    @property
    def helper_function(self) -> Callable[..., Any]:
        return self.local if self.in_helper is None else self.in_helper


READ_FILE: Final = FsOperation(
    "read_file", ops_read.read_file, in_helper=ops_read.read_file_bytes, finish=base64_text
)
GET_METADATA: Final = FsOperation("get_metadata", ops_read.get_metadata)
CANONICALIZE: Final = FsOperation("canonicalize", ops_read.canonicalize)
READ_DIRECTORY: Final = FsOperation("read_directory", ops_read.read_directory)
WALK: Final = FsOperation("walk", walk.walk)
WRITE_FILE: Final = FsOperation("write_file", ops_write.write_file_bytes)
CREATE_DIRECTORY: Final = FsOperation("create_directory", ops_write.create_directory)
REMOVE: Final = FsOperation("remove", ops_write.remove)
COPY: Final = FsOperation("copy", ops_write.copy)
# fs/open under a sandbox: the helper opens (the policy applied at open time) and
# reports the inode; the daemon reopens it (execserver/fs/sandboxed_open.py).
OPEN_FOR_HANDLE: Final = FsOperation("open_for_handle", handle_io.open_for_handle)

FS_OPERATIONS: Final = (
    READ_FILE,
    GET_METADATA,
    CANONICALIZE,
    READ_DIRECTORY,
    WALK,
    WRITE_FILE,
    CREATE_DIRECTORY,
    REMOVE,
    COPY,
    OPEN_FOR_HANDLE,
)
