"""Core-side client of an exec-server: ``ExecServerClient``, ``RemoteProcess``,
``RemoteFileSystem`` (see core-client.md §1)."""

from execserver.client.connection import (
    ClientState,
    CompletedRemoteProcess,
    ExecServerClient,
)
from execserver.client.errors import (
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

__all__ = [
    "ClientState",
    "Closed",
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
    "SessionAttached",
]
