"""The client's exception hierarchy.

One base class, ``ExecServerError``. Error responses from the server become
``ExecServerRpcError`` subclasses chosen by code, so callers can write
``except NotFound`` instead of comparing numbers; everything that is not a
server answer (lost transport, timeouts, a resume that came back with another
session) has its own class.
"""

from __future__ import annotations

import errno
from typing import Final, Literal

from execserver.wire import errors as codes

__all__ = [
    "REFUSAL_BODY_LIMIT",
    "CommandError",
    "CommandFailed",
    "CommandIdleTimeout",
    "CommandNotExecutable",
    "CommandNotFound",
    "CommandTimeout",
    "ExecServerConnectError",
    "ExecServerError",
    "ExecServerRpcError",
    "ExecServerSessionMismatch",
    "ExecServerTimeout",
    "ExecServerTransportClosed",
    "ExecServerUnavailable",
    "ExpectEOF",
    "ExpectTimeout",
    "HttpConnectionRefused",
    "HttpInvalidRequest",
    "HttpNameResolutionError",
    "HttpRequestError",
    "HttpTimeout",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "PayloadTooLarge",
    "ProcessFailed",
    "SessionAttached",
    "WorkingDirectoryNotADirectory",
    "WorkingDirectoryNotFound",
    "rpc_error",
]

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
    """The connection went away before the answer arrived (retryable by reconnecting).

    ``unexecuted``: the server said the request was never executed (it closed with
    1012, service restart, which promises that every request it executed was
    answered first), so sending it again on the next connection cannot run it twice.
    """

    def __init__(self, message: str, *, unexecuted: bool = False) -> None:
        super().__init__(message)
        self.unexecuted = unexecuted


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
    """A remote process's event stream cannot be completed: its output was lost,
    the connection is gone for good, or the client was closed. Iterating the
    process raises it where ``Closed`` would have come; ``process_id`` names it."""

    def __init__(self, message: str, *, process_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.process_id = process_id


class PayloadTooLarge(ExecServerError, ValueError):
    """A request would exceed what the protocol can carry (one message is at most
    64 MiB) and cannot be split for this call; the message names the way out.
    Raised before anything is sent."""


# How much of a refused upgrade's body goes into the error.
REFUSAL_BODY_LIMIT: Final = 500


class ExecServerConnectError(ExecServerError):
    """The transport could not be opened (refused, HTTP 401/403/404 on upgrade, spawn failed)."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        # What the server said when it refused the upgrade (the 401 body).
        self.reason = reason

    @classmethod
    def upgrade_refused(
        cls, url: str, status: int, body: bytes, status_text: str
    ) -> ExecServerConnectError:
        """A refused websocket upgrade: the reason is the body (e.g. ``invalid
        websocket bearer token``) as one line, else the status line's text. Both
        client transports (async and blocking) report refusals through this."""
        text = body[:REFUSAL_BODY_LIMIT].decode("utf-8", "replace")
        reason = " ".join(text.split()) or status_text
        return cls(
            f"websocket upgrade to {url} refused: HTTP {status}: {reason}",
            status=status,
            reason=reason,
        )


# -- running a command (``ExecServerClient.run``) ------------------------------


class CommandNotFound(ExecServerError, FileNotFoundError):
    """The program of a command does not exist on the executor (or is not on its PATH)."""

    def __init__(self, program: str, detail: str) -> None:
        super().__init__(
            f"command not found on the executor: {program!r} ({detail}); "
            "check the name, or give its absolute path"
        )
        self.program = program
        self.filename = program

    def __str__(self) -> str:
        return str(self.args[0])


class CommandNotExecutable(ExecServerError, PermissionError):
    """The program exists but may not be executed (no x bit, a directory, noexec mount)."""

    def __init__(self, program: str, detail: str) -> None:
        super().__init__(
            f"cannot execute {program!r} on the executor ({detail}); "
            "is it a directory, or missing the execute permission?"
        )
        self.program = program
        self.filename = program

    def __str__(self) -> str:
        return str(self.args[0])


class WorkingDirectoryNotFound(ExecServerError, FileNotFoundError):
    """The ``cwd`` of a command does not exist on the executor (``filename`` is it)."""

    def __init__(self, cwd: str) -> None:
        super().__init__(errno.ENOENT, "working directory does not exist on the executor", cwd)


class WorkingDirectoryNotADirectory(ExecServerError, NotADirectoryError):
    """The ``cwd`` of a command exists on the executor but is not a directory."""

    def __init__(self, cwd: str) -> None:
        super().__init__(errno.ENOTDIR, "working directory is not a directory on the executor", cwd)


class CommandError(ExecServerError):
    """A command ran but did not end as asked; carries what it printed."""

    def __init__(
        self,
        message: str,
        argv: list[str],
        stdout: bytes | str,
        stderr: bytes | str,
        pty: bytes | str,
    ) -> None:
        super().__init__(message)
        self.argv = argv
        self.stdout = stdout
        self.stderr = stderr
        self.pty = pty

    @property
    def output(self) -> bytes | str:
        """What the command printed: ``pty`` for a tty command, else ``stdout``."""
        return self.pty or self.stdout


class CommandFailed(CommandError):
    """``check=True`` and the command exited with a non-zero code."""

    def __init__(
        self,
        argv: list[str],
        exit_code: int,
        stdout: bytes | str,
        stderr: bytes | str,
        pty: bytes | str,
    ) -> None:
        super().__init__(
            f"command {argv!r} exited with code {exit_code}", argv, stdout, stderr, pty
        )
        self.exit_code = exit_code

    @property
    def returncode(self) -> int:
        return self.exit_code


class CommandTimeout(CommandError, TimeoutError):
    """The command ran longer than ``timeout``; it was terminated. Output up to then
    is attached."""

    def __init__(
        self,
        argv: list[str],
        timeout: float,
        stdout: bytes | str,
        stderr: bytes | str,
        pty: bytes | str,
        *,
        message: str | None = None,
    ) -> None:
        super().__init__(
            message or f"command {argv!r} timed out after {timeout:g} s and was terminated",
            argv,
            stdout,
            stderr,
            pty,
        )
        self.timeout = timeout


class CommandIdleTimeout(CommandTimeout):
    """The command printed nothing for ``idle_timeout`` seconds; it was terminated
    (its whole tree, as for ``timeout``). A :class:`CommandTimeout` too, told apart
    by its type and ``idle_timeout``; output up to then is attached."""

    def __init__(
        self,
        argv: list[str],
        idle_timeout: float,
        stdout: bytes | str,
        stderr: bytes | str,
        pty: bytes | str,
    ) -> None:
        super().__init__(
            argv,
            idle_timeout,
            stdout,
            stderr,
            pty,
            message=f"command {argv!r} printed nothing for {idle_timeout:g} s "
            "(idle timeout) and was terminated",
        )
        self.idle_timeout = idle_timeout


class ExpectTimeout(ExecServerError, TimeoutError):
    """``expect`` saw no match within its ``timeout``. The process runs on;
    ``before`` is the output held so far (still there for the next read)."""

    def __init__(self, pattern: object, timeout: float, before: bytes | str) -> None:
        super().__init__(f"no match for {pattern!r} within {timeout:g} s")
        self.pattern = pattern
        self.timeout = timeout
        self.before = before


class ExpectEOF(ExecServerError, EOFError):
    """The process's output ended (``Closed``) without a match; ``before`` is
    the output that was left."""

    def __init__(self, pattern: object, before: bytes | str) -> None:
        super().__init__(f"the output ended without a match for {pattern!r}")
        self.pattern = pattern
        self.before = before


class HttpRequestError(ExecServerError):
    """``http/request`` could not get a response (the executor's HTTP client
    failed). ``server_message`` is the server's text. Raised as this base class
    when the cause could not be told."""

    def __init__(self, method: str, url: str, server_message: str, detail: str = "") -> None:
        super().__init__(f"{method} {url}: {detail or server_message}")
        self.method = method
        self.url = url
        self.server_message = server_message


class HttpConnectionRefused(HttpRequestError, ConnectionRefusedError):
    """Nothing listens at the URL's host and port (as the executor sees it)."""

    def __init__(self, method: str, url: str, server_message: str) -> None:
        super().__init__(method, url, server_message, "connection refused by the peer")


class HttpNameResolutionError(HttpRequestError):
    """The URL's host name does not resolve on the executor."""

    def __init__(self, method: str, url: str, server_message: str) -> None:
        super().__init__(method, url, server_message, "the host name does not resolve")


class HttpTimeout(HttpRequestError, TimeoutError):
    """No complete response within the request's ``timeout``."""

    def __init__(self, method: str, url: str, server_message: str, timeout: float) -> None:
        super().__init__(method, url, server_message, f"no response within {timeout:g} s")
        self.timeout = timeout


class HttpInvalidRequest(HttpRequestError, ValueError):
    """The server refused to send the request (scheme, URL, method or header name)."""
