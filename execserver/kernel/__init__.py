"""The service-facing kernel: what a service may use of the server.

Services (fs, processes, http_request, discovery, netproxy) import this package
and ``execserver.wire``, never ``execserver.server``; the server implements
the Protocols here and its runner (the composition root) registers every
service's methods in one :class:`MethodTable`. This package imports no service
and nothing of the server.
"""

from execserver.kernel.context import RequestContext, ServiceHost
from execserver.kernel.limits import (
    LIMIT_EXCEEDED,
    LIMIT_FLAGS,
    LimitExceeded,
    ServerLimits,
    Slots,
    check_below,
    describe_limit,
)
from execserver.kernel.methods import Handler, MethodSpec, MethodTable
from execserver.kernel.peer import Notifier, Peer, SessionHandle
from execserver.kernel.resources import Resources
from execserver.kernel.scoped import Closeable, ScopedState
from execserver.kernel.telemetry import ClosedProcess, ExitedProcess, ProcessAccounting, Telemetry

__all__ = [
    "LIMIT_EXCEEDED",
    "LIMIT_FLAGS",
    "Closeable",
    "ClosedProcess",
    "ExitedProcess",
    "Handler",
    "LimitExceeded",
    "MethodSpec",
    "MethodTable",
    "Notifier",
    "Peer",
    "ProcessAccounting",
    "RequestContext",
    "Resources",
    "ScopedState",
    "ServerLimits",
    "ServiceHost",
    "SessionHandle",
    "Slots",
    "Telemetry",
    "check_below",
    "describe_limit",
]
