"""What a handler is given with its params: the request's peer and the server's facilities."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from execserver.kernel.limits import ServerLimits
from execserver.kernel.peer import Peer, SessionHandle
from execserver.kernel.resources import Resources
from execserver.kernel.scoped import ScopedState
from execserver.kernel.telemetry import Telemetry

if TYPE_CHECKING:
    from execserver.config import ServerConfig

__all__ = ["RequestContext", "ServiceHost"]


class ServiceHost(Protocol):
    """The server-wide facilities a service may use (the server's runtime provides them)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def state(self) -> ScopedState:
        """Server-wide service state (a supervisor, an HTTP client pool), closed at shutdown."""
        ...

    @property
    def telemetry(self) -> Telemetry: ...

    @property
    def limits(self) -> ServerLimits: ...

    @property
    def resources(self) -> Resources:
        """Objects the composition root created at start-up for one service."""
        ...


@dataclass
class RequestContext:
    """What a handler may touch: the connection it was called on and the server."""

    peer: Peer
    server: ServiceHost
    _slot: asyncio.Semaphore
    _holding: bool = True

    @property
    def session(self) -> SessionHandle:
        session = self.peer.session
        if session is None:  # lifecycle checks make this unreachable for handlers
            raise RuntimeError("no session")
        return session

    @contextlib.asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        """Give up this request's concurrency slot while waiting (e.g. a long-poll read).

        The reference serialises requests by default, so a long-poll
        ``process/read`` blocks everything behind it; we release the slot so
        other requests on the connection go on.
        """
        if self._holding:
            self._slot.release()
            self._holding = False
        try:
            yield
        finally:
            await self._slot.acquire()
            self._holding = True
