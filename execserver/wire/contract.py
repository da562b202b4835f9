"""The protocol contract in one table: every method with its params and result
type, every notification with its params type. The JSON Schemas in
``protocol/schema`` are generated from here (``make schema``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from execserver.wire import discovery, fs, http, lifecycle, network, process
from execserver.wire import methods as m
from execserver.wire.base import Empty

__all__ = [
    "CLIENT_NOTIFICATIONS",
    "REQUESTS",
    "SERVER_NOTIFICATIONS",
    "SERVER_REQUESTS",
    "EncodesAs",
]


@dataclass(frozen=True)
class EncodesAs:
    """Marks a handler's result annotation whose value is not the contract type
    itself but encodes to the same JSON, e.g.
    ``Annotated[dict[str, Any], EncodesAs(FileMetadata)]`` for a result built as a
    dict in a worker thread or by the sandbox helper, or base64 text made off the
    event loop (building the Struct would cost a second pass over the data)."""

    type: type


# method -> (params type, result type)
REQUESTS: Final[dict[str, tuple[type, type]]] = {
    m.INITIALIZE: (lifecycle.InitializeParams, lifecycle.InitializeResponse),
    m.ENVIRONMENT_INFO: (Empty, lifecycle.EnvironmentInfo),
    m.ENVIRONMENT_STATUS: (Empty, lifecycle.EnvironmentStatusResponse),
    m.ENVIRONMENT_CONFIG_READ: (
        discovery.EnvironmentConfigReadParams,
        discovery.EnvironmentConfigReadResponse,
    ),
    m.PROCESS_START: (process.ExecParams, process.ExecResponse),
    m.PROCESS_READ: (process.ReadParams, process.ReadResponse),
    m.PROCESS_WRITE: (process.WriteParams, process.WriteResponse),
    m.PROCESS_SIGNAL: (process.SignalParams, Empty),
    m.PROCESS_TERMINATE: (process.TerminateParams, process.TerminateResponse),
    m.FS_READ_FILE: (fs.ReadFileParams, fs.ReadFileResponse),
    m.FS_WRITE_FILE: (fs.WriteFileParams, Empty),
    m.FS_CREATE_DIRECTORY: (fs.CreateDirectoryParams, Empty),
    m.FS_GET_METADATA: (fs.GetMetadataParams, fs.FileMetadata),
    m.FS_CANONICALIZE: (fs.CanonicalizeParams, fs.CanonicalizeResponse),
    m.FS_READ_DIRECTORY: (fs.ReadDirectoryParams, fs.ReadDirectoryResponse),
    m.FS_WALK: (fs.WalkParams, fs.WalkOutcome),
    m.FS_REMOVE: (fs.RemoveParams, Empty),
    m.FS_COPY: (fs.CopyParams, Empty),
    m.FS_OPEN: (fs.OpenParams, fs.OpenResponse),
    m.FS_READ_BLOCK: (fs.ReadBlockParams, fs.ReadBlockResponse),
    m.FS_WRITE_BLOCK: (fs.WriteBlockParams, Empty),
    m.FS_CLOSE: (fs.CloseParams, Empty),
    m.FS_WATCH_MISSING: (fs.WatchMissingParams, fs.WatchMissingResponse),
    m.HTTP_REQUEST: (http.HttpRequestParams, http.HttpRequestResponse),
    m.CAPABILITIES_DISCOVER_V2: (
        discovery.CapabilitiesDiscoverV2Params,
        discovery.CapabilitiesDiscoverV2Response,
    ),
    m.CAPABILITY_ROOTS_DISCOVER_V1: (
        discovery.CapabilityRootsDiscoverV1Params,
        discovery.CapabilityRootsDiscoverV1Response,
    ),
}

# Client -> server notifications.
CLIENT_NOTIFICATIONS: Final[dict[str, type]] = {
    m.INITIALIZED: lifecycle.InitializedNotification,
}

# Server -> client notifications.
SERVER_NOTIFICATIONS: Final[dict[str, type]] = {
    m.PROCESS_OUTPUT: process.ProcessOutputNotification,
    m.PROCESS_EXITED: process.ProcessExitedNotification,
    m.PROCESS_CLOSED: process.ProcessClosedNotification,
    m.HTTP_REQUEST_BODY_DELTA: http.HttpRequestBodyDeltaNotification,
    m.FS_MISSING_CHANGED: fs.MissingChangedNotification,
    m.NETWORK_POLICY_DECISION: network.NetworkPolicyDecisionNotification,
}

# Server -> client requests: method -> (params type, result type).
SERVER_REQUESTS: Final[dict[str, tuple[type, type]]] = {
    m.NETWORK_POLICY_REQUEST: (
        network.NetworkPolicyRequestParams,
        network.NetworkPolicyRequestResult,
    ),
}
