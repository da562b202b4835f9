"""fs/open under a sandbox: the policy is applied at open time.

A file descriptor cannot come back from a sandboxed helper, so the
helper performs the open itself — with the request's policy enforced by the
kernel, creating/truncating for ``replace`` — and reports the inode it got.
The daemon then reopens the path without creating or truncating and keeps
the descriptor only if it is that very inode; anything else (the path was
swapped in between) is refused with EACCES. The data the handle then reads or
writes is exactly what the sandbox allowed to be opened in that mode.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Hashable
from typing import Any

from execserver.fs.dispatch import in_thread_to_completion, needs_sandbox, run_sandboxed
from execserver.fs.handle_io import open_fd
from execserver.fs.operations import OPEN_FOR_HANDLE
from execserver.fs.sandboxed.client import SandboxedFs
from execserver.wire.fs import OpenMode
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["open_handle_fd", "reopen_same_inode"]


def reopen_same_inode(path: str, mode: str, dev: int, ino: int) -> int:
    fd = open_fd(path, mode, truncate=False)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (dev, ino):
        os.close(fd)
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    return fd


async def open_handle_fd(
    sandbox: FileSystemSandboxContext | None,
    path: str,
    mode: OpenMode,
    fs: Callable[[], SandboxedFs],
    caller: Hashable = None,
) -> int:
    write = mode == "replace"
    if not needs_sandbox(sandbox, write=write):
        return await in_thread_to_completion(open_fd, path, mode, on_abandon=os.close)
    assert sandbox is not None
    args = {"path": path, "mode": mode}
    ident: Any = await run_sandboxed(sandbox, OPEN_FOR_HANDLE, args, fs(), caller)
    dev, ino = int(ident["dev"]), int(ident["ino"])
    return await in_thread_to_completion(
        reopen_same_inode, path, mode, dev, ino, on_abandon=os.close
    )
