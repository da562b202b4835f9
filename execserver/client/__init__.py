"""Client of an exec-server: ``ExecServerClient`` (``run``, ``start_process``,
``fs``), ``Sandbox``, the errors it raises; ``execserver.client.sync`` is the
blocking version. Worked examples: docs/client.md."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from execserver.client.commands import CompletedRemoteProcess
    from execserver.client.connection import ClientState, ExecServerClient
    from execserver.client.errors import (
        CommandError,
        CommandFailed,
        CommandIdleTimeout,
        CommandNotExecutable,
        CommandNotFound,
        CommandTimeout,
        ExecServerConnectError,
        ExecServerError,
        ExecServerRpcError,
        ExecServerSessionMismatch,
        ExecServerTimeout,
        ExecServerTransportClosed,
        ExecServerUnavailable,
        ExpectEOF,
        ExpectTimeout,
        HttpConnectionRefused,
        HttpInvalidRequest,
        HttpNameResolutionError,
        HttpRequestError,
        HttpTimeout,
        InternalError,
        InvalidParams,
        InvalidRequest,
        MethodNotFound,
        NotFound,
        PayloadTooLarge,
        ProcessFailed,
        SessionAttached,
        WorkingDirectoryNotADirectory,
        WorkingDirectoryNotFound,
    )
    from execserver.client.events import Closed, Exited, ExitStatus, Failed, Output, ProcessEvent
    from execserver.client.expect import ExpectMatch
    from execserver.client.fs import RemoteFileHandle, RemoteFileSystem, RemotePath
    from execserver.client.http import HttpResponse, RemoteHttp
    from execserver.client.process import RemoteProcess
    from execserver.client.router import ProcessInfo
    from execserver.client.sandbox import Sandbox
    from execserver.client.transfer import TransferError, TransferSummary
    from execserver.wire.process import ExecEnvPolicy

# Exported names -> their modules, imported on first use: importing one submodule
# (e.g. by a command-line tool) must not load the whole package with it.
_EXPORTS = {
    "CompletedRemoteProcess": "execserver.client.commands",
    "ClientState": "execserver.client.connection",
    "ExecServerClient": "execserver.client.connection",
    "CommandError": "execserver.client.errors",
    "CommandFailed": "execserver.client.errors",
    "CommandIdleTimeout": "execserver.client.errors",
    "CommandNotExecutable": "execserver.client.errors",
    "CommandNotFound": "execserver.client.errors",
    "CommandTimeout": "execserver.client.errors",
    "ExecServerConnectError": "execserver.client.errors",
    "ExecServerError": "execserver.client.errors",
    "ExecServerRpcError": "execserver.client.errors",
    "ExecServerSessionMismatch": "execserver.client.errors",
    "ExecServerTimeout": "execserver.client.errors",
    "ExecServerTransportClosed": "execserver.client.errors",
    "ExecServerUnavailable": "execserver.client.errors",
    "ExpectEOF": "execserver.client.errors",
    "ExpectTimeout": "execserver.client.errors",
    "HttpConnectionRefused": "execserver.client.errors",
    "HttpInvalidRequest": "execserver.client.errors",
    "HttpNameResolutionError": "execserver.client.errors",
    "HttpRequestError": "execserver.client.errors",
    "HttpTimeout": "execserver.client.errors",
    "InternalError": "execserver.client.errors",
    "InvalidParams": "execserver.client.errors",
    "InvalidRequest": "execserver.client.errors",
    "MethodNotFound": "execserver.client.errors",
    "NotFound": "execserver.client.errors",
    "PayloadTooLarge": "execserver.client.errors",
    "ProcessFailed": "execserver.client.errors",
    "SessionAttached": "execserver.client.errors",
    "WorkingDirectoryNotADirectory": "execserver.client.errors",
    "WorkingDirectoryNotFound": "execserver.client.errors",
    "Closed": "execserver.client.events",
    "Exited": "execserver.client.events",
    "ExitStatus": "execserver.client.events",
    "Failed": "execserver.client.events",
    "Output": "execserver.client.events",
    "ProcessEvent": "execserver.client.events",
    "ExpectMatch": "execserver.client.expect",
    "RemoteFileHandle": "execserver.client.fs",
    "RemoteFileSystem": "execserver.client.fs",
    "RemotePath": "execserver.client.fs",
    "HttpResponse": "execserver.client.http",
    "RemoteHttp": "execserver.client.http",
    "RemoteProcess": "execserver.client.process",
    "ProcessInfo": "execserver.client.router",
    "Sandbox": "execserver.client.sandbox",
    "TransferError": "execserver.client.transfer",
    "TransferSummary": "execserver.client.transfer",
    "ExecEnvPolicy": "execserver.wire.process",
}

__all__ = [
    "ClientState",
    "Closed",
    "CommandError",
    "CommandFailed",
    "CommandIdleTimeout",
    "CommandNotExecutable",
    "CommandNotFound",
    "CommandTimeout",
    "CompletedRemoteProcess",
    "ExecEnvPolicy",
    "ExecServerClient",
    "ExecServerConnectError",
    "ExecServerError",
    "ExecServerRpcError",
    "ExecServerSessionMismatch",
    "ExecServerTimeout",
    "ExecServerTransportClosed",
    "ExecServerUnavailable",
    "ExitStatus",
    "Exited",
    "ExpectEOF",
    "ExpectMatch",
    "ExpectTimeout",
    "Failed",
    "HttpConnectionRefused",
    "HttpInvalidRequest",
    "HttpNameResolutionError",
    "HttpRequestError",
    "HttpResponse",
    "HttpTimeout",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "Output",
    "PayloadTooLarge",
    "ProcessEvent",
    "ProcessFailed",
    "ProcessInfo",
    "RemoteFileHandle",
    "RemoteFileSystem",
    "RemoteHttp",
    "RemotePath",
    "RemoteProcess",
    "Sandbox",
    "SessionAttached",
    "TransferError",
    "TransferSummary",
    "WorkingDirectoryNotADirectory",
    "WorkingDirectoryNotFound",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
