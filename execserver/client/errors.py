"""The client's exception hierarchy (core-client.md §1.6).

One base class, ``ExecServerError``. Error responses from the server become
``ExecServerRpcError`` subclasses chosen by code, so callers can write
``except NotFound`` instead of comparing numbers; everything that is not a
server answer (lost transport, timeouts, a resume that came back with another
session) has its own class.
"""

from __future__ import annotations

from typing import Literal

from execserver.wire import errors as codes

TimeoutPhase = Literal["connect", "initialize", "request"]


class ExecServerError(Exception):
    """Base of every error raised by ``execserver.client``."""


class ExecServerRpcError(ExecServerError):
    """The server answered a request with a JSON-RPC error object."""

    code: int

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return f"{self.message} (code {self.code})"


class InvalidRequest(ExecServerRpcError):
    """-32600: protocol state (handshake order, duplicate processId, unknown session...)."""


class MethodNotFound(ExecServerRpcError):
    """-32601: the server does not implement the method."""


class InvalidParams(ExecServerRpcError):
    """-32602: params did not decode or failed validation."""


class InternalError(ExecServerRpcError):
    """-32603: OS errors and other executor-side failures."""


class NotFound(ExecServerRpcError):
    """-32004: an fs target or file handle does not exist."""


class SessionAttached(ExecServerRpcError):
    """-32010: the resumed session is still attached to another connection."""


_BY_CODE: dict[int, type[ExecServerRpcError]] = {
    codes.PARSE_OR_INVALID_REQUEST: InvalidRequest,
    codes.METHOD_NOT_FOUND: MethodNotFound,
    codes.INVALID_PARAMS: InvalidParams,
    codes.INTERNAL_ERROR: InternalError,
    codes.NOT_FOUND: NotFound,
    codes.SESSION_ALREADY_ATTACHED: SessionAttached,
}


def rpc_error(code: int, message: str, data: object = None) -> ExecServerRpcError:
    """The exception for a wire error object; unknown codes get the base class."""
    return _BY_CODE.get(code, ExecServerRpcError)(code, message, data)


class ExecServerTransportClosed(ExecServerError):
    """The connection went away before the answer arrived (retryable by reconnecting)."""


class ExecServerTimeout(ExecServerError):
    """No answer in time; ``phase`` says whether connecting, the handshake or a call timed out."""

    def __init__(self, phase: TimeoutPhase, message: str) -> None:
        super().__init__(message)
        self.phase: TimeoutPhase = phase


class ExecServerSessionMismatch(ExecServerError):
    """A resume was answered with a different session id than the one asked for."""


class ExecServerUnavailable(ExecServerError):
    """The client gave up reconnecting (or was closed); no new work is accepted."""


class ProcessFailed(ExecServerError):
    """A remote process's event stream ended in ``Failed`` (e.g. its output was lost)."""


class ExecServerConnectError(ExecServerError):
    """The transport could not be opened (refused, HTTP 401/403/404 on upgrade, spawn failed)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
