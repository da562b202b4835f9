"""SandboxAttempt: how one attempt of a tool call runs.

Three different things are called "sandbox" and are kept apart here:

* ``sandbox_requested`` — policy wants isolation for this attempt; it decides
  whether a ``FileSystemSandboxContext`` is sent;
* ``sandbox`` — the host sandbox wrapping argv on the core's machine; always
  NONE for an executor-managed environment;
* ``exec_server_permissions`` — the symbolic profile the executor enforces.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.errors import Rejected
from execserver.core.permissions import (
    DisabledProfile,
    ExternalProfile,
    FsAccess,
    NetworkAccess,
    PermissionProfile,
    RestrictedFs,
    SpecialPath,
    has_deny_read,
    profile_to_wire,
    uses_policy_cwd,
)
from execserver.core.policy import SandboxablePreference, SandboxOverride
from execserver.wire.process import ExecEnvPolicy, ExecParams
from execserver.wire.sandbox import FileSystemSandboxContext
from execserver.wire.uri import path_to_uri

__all__ = [
    "SandboxAttempt",
    "SandboxType",
    "attempt_process_id",
    "exec_start_params",
    "first_attempt",
    "retry_attempt",
    "sandbox_context",
    "should_sandbox",
    "unsandboxed_execution_allowed",
]

NETWORK_PROXY_LAUNCH_UNSUPPORTED = (
    "selected exec-server does not support executor-local network proxy launches"
)


class SandboxType(enum.Enum):
    NONE = "none"
    MACOS_SEATBELT = "macosSeatbelt"
    LINUX_SECCOMP = "linuxSeccomp"
    WINDOWS_RESTRICTED_TOKEN = "windowsRestrictedToken"


def should_sandbox(
    profile: PermissionProfile,
    preference: SandboxablePreference,
    managed_network_active: bool,
) -> bool:
    """Does this profile want isolation at all?"""
    if preference is SandboxablePreference.FORBID:
        return False
    if isinstance(profile, DisabledProfile | ExternalProfile):
        return False
    if preference is SandboxablePreference.REQUIRE or managed_network_active:
        return True
    fs = profile.file_system
    network_on = profile.network is NetworkAccess.ENABLED
    if isinstance(fs, RestrictedFs):
        # A restricted list that writes the whole disk with network on confines nothing.
        full_write = any(
            isinstance(e.target, SpecialPath)
            and e.target.kind == "root"
            and e.access is FsAccess.WRITE
            for e in fs.entries
        )
        return not (full_write and network_on and not has_deny_read(profile))
    return not network_on


def unsandboxed_execution_allowed(
    profile: PermissionProfile, managed_network: ManagedNetwork | None
) -> bool:
    """May an attempt of this call run without the sandbox?"""
    if has_deny_read(profile):
        return False
    return not (managed_network is not None and managed_network.owner_policy)


def _host_sandbox(preference: SandboxablePreference) -> SandboxType:
    # Only reachable for a local environment; this library is Linux-hosted.
    del preference
    return SandboxType.LINUX_SECCOMP


@dataclass
class SandboxAttempt:
    environment: ExecutionEnvironment
    sandbox: SandboxType
    sandbox_requested: bool
    permissions: PermissionProfile
    exec_server_permissions: PermissionProfile | None
    enforce_managed_network: bool
    network_proxy: ManagedNetwork | None
    sandbox_cwd: str
    workspace_roots: tuple[str, ...]
    first_attempt: bool
    # Whether the profile alone (AUTO preference) would sandbox this call; an
    # attempt without the sandbox under such a profile is an escalation.
    profile_would_sandbox: bool
    process_id: str = ""
    network_denial_cancellation: asyncio.Event | None = field(default=None, repr=False)

    def is_escalated(self) -> bool:
        return not self.first_attempt or (self.profile_would_sandbox and not self.sandbox_requested)

    @property
    def follow_symlinks(self) -> bool:
        """False exactly when the attempt runs unsandboxed although the profile
        would sandbox: an approved unsandboxed write must not be redirected
        through a symlink."""
        return self.sandbox_requested or not self.profile_would_sandbox


def attempt_process_id(base: str) -> str:
    """A processId no earlier attempt used: the server refuses reuse within a
    session even after exit."""
    return f"{base}-{uuid.uuid4()}"


def first_attempt(
    *,
    environment: ExecutionEnvironment,
    profile: PermissionProfile,
    preference: SandboxablePreference,
    override: SandboxOverride,
    managed_network: ManagedNetwork | None,
    process_id_base: str,
    sandbox_cwd: str | None = None,
) -> SandboxAttempt:
    active = managed_network is not None
    wants = should_sandbox(profile, preference, active)
    requested = override is not SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT and wants
    host = (
        _host_sandbox(preference)
        if requested and not environment.executor_managed
        else SandboxType.NONE
    )
    return _attempt(
        environment,
        profile,
        requested,
        host,
        managed_network,
        process_id_base,
        sandbox_cwd,
        first=True,
    )


def retry_attempt(
    *,
    environment: ExecutionEnvironment,
    profile: PermissionProfile,
    preference: SandboxablePreference,
    managed_network: ManagedNetwork | None,
    process_id_base: str,
    sandbox_cwd: str | None = None,
) -> SandboxAttempt:
    """The second attempt: host NONE, normally unsandboxed. Only a
    profile that may not run unsandboxed keeps its sandbox (the network-context
    retry under a deny-read profile)."""
    requested = not unsandboxed_execution_allowed(profile, managed_network) and should_sandbox(
        profile, preference, managed_network is not None
    )
    return _attempt(
        environment,
        profile,
        requested,
        SandboxType.NONE,
        managed_network,
        process_id_base,
        sandbox_cwd,
        first=False,
    )


def _attempt(
    environment: ExecutionEnvironment,
    profile: PermissionProfile,
    requested: bool,
    host: SandboxType,
    managed_network: ManagedNetwork | None,
    process_id_base: str,
    sandbox_cwd: str | None,
    *,
    first: bool,
) -> SandboxAttempt:
    enforce = requested and managed_network is not None
    return SandboxAttempt(
        environment=environment,
        sandbox=host,
        sandbox_requested=requested,
        permissions=profile,
        exec_server_permissions=profile if environment.executor_managed else None,
        enforce_managed_network=enforce,
        # An escalated attempt gets no proxy.
        network_proxy=managed_network if enforce else None,
        sandbox_cwd=sandbox_cwd or environment.cwd,
        workspace_roots=environment.policy_workspace_roots,
        first_attempt=first,
        profile_would_sandbox=should_sandbox(
            profile, SandboxablePreference.AUTO, managed_network is not None
        ),
        process_id=attempt_process_id(process_id_base),
    )


def sandbox_context(attempt: SandboxAttempt) -> FileSystemSandboxContext | None:
    """The ``sandbox`` member for process/start and fs/* — present exactly when
    the attempt requested the sandbox of an executor-managed environment."""
    profile = attempt.exec_server_permissions
    if not attempt.sandbox_requested or profile is None:
        # A local environment is sandboxed by the host wrapper, not the executor.
        return None
    return FileSystemSandboxContext(
        permissions=profile_to_wire(profile),
        windows_sandbox_level=attempt.environment.windows_sandbox_level,
        # The executor needs the policy cwd only for cwd-relative entries.
        cwd=path_to_uri(attempt.sandbox_cwd) if uses_policy_cwd(profile) else None,
        workspace_roots=[path_to_uri(root) for root in attempt.workspace_roots],
        use_legacy_landlock=attempt.environment.use_legacy_landlock,
    )


def exec_start_params(
    attempt: SandboxAttempt,
    *,
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str] | None = None,
    env_policy: ExecEnvPolicy | None = None,
    tty: bool = False,
    pipe_stdin: bool = False,
    arg0: str | None = None,
) -> ExecParams:
    """``process/start`` params for this attempt: native argv (never a host
    wrapper), the attempt's own processId, the context iff requested."""
    if not argv:
        raise ValueError("argv must not be empty")
    context = sandbox_context(attempt)
    overlay = dict(env or {})
    network = attempt.network_proxy if attempt.enforce_managed_network else None
    if network is not None and network.launch is not None:
        if not attempt.environment.supports_network_proxy_launch:
            raise Rejected(NETWORK_PROXY_LAUNCH_UNSUPPORTED)
    if network is not None:
        overlay.update(network.proxy_env)
    return ExecParams(
        process_id=attempt.process_id,
        argv=list(argv),
        cwd=path_to_uri(cwd),
        env=overlay,
        tty=tty,
        pipe_stdin=pipe_stdin,
        arg0=arg0,
        env_policy=env_policy,
        sandbox=msgspec.Raw(msgspec.json.encode(context)),
        enforce_managed_network=attempt.enforce_managed_network,
        managed_network=network.context if network is not None else None,
        network_proxy=network.launch if network is not None else None,
    )
