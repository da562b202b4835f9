"""Handshake and environment messages."""

from __future__ import annotations

from typing import Literal

from execserver.wire.base import WireStruct

__all__ = [
    "EnvironmentCapabilities",
    "EnvironmentInfo",
    "EnvironmentStatusResponse",
    "InitializeParams",
    "InitializeResponse",
    "InitializedNotification",
    "ShellInfo",
]


class InitializeParams(WireStruct):
    client_name: str
    resume_session_id: str | None = None


class ShellInfo(WireStruct):
    name: str
    path: str  # a native path, not a URI


class EnvironmentCapabilities(WireStruct):
    """Feature flags, in the reference's order. Only what is really implemented is true."""

    network_proxy_launch: bool = False
    network_proxy_review_domains: bool = False
    credential_masking: bool = False
    credential_masking_custom_providers: bool = False
    capability_discovery_sandbox: bool = False
    fs_watch_missing: bool = False
    capability_discovery_v2: bool = False
    environment_config_read: bool = False
    http_header_env_vars: bool = False
    sandboxed_file_streaming: bool = False
    file_write_streaming: bool = False
    shell_snapshot_v2: bool = False
    windows_mxc: bool = False
    linux_root_write_preserves_devices: bool = False
    linux_approved_root_write_preserves_restrictions: bool = False


class EnvironmentInfo(WireStruct):
    shell: ShellInfo
    executor_version: str
    provider_id: str | None
    cwd: str | None
    user_home_dir: str | None
    platform_os: str
    prepend_path_dirs: list[str]
    temporary_directories: list[str]
    temp_dir: str | None
    capabilities: EnvironmentCapabilities


class InitializeResponse(WireStruct):
    session_id: str
    environment_info: EnvironmentInfo


class EnvironmentStatusResponse(WireStruct):
    status: Literal["ready"] | str


class InitializedNotification(WireStruct):
    """``initialized``: params are ignored by the server."""
