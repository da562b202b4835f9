"""Resource limits and the errors that name them.

The reference has none of these limits; they exist so that one runaway
client cannot exhaust a shared executor. Every refusal names the CLI flag
that sets the limit and its value, so an operator reading a client's error
knows which knob to turn. Services call :func:`check_below` or hold a
:class:`Slots` around the limited work; the dispatcher counts refusals.
The refusal of a websocket upgrade over --max-connections is the runner's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from execserver.config import LimitsConfig
from execserver.wire.errors import RpcError

__all__ = [
    "LIMIT_EXCEEDED",
    "LIMIT_FLAGS",
    "LimitExceeded",
    "PolicyRefusal",
    "ServerLimits",
    "Slots",
    "check_below",
    "describe_limit",
]

# JSON-RPC reserves -32000..-32099 for implementation-defined server errors; the
# reference never sends -32000, so a client can tell a limit refusal apart.
LIMIT_EXCEEDED: Final = -32000

# LimitsConfig field -> the command-line flag that sets it (named in every refusal).
LIMIT_FLAGS: Final[dict[str, str]] = {
    "max_connections": "--max-connections",
    "max_inflight_requests": "--max-inflight-requests",
    "max_frame_bytes": "--max-frame-bytes",
    "max_processes_per_session": "--max-processes-per-session",
    "max_open_files": "--max-open-files",
    "max_concurrent_http_requests": "--max-concurrent-http-requests",
}


def describe_limit(limit: str, value: int) -> str:
    return f"limit {LIMIT_FLAGS.get(limit, limit)}={value}"


class LimitExceeded(RpcError):
    """A request refused because a configured limit is reached."""

    def __init__(self, limit: str, value: int, what: str) -> None:
        super().__init__(LIMIT_EXCEEDED, f"{what} ({describe_limit(limit, value)} reached)")
        self.limit = limit
        self.value = value


def check_below(limits: LimitsConfig, limit: str, current: int, what: str) -> None:
    """Raise LimitExceeded when ``current`` already uses up the limit (None = unlimited)."""
    maximum = getattr(limits, limit)
    if maximum is not None and current >= maximum:
        raise LimitExceeded(limit, maximum, what)


@dataclass
class Slots:
    """A count of concurrent uses with a ceiling (e.g. in-flight http/request calls).
    Single-threaded asyncio: no lock is needed between the check and the increment."""

    limit: str
    maximum: int | None
    what: str
    in_use: int = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if self.maximum is not None and self.in_use >= self.maximum:
            raise LimitExceeded(self.limit, self.maximum, self.what)
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1


@dataclass
class ServerLimits:
    """Server-wide counters; per-session and per-connection counts live with their
    service's own tables (process table, fs handle table) and use check_below."""

    config: LimitsConfig
    http: Slots = field(init=False)

    def __post_init__(self) -> None:
        self.http = Slots(
            "max_concurrent_http_requests",
            self.config.max_concurrent_http_requests,
            "too many concurrent http/request calls on this server",
        )


class PolicyRefusal(RpcError):
    """A request a principal's profile does not allow (execserver.tenancy): the
    client gets ``tenant <principal>: <reason>``, and the dispatcher writes an
    audit record of the refusal with the principal and the reason, so that an
    operator sees every ceiling a tenant ran into."""

    def __init__(self, code: int, principal: str, reason: str) -> None:
        super().__init__(code, f"tenant {principal}: {reason}")
        self.principal = principal
        self.reason = reason
