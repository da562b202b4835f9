"""The method table: method name -> (params type, lifecycle family, handler).

Services register their methods here; they never see JSON-RPC framing or
the transport. A handler takes the request context and typed params and
returns a msgspec-encodable result or raises ``RpcError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from execserver.wire.decode import ParamsDecoder

if TYPE_CHECKING:
    from execserver.server.connection import Connection
    from execserver.server.runtime import ServerRuntime
    from execserver.server.sessions import Session

__all__ = ["MethodTable", "RequestContext"]

P = TypeVar("P")


@dataclass
class RequestContext:
    """What a handler may touch: its connection, its session and the server."""

    connection: Connection
    runtime: ServerRuntime
    _slot: asyncio.Semaphore
    _holding: bool = True

    @property
    def session(self) -> Session:
        session = self.connection.session
        if session is None:  # lifecycle checks make this unreachable for handlers
            raise RuntimeError("no session")
        return session

    @contextlib.asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        """Give up this request's concurrency slot while waiting (e.g. a long-poll read).

        The reference serialises requests by default, so a long-poll
        ``process/read`` blocks everything behind it; we release the slot so
        other requests on the connection go on (README.md, "Design notes").
        """
        if self._holding:
            self._slot.release()
            self._holding = False
        try:
            yield
        finally:
            await self._slot.acquire()
            self._holding = True


Handler = Callable[[RequestContext, P], Awaitable[Any]]


@dataclass(frozen=True)
class MethodSpec(Generic[P]):
    name: str
    decoder: ParamsDecoder[P]
    handler: Handler[P]
    # The lifecycle family named in "client must call initialize before using <family> methods".
    family: str
    # Validation that the reference performs while decoding params (before lifecycle checks).
    validate: Callable[[P], None] | None = None


@dataclass
class MethodTable:
    methods: dict[str, MethodSpec[Any]] = field(default_factory=dict)
    # Capability flags (EnvironmentCapabilities attribute names) that registered services provide.
    capabilities: set[str] = field(default_factory=set)

    def add(
        self,
        name: str,
        params_type: type[P],
        handler: Handler[P],
        *,
        family: str,
        rust_name: str | None = None,
        validate: Callable[[P], None] | None = None,
    ) -> None:
        if name in self.methods:
            raise ValueError(f"method {name} registered twice")
        decoder = ParamsDecoder(params_type, rust_name)
        self.methods[name] = MethodSpec(name, decoder, handler, family, validate)

    def get(self, name: str) -> MethodSpec[Any] | None:
        return self.methods.get(name)
