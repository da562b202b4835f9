"""How a server error of an fs/* call becomes the ``OSError`` a local call would
have raised. Its own module so that a one-shot command's file-system calls
(``execserver.core.apply_patch.blocking_fs``) map errors exactly as
:class:`execserver.client.RemoteFileSystem` does without importing it (and
msgspec and the wire types with it)."""

from __future__ import annotations

import errno
import re

from execserver.client.errors import (
    ExecServerError,
    ExecServerRpcError,
    ExecServerTransportClosed,
    ExecServerUnavailable,
    NotFound,
)

__all__ = ["fs_error"]

_OS_ERROR = re.compile(r"\(os error (\d+)\)\s*$")


def fs_error(exc: ExecServerError, path: str) -> OSError:
    """The ``OSError`` a local call would have raised for this server error: the
    OS error number in the message picks the subclass (``Directory not empty
    (os error 39)`` -> ``OSError(ENOTEMPTY)``), -32004 is ``FileNotFoundError``,
    a lost transport is ``BrokenPipeError``."""
    if isinstance(exc, ExecServerTransportClosed | ExecServerUnavailable):
        return BrokenPipeError(errno.EPIPE, "exec-server transport closed")
    if not isinstance(exc, ExecServerRpcError):
        return OSError(errno.EIO, str(exc), path)
    match = _OS_ERROR.search(exc.message)
    if match:
        # OSError(errno, ...) picks the subclass (FileExistsError, ...) itself.
        text = exc.message[: match.start()].rstrip()
        return OSError(int(match.group(1)), text, path)
    if isinstance(exc, NotFound):
        return FileNotFoundError(errno.ENOENT, exc.message, path)
    return OSError(errno.EINVAL, exc.message, path)
