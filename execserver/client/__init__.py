"""Core-side client of an exec-server: ``ExecServerClient``, ``RemoteProcess``,
``RemoteFileSystem`` (see core-client.md §1)."""

from execserver.client.commands import CompletedRemoteProcess
from execserver.client.connection import ClientState, ExecServerClient
from execserver.client.errors import (
    CommandError,
    CommandFailed,
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
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    ProcessFailed,
    SessionAttached,
)
from execserver.client.events import Closed, Exited, ExitStatus, Failed, Output, ProcessEvent
from execserver.client.fs import RemoteFileHandle, RemoteFileSystem, RemotePath
from execserver.client.process import RemoteProcess
from execserver.client.sandbox import Sandbox

__all__ = [
    "ClientState",
    "Closed",
    "CommandError",
    "CommandFailed",
    "CommandNotExecutable",
    "CommandNotFound",
    "CommandTimeout",
    "CompletedRemoteProcess",
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
    "Failed",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "Output",
    "ProcessEvent",
    "ProcessFailed",
    "RemoteFileHandle",
    "RemoteFileSystem",
    "RemotePath",
    "RemoteProcess",
    "Sandbox",
    "SessionAttached",
]
