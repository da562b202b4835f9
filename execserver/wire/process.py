"""process/* requests, results and notifications."""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

from execserver.wire.base import U64, OptionalFieldsStruct, WireStruct, absent_raw

__all__ = [
    "CredentialProviderConfig",
    "ExecEnvPolicy",
    "ExecParams",
    "ExecResponse",
    "ManagedNetworkSandboxContext",
    "ProcessClosedNotification",
    "ProcessExitedNotification",
    "ProcessOutputChunk",
    "ProcessOutputNotification",
    "ReadParams",
    "ReadResponse",
    "RemoteNetworkProxyConfig",
    "RemoteNetworkProxyLaunchConfig",
    "SandboxType",
    "SignalParams",
    "TerminateParams",
    "TerminateResponse",
    "WriteParams",
    "WriteResponse",
    "WriteStatus",
]

ProcessStream = Literal["stdout", "stderr", "pty"]
SandboxType = Literal["none", "linuxSeccomp", "macosSeatbelt", "windowsRestrictedToken"]
WriteStatus = Literal["accepted", "unknownProcess", "stdinClosed", "starting"]


class ExecEnvPolicy(WireStruct):
    """Executor-side environment construction; every member is required."""

    inherit: Literal["all", "core", "none"]
    ignore_default_excludes: bool
    exclude: list[str]
    set: dict[str, str]
    include_only: list[str]


class ShellInfoRequest(WireStruct):
    name: str
    path: str


class ShellSnapshotRequest(WireStruct):
    scope_id: str
    shell: ShellInfoRequest


class ExecMetadata(OptionalFieldsStruct):
    thread_id: str | None = None
    tool_call_id: str | None = None


class NetworkProxyAuditMetadata(OptionalFieldsStruct):
    conversation_id: str | None = None


class CredentialAuthMethod(enum.Enum):
    """How a secret is put into a request that carries none (in the reference's order)."""

    BEARER = "bearer"
    TOKEN = "token"
    BASIC = "basic"
    HEADER = "header"


class CredentialProviderConfig(
    msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True
):
    """One ``credentialProviders`` entry. Unlike the rest of the protocol its
    members are snake_case and unknown ones are refused (as the reference's
    serde struct: ``unknown field `x`, expected one of `env`, ...``)."""

    env: list[str] = msgspec.field(default_factory=list)
    patterns: list[str] = msgspec.field(default_factory=list)
    url_prefixes: list[str] = msgspec.field(default_factory=list)
    url_prefix_from_env: str | None = None
    auth: list[CredentialAuthMethod] = msgspec.field(default_factory=list)
    header: str | None = None
    prefix: str | None = None


class RemoteNetworkProxyConfig(WireStruct):
    enabled: bool
    mode: Literal["limited", "full"]
    enable_socks5: bool
    enable_socks5_udp: bool
    allow_upstream_proxy: bool
    dangerously_allow_all_unix_sockets: bool
    allow_local_binding: bool
    domains: dict[str, Literal["none", "allow", "deny"]] | None = None
    review_domains: list[str] | None = None
    unix_sockets: dict[str, Literal["allow", "deny"]] | None = None
    credential_masking: bool | None = None
    credential_providers: dict[str, CredentialProviderConfig] | None = None


class RemoteNetworkProxyLaunchConfig(WireStruct):
    proxy: RemoteNetworkProxyConfig
    policy_decision_timeout_ms: U64 | None = None
    execution_id: str | None = None
    environment_id: str | None = None
    audit_metadata: NetworkProxyAuditMetadata | None = None


class ManagedNetworkSandboxContext(OptionalFieldsStruct):
    loopback_ports: list[int] | None = None
    allow_local_binding: bool | None = None
    allow_unix_sockets: list[str] | None = None
    dangerously_allow_all_unix_sockets: bool | None = None


class ExecParams(WireStruct):
    process_id: str
    argv: list[str]
    cwd: str  # PathUri
    env: dict[str, str]
    tty: bool
    pipe_stdin: bool = False
    arg0: str | None = None
    env_policy: ExecEnvPolicy | None = None
    # The sandbox context is decoded by execserver.sandbox (its own error texts),
    # so it stays raw JSON here; see wire.sandbox.FileSystemSandboxContext.
    sandbox: msgspec.Raw = msgspec.field(default_factory=absent_raw)
    enforce_managed_network: bool = False
    managed_network: ManagedNetworkSandboxContext | None = None
    network_proxy: RemoteNetworkProxyLaunchConfig | None = None
    shell_snapshot: ShellSnapshotRequest | None = None
    metadata: ExecMetadata | None = None


class ExecResponse(WireStruct):
    process_id: str
    sandbox_type: SandboxType


class ReadParams(WireStruct):
    process_id: str
    after_seq: U64 | None = None
    max_bytes: U64 | None = None
    wait_ms: U64 | None = None


class ProcessOutputChunk(WireStruct):
    seq: U64
    stream: ProcessStream
    chunk: bytes  # base64 on the wire


class ReadResponse(WireStruct):
    chunks: list[ProcessOutputChunk]
    next_seq: U64
    exited: bool
    exit_code: int | None
    closed: bool
    failure: str | None
    sandbox_denied: bool


class WriteParams(WireStruct):
    process_id: str
    chunk: str  # base64; decoded with the reference's strictness by wire.rust.base64
    write_id: str


class WriteResponse(WireStruct):
    status: WriteStatus


class SignalParams(WireStruct):
    process_id: str
    signal: Literal["interrupt"]


class TerminateParams(WireStruct):
    process_id: str


class TerminateResponse(WireStruct):
    running: bool


class ProcessOutputNotification(WireStruct):
    process_id: str
    seq: U64
    stream: ProcessStream
    chunk: bytes


class ProcessExitedNotification(WireStruct):
    process_id: str
    seq: U64
    exit_code: int
    sandbox_denied: bool


class ProcessClosedNotification(WireStruct):
    process_id: str
    seq: U64
