"""Server-wide state shared by all connections: config, sessions, methods, and the
facilities services use (``state``, ``telemetry``, ``limits``, ``resources``; see
:class:`execserver.kernel.ServiceHost`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from execserver.config import ServerConfig
from execserver.containment import ProcessCgroups
from execserver.kernel.limits import ServerLimits
from execserver.kernel.methods import MethodTable
from execserver.kernel.resources import Resources
from execserver.kernel.scoped import ScopedState
from execserver.server.audit import AuditLog
from execserver.server.metrics import Metrics
from execserver.server.sessions import SessionRegistry
from execserver.server.telemetry import ServerTelemetry

__all__ = ["ServerRuntime"]

__all__ = ["ServerRuntime"]

if TYPE_CHECKING:
    from execserver.sandbox.backend import SandboxBackend


@dataclass
class ServerRuntime:
    config: ServerConfig
    methods: MethodTable
    sessions: SessionRegistry
    # Server-wide service state (e.g. the sandbox backend), closed at shutdown.
    state: ScopedState = field(default_factory=lambda: ScopedState("server"))
    connections: set[object] = field(default_factory=set)
    # `runtime.audit.emit(...)`: a no-op unless --audit-log is set.
    audit: AuditLog = field(default_factory=AuditLog)
    metrics: Metrics = field(default_factory=Metrics)
    limits: ServerLimits = field(init=False)
    # What services report to: writes `audit` and `metrics`.
    telemetry: ServerTelemetry = field(init=False)
    # Start-up objects for the services, stored by the runner under their class.
    resources: Resources = field(default_factory=Resources)
    # Per-process resource-limit cgroups (None without --process-*-max limits); the
    # runner also provides them to the processes service through `resources`.
    containment: ProcessCgroups | None = None
    # Probed once at start-up (Server.run, in a worker thread) before serving;
    # None only while not yet probed, when sandboxed requests are refused.
    sandbox_backend: SandboxBackend | None = None
    # Set once shutdown begins: /readyz turns 503, session closes are audited as shutdown.
    shutting_down: bool = False
    # Set when a drain begins: no new sessions (resumes still work), /readyz 503.
    draining: bool = False

    def __post_init__(self) -> None:
        self.limits = ServerLimits(self.config.limits)
        self.telemetry = ServerTelemetry(self.audit, self.metrics, self.config.process_limits)
        self.metrics.track_sessions(lambda: len(self.sessions))

    async def aclose(self) -> None:
        self.shutting_down = True
        await self.sessions.aclose()
        await self.state.aclose()
        # Imported here: the pool pulls in the sandbox planner, which clients
        # importing this module (apply_patch's runtime) never need.
        from execserver.sandbox.fs_helper.pool import close_loop_pool

        await close_loop_pool()
        if self.containment is not None:
            self.containment.close()
        await self.audit.aclose()
