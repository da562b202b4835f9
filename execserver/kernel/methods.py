"""The method table: method name -> (params type, lifecycle family, handler).

Services register their methods here; they never see JSON-RPC framing or
the transport. A handler takes the request context and typed params and
returns a msgspec-encodable result or raises ``RpcError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from execserver.kernel.context import RequestContext
from execserver.wire.decode import ParamsDecoder

__all__ = ["Handler", "MethodSpec", "MethodTable"]

__all__ = ["MethodTable", "RequestContext"]

P = TypeVar("P")


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
