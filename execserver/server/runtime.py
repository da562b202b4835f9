"""Server-wide state shared by all connections: config, sessions, methods."""

from __future__ import annotations

from dataclasses import dataclass, field

from execserver.config import ServerConfig
from execserver.server.rpc import MethodTable
from execserver.server.scoped import ScopedState
from execserver.server.sessions import SessionRegistry


@dataclass
class ServerRuntime:
    config: ServerConfig
    methods: MethodTable
    sessions: SessionRegistry
    # Server-wide service state (e.g. the sandbox backend), closed at shutdown.
    state: ScopedState = field(default_factory=lambda: ScopedState("server"))
    connections: set[object] = field(default_factory=set)

    async def aclose(self) -> None:
        await self.sessions.aclose()
        await self.state.aclose()
