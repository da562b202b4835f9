"""JSON-RPC error codes of the exec-server protocol and the one exception type
that carries them.

Handlers raise :class:`RpcError`; only the dispatcher turns it into a wire
error object, so the code/message pair is spelled in exactly one place.
"""

from __future__ import annotations

import errno

# Re-exported: the fs, process and sandbox code pairs it with rpc_error_from_os_error.
from execserver.wire.rust.io_error import os_error_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "DRAINING_MESSAGE",
    "EXECUTOR_DRAINING",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "METHOD_NOT_FOUND",
    "NOT_FOUND",
    "PARSE_OR_INVALID_REQUEST",
    "SESSION_ALREADY_ATTACHED",
    "RpcError",
    "os_error_text",
    "rpc_error_from_os_error",
]

PARSE_OR_INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
NOT_FOUND: Final = -32004
SESSION_ALREADY_ATTACHED: Final = -32010
# Ours (the reference never drains): initialize without resumeSessionId while the
# executor drains before a shutdown. A client should open its session elsewhere.
EXECUTOR_DRAINING: Final = -32001
DRAINING_MESSAGE: Final = (
    "executor is draining before shutdown: no new sessions (resume still works); "
    "connect to another executor"
)

# Alias with the JSON-RPC name, for readers who know the standard.
INVALID_REQUEST: Final = PARSE_OR_INVALID_REQUEST


class RpcError(Exception):
    """An error that becomes a JSON-RPC error response ``{"code", "message"}``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r})"

    @classmethod
    def invalid_request(cls, message: str) -> RpcError:
        return cls(PARSE_OR_INVALID_REQUEST, message)

    @classmethod
    def invalid_params(cls, message: str) -> RpcError:
        return cls(INVALID_PARAMS, message)

    @classmethod
    def internal(cls, message: str) -> RpcError:
        return cls(INTERNAL_ERROR, message)

    @classmethod
    def not_found(cls, message: str) -> RpcError:
        return cls(NOT_FOUND, message)


def rpc_error_from_os_error(exc: OSError) -> RpcError:
    """Map an OSError of an fs operation to the reference's code + message."""
    err = exc.errno if exc.errno is not None else errno.EIO
    message = os_error_text(err)
    if err == errno.ENOENT:
        return RpcError(NOT_FOUND, message)
    if err == errno.EACCES:
        return RpcError(PARSE_OR_INVALID_REQUEST, message)
    return RpcError(INTERNAL_ERROR, message)
