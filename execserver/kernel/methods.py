"""The method table: method name -> (params decoder, lifecycle family, handler).

Services register their methods here; they never see JSON-RPC framing or
the transport. A handler takes the request context and typed params and
returns a msgspec-encodable result or raises ``RpcError``.

A method whose answer is usually ready at once (a cursor read of buffered
output, a stat of a local file) may register an ``at_once`` function as
well: a plain function with the handler's signature that returns the result
without waiting, or ``MUST_WAIT`` when this request has to wait (before it
has done anything), in which case the handler serves it as usual. The
connection calls it inline, without a task or any coroutine: on a
request-response round trip that is most of the daemon's own Python work.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from execserver.kernel.context import RequestContext
from execserver.wire.contract import REQUESTS
from execserver.wire.decode import ParamsDecoder

__all__ = [
    "MUST_WAIT",
    "AtOnce",
    "Handler",
    "MethodSpec",
    "MethodTable",
    "MustWait",
    "RequestContext",
]

P = TypeVar("P")


Handler = Callable[[RequestContext, P], Awaitable[Any]]


class MustWait(enum.Enum):
    MUST_WAIT = "must wait"


# Returned by an ``at_once`` function: this request has to wait, let the handler serve it.
MUST_WAIT = MustWait.MUST_WAIT

AtOnce = Callable[[RequestContext, P], Any]


@dataclass(frozen=True)
class MethodSpec(Generic[P]):
    name: str
    # Decodes the params (serde's texts) and runs the method's own checks that the
    # reference makes while decoding, i.e. before the lifecycle check.
    decoder: ParamsDecoder[P]
    handler: Handler[P]
    # The lifecycle family named in "client must call initialize before using <family> methods".
    family: str
    # The answer without waiting, or MUST_WAIT (see the module docstring); None: always the handler.
    at_once: AtOnce[P] | None = None


@dataclass
class MethodTable:
    methods: dict[str, MethodSpec[Any]] = field(default_factory=dict)
    # Capability flags (EnvironmentCapabilities attribute names) that registered services provide.
    capabilities: set[str] = field(default_factory=set)

    def add(
        self,
        name: str,
        handler: Handler[P],
        *,
        family: str,
        prepare: Callable[[Any], P] | None = None,
        at_once: AtOnce[P] | None = None,
        params_type: type | None = None,
    ) -> None:
        """Register ``handler`` for ``name``. The params type is the protocol
        contract's (wire/contract.py), looked up by method name; ``prepare`` takes
        the decoded params and returns what the handler receives (raising
        ``RpcError`` for what the reference refuses while decoding). ``at_once``
        answers without waiting when it can (module docstring); it must give the
        same answers as ``handler``.
        ``params_type`` is only for methods outside the contract (tests)."""
        if name in self.methods:
            raise ValueError(f"method {name} registered twice")
        contract = REQUESTS.get(name)
        if contract is not None:
            if params_type is not None:
                raise ValueError(f"{name}: the params type comes from the contract")
            params_type = contract[0]
        elif params_type is None:
            raise ValueError(f"{name} is not in the contract: give its params_type")
        decoder: ParamsDecoder[Any] = ParamsDecoder(params_type, prepare)
        self.methods[name] = MethodSpec(name, decoder, handler, family, at_once)

    def get(self, name: str) -> MethodSpec[Any] | None:
        return self.methods.get(name)
