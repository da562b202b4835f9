"""Where a tool call runs, and under which managed-network regime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from execserver.wire.process import ManagedNetworkSandboxContext, RemoteNetworkProxyLaunchConfig
from execserver.wire.sandbox import WindowsSandboxLevel

__all__ = ["ExecutionEnvironment", "ManagedNetwork"]


@dataclass(frozen=True)
class ExecutionEnvironment:
    """One executor as the core sees it.

    ``executor_managed`` is true for every environment reached through an
    exec-server (always, for this library): the executor enforces the sandbox,
    so the host sandbox is NONE and argv stays native.
    ``cwd`` is the trusted policy cwd of the turn, a native absolute path on
    the executor.
    """

    environment_id: str
    cwd: str
    workspace_roots: tuple[str, ...] = ()
    executor_managed: bool = True
    windows_sandbox_level: WindowsSandboxLevel = "disabled"
    use_legacy_landlock: bool = False
    supports_network_proxy_launch: bool = False

    @property
    def policy_workspace_roots(self) -> tuple[str, ...]:
        # current_working_directory resolves to the workspace roots on the
        # executor; without roots the cwd stays read-only.
        return self.workspace_roots or (self.cwd,)


@dataclass(frozen=True)
class ManagedNetwork:
    """Managed-network requirements of the turn. Their presence alone makes
    managed network active.

    ``owner_policy``: the policy was attached by the environment's owner, not
    the user; an attempt may then never drop the sandbox.
    ``context``: an existing proxy the sandboxed child may reach.
    ``launch``: ask the executor to start its own proxy (needs the
    ``networkProxyLaunch`` capability).
    """

    owner_policy: bool = False
    context: ManagedNetworkSandboxContext | None = None
    launch: RemoteNetworkProxyLaunchConfig | None = None
    proxy_env: Mapping[str, str] = field(default_factory=dict)
