"""Exit codes and one-line error messages of the client command-line tools
(``execserver run``, ``shell``, ``patch``).

A person at a terminal gets one line naming what is wrong and what to do, never
a traceback; the JSON-RPC code is added only with ``--verbose``.

Exit codes (besides the remote command's own 0-255):

====  ==========================================================================
2     usage error (bad flag value, relative ``--cwd``, URL without ``ws://``)
124   ``run --timeout`` expired; the remote command was terminated (as
      ``timeout(1)`` exits)
125   the command could not be started for another reason (cwd missing on the
      executor, request refused) — as ``docker run`` / ``env`` do
126   the program exists but cannot be executed
127   the program was not found on the executor (as shells do)
255   could not connect, authentication refused, or connection lost (as ssh)
128+N the local ``execserver`` was ended by signal N (the remote command was
      terminated first); 141 when our stdout was closed (``| head``); 130 when
      ``patch`` was interrupted by ^C
====  ==========================================================================
"""

from __future__ import annotations

import errno
import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from execserver.client.errors import ExecServerConnectError

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_CANNOT_START",
    "EXIT_CONNECTION",
    "EXIT_INTERRUPTED",
    "EXIT_TIMEOUT",
    "UsageError",
    "explain",
    "report",
]

EXIT_USAGE: Final = 2
EXIT_TIMEOUT: Final = 124
EXIT_CANNOT_START: Final = 125
EXIT_NOT_EXECUTABLE: Final = 126
EXIT_NOT_FOUND: Final = 127
EXIT_CONNECTION: Final = 255
EXIT_BROKEN_PIPE: Final = 128 + 13
EXIT_INTERRUPTED: Final = 128 + 2  # SIGINT, as a shell reports a command ended by ^C

TOKEN_HINT: Final = "pass it with --token or set $EXECSERVER_TOKEN"


class UsageError(Exception):
    """A command-line value that cannot work; reported with exit code 2."""


def explain(exc: BaseException, *, url: str, verbose: bool = False) -> tuple[int, str]:
    """The exit code and the one-line message for an error of a client tool."""
    # Imported here: a command that only reports a line (a usage error, or the
    # answer of a control master) never needs the client's error classes.
    from execserver.client.errors import (
        CommandNotExecutable,
        CommandNotFound,
        ExecServerConnectError,
        ExecServerError,
        ExecServerRpcError,
        ExecServerTimeout,
        ExecServerTransportClosed,
        ExecServerUnavailable,
        ProcessFailed,
        WorkingDirectoryNotADirectory,
        WorkingDirectoryNotFound,
    )

    if isinstance(exc, UsageError | ValueError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, CommandNotFound):
        return EXIT_NOT_FOUND, str(exc)
    if isinstance(exc, CommandNotExecutable):
        return EXIT_NOT_EXECUTABLE, str(exc)
    if isinstance(exc, WorkingDirectoryNotFound | WorkingDirectoryNotADirectory):
        what = "does not exist" if isinstance(exc, FileNotFoundError) else "is not a directory"
        return (
            EXIT_CANNOT_START,
            f"working directory {exc.filename} {what} on the executor; pass an existing "
            "absolute directory with --cwd",
        )
    if isinstance(exc, ExecServerConnectError):
        return EXIT_CONNECTION, _connect_message(exc, url)
    if isinstance(exc, ExecServerTimeout):
        return EXIT_CONNECTION, f"{exc} (is {url} an exec-server, and reachable?)"
    if isinstance(exc, ExecServerTransportClosed | ExecServerUnavailable | ProcessFailed):
        return EXIT_CONNECTION, f"lost the connection to {url}: {exc}"
    if isinstance(exc, ExecServerRpcError):
        text = " ".join(exc.message.split())
        if verbose:
            text += f" (JSON-RPC error {exc.code})"
        return EXIT_CANNOT_START, f"the exec-server refused the request: {text}"
    if isinstance(exc, ExecServerError | OSError):
        return EXIT_CANNOT_START, str(exc)
    raise exc


def _connect_message(exc: ExecServerConnectError, url: str) -> str:
    reason = exc.reason or str(exc)
    if exc.status == 401:
        if "missing" in reason:
            return f"{url} requires a token (HTTP 401: {reason}); {TOKEN_HINT}"
        return f"{url} refused the token (HTTP 401: {reason}); {TOKEN_HINT}"
    if exc.status is not None:
        return f"{url} refused the websocket upgrade: HTTP {exc.status}: {reason}"
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED:
        return f"cannot connect to {url}: connection refused; is the exec-server running there?"
    return f"{exc}; is the exec-server running there?"


def report(prog: str, message: str) -> None:
    """One line on stderr."""
    sys.stderr.write(f"{prog}: {' '.join(message.split())}\n")
    sys.stderr.flush()
