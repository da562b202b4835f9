"""One-line messages and exit codes of the client tools, error by error."""

from __future__ import annotations

import errno

from execserver.client.cli_errors import EXIT_CANNOT_START, EXIT_CONNECTION, explain
from execserver.client.errors import (
    CommandNotExecutable,
    CommandNotFound,
    ExecServerConnectError,
    InvalidParams,
    WorkingDirectoryNotFound,
)

URL = "ws://127.0.0.1:1"


def test_json_rpc_codes_appear_only_with_verbose() -> None:
    error = InvalidParams(-32602, "argv must not be empty")
    code, quiet = explain(error, url=URL)
    assert code == EXIT_CANNOT_START
    assert "argv must not be empty" in quiet and "-32602" not in quiet
    _, verbose = explain(error, url=URL, verbose=True)
    assert "-32602" in verbose


def test_spawn_errors_map_to_shell_exit_codes() -> None:
    assert explain(CommandNotFound("x", "No such file or directory"), url=URL)[0] == 127
    assert explain(CommandNotExecutable("x", "Permission denied"), url=URL)[0] == 126
    code, message = explain(WorkingDirectoryNotFound("/nowhere"), url=URL)
    assert code == EXIT_CANNOT_START and "/nowhere" in message and "--cwd" in message


def test_refusals_keep_the_servers_reason() -> None:
    refused = ExecServerConnectError("refused", status=403, reason="forbidden here")
    code, message = explain(refused, url=URL)
    assert code == EXIT_CONNECTION and "HTTP 403" in message and "forbidden here" in message
    refused_conn = ExecServerConnectError("cannot connect")
    refused_conn.__cause__ = ConnectionRefusedError(errno.ECONNREFUSED, "refused")
    assert "connection refused" in explain(refused_conn, url=URL)[1]
