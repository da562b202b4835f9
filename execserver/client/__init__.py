"""Client of an exec-server: ``ExecServerClient`` (``run``, ``start_process``,
``fs``), ``Sandbox``, the errors it raises; ``execserver.client.sync`` is the
blocking version. Worked examples: docs/client.md."""

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
    WorkingDirectoryNotADirectory,
    WorkingDirectoryNotFound,
)
from execserver.client.events import Closed, Exited, ExitStatus, Failed, Output, ProcessEvent
from execserver.client.fs import RemoteFileHandle, RemoteFileSystem, RemotePath
from execserver.client.process import RemoteProcess
from execserver.client.sandbox import Sandbox
from execserver.wire.process import ExecEnvPolicy

__all__ = [
    "ClientState",
    "Closed",
    "CommandError",
    "CommandFailed",
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
    "WorkingDirectoryNotADirectory",
    "WorkingDirectoryNotFound",
]
