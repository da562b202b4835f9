"""Method and notification names of the exec-server protocol (0.169.0)."""

from typing import Final

__all__ = [
    "CAPABILITIES_DISCOVER_V2",
    "CAPABILITY_ROOTS_DISCOVER_V1",
    "CLIENT_REQUESTS",
    "ENVIRONMENT_CONFIG_READ",
    "ENVIRONMENT_INFO",
    "ENVIRONMENT_STATUS",
    "FS_CANONICALIZE",
    "FS_CLOSE",
    "FS_COPY",
    "FS_CREATE_DIRECTORY",
    "FS_GET_METADATA",
    "FS_MISSING_CHANGED",
    "FS_OPEN",
    "FS_READ_BLOCK",
    "FS_READ_DIRECTORY",
    "FS_READ_FILE",
    "FS_REMOVE",
    "FS_WALK",
    "FS_WATCH_MISSING",
    "FS_WRITE_BLOCK",
    "FS_WRITE_FILE",
    "HTTP_REQUEST",
    "HTTP_REQUEST_BODY_DELTA",
    "INITIALIZE",
    "INITIALIZED",
    "NETWORK_POLICY_DECISION",
    "NETWORK_POLICY_REQUEST",
    "PROCESS_CLOSED",
    "PROCESS_EXITED",
    "PROCESS_OUTPUT",
    "PROCESS_READ",
    "PROCESS_SIGNAL",
    "PROCESS_START",
    "PROCESS_TERMINATE",
    "PROCESS_WRITE",
]

INITIALIZE: Final = "initialize"
INITIALIZED: Final = "initialized"
ENVIRONMENT_INFO: Final = "environment/info"
ENVIRONMENT_STATUS: Final = "environment/status"
ENVIRONMENT_CONFIG_READ: Final = "environmentConfig/read"

PROCESS_START: Final = "process/start"
PROCESS_READ: Final = "process/read"
PROCESS_WRITE: Final = "process/write"
PROCESS_SIGNAL: Final = "process/signal"
PROCESS_TERMINATE: Final = "process/terminate"

FS_READ_FILE: Final = "fs/readFile"
FS_WRITE_FILE: Final = "fs/writeFile"
FS_CREATE_DIRECTORY: Final = "fs/createDirectory"
FS_GET_METADATA: Final = "fs/getMetadata"
FS_CANONICALIZE: Final = "fs/canonicalize"
FS_READ_DIRECTORY: Final = "fs/readDirectory"
FS_WALK: Final = "fs/walk"
FS_REMOVE: Final = "fs/remove"
FS_COPY: Final = "fs/copy"
FS_OPEN: Final = "fs/open"
FS_READ_BLOCK: Final = "fs/readBlock"
FS_WRITE_BLOCK: Final = "fs/writeBlock"
FS_CLOSE: Final = "fs/close"
FS_WATCH_MISSING: Final = "fs/watchMissing"

HTTP_REQUEST: Final = "http/request"
CAPABILITIES_DISCOVER_V2: Final = "capabilities/discoverV2"
CAPABILITY_ROOTS_DISCOVER_V1: Final = "capabilityRoots/discoverV1"

# Server -> client notifications.
PROCESS_OUTPUT: Final = "process/output"
PROCESS_EXITED: Final = "process/exited"
PROCESS_CLOSED: Final = "process/closed"
HTTP_REQUEST_BODY_DELTA: Final = "http/request/bodyDelta"
FS_MISSING_CHANGED: Final = "fs/missingChanged"
NETWORK_POLICY_DECISION: Final = "network/policyDecision"

# Server -> client request.
NETWORK_POLICY_REQUEST: Final = "network/policyRequest"

CLIENT_REQUESTS: Final = (
    INITIALIZE,
    ENVIRONMENT_INFO,
    ENVIRONMENT_STATUS,
    ENVIRONMENT_CONFIG_READ,
    PROCESS_START,
    PROCESS_READ,
    PROCESS_WRITE,
    PROCESS_SIGNAL,
    PROCESS_TERMINATE,
    FS_READ_FILE,
    FS_WRITE_FILE,
    FS_CREATE_DIRECTORY,
    FS_GET_METADATA,
    FS_CANONICALIZE,
    FS_READ_DIRECTORY,
    FS_WALK,
    FS_REMOVE,
    FS_COPY,
    FS_OPEN,
    FS_READ_BLOCK,
    FS_WRITE_BLOCK,
    FS_CLOSE,
    FS_WATCH_MISSING,
    HTTP_REQUEST,
    CAPABILITIES_DISCOVER_V2,
    CAPABILITY_ROOTS_DISCOVER_V1,
)
