"""Server-wide state shared by all connections: config, sessions, methods, and the
facilities services use (``state``, ``telemetry``, ``limits``, ``resources``; see
:class:`execserver.kernel.ServiceHost`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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

__all__ = ["OpenConnection", "ServerRuntime"]


class OpenConnection(Protocol):
    """What the runtime needs of an open connection (the server's ``Connection``,
    which imports this module: a Protocol keeps the two acyclic): shutdown aborts
    every one."""

    # The tenant it was admitted as (None without --tenants): a reload that removes
    # the tenant aborts it.
    principal: str | None

    def abort(self, reason: str) -> None: ...


@dataclass
class ServerRuntime:
    config: ServerConfig
    methods: MethodTable
    sessions: SessionRegistry
    # Server-wide service state (e.g. the sandbox backend), closed at shutdown.
    state: ScopedState = field(default_factory=lambda: ScopedState("server"))
    # Added and removed by the transports; the limit check counts them.
    connections: set[OpenConnection] = field(default_factory=set)
    # `runtime.audit.emit(...)`: a no-op unless --audit-log is set.
    audit: AuditLog = field(default_factory=AuditLog)
    metrics: Metrics = field(default_factory=Metrics)
    limits: ServerLimits = field(init=False)
    # What services report to: writes `audit` and `metrics`.
    telemetry: ServerTelemetry = field(init=False)
    # Everything built at start-up, stored by the runner under its class (the
    # sandbox backend, the per-process cgroups); services look them up there.
    resources: Resources = field(default_factory=Resources)
    # Set once shutdown begins: /readyz turns 503, session closes are audited as shutdown.
    shutting_down: bool = False
    # Set when a drain begins: no new sessions (resumes still work), /readyz 503.
    draining: bool = False

    def __post_init__(self) -> None:
        self.limits = ServerLimits(self.config.limits)
        self.telemetry = ServerTelemetry(
            self.audit,
            self.metrics,
            self.config.process_limits,
            self.sessions.principal_of if self.config.tenants_file is not None else None,
        )
        self.metrics.track_sessions(lambda: len(self.sessions))
        self.metrics.track_audit_drops(lambda: self.audit.dropped)

    async def aclose(self) -> None:
        self.shutting_down = True
        await self.sessions.aclose()
        # Server-wide service state: the fs helper pool among it.
        await self.state.aclose()
        cgroups = self.resources.get(ProcessCgroups)
        if cgroups is not None:
            cgroups.close()
        await self.audit.aclose()
