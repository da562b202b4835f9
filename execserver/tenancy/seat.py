"""A session's principal, where services find it: the server puts a ``TenantSeat``
into the session's scoped state when it creates the session of a tenant, and a
service asks ``tenant_of(ctx)``. With --tenants every session has one; a session
without one on such a server is refused (fail closed), never served as the
daemon's own uid."""

from __future__ import annotations

from dataclasses import dataclass

from execserver.kernel.context import RequestContext
from execserver.tenancy.directory import TenantDirectory, TenantGone
from execserver.tenancy.profile import TenantProfile
from execserver.wire.errors import RpcError

__all__ = ["TenantSeat", "tenant_of"]


@dataclass
class TenantSeat:
    name: str
    # The live table, for what finds the session but no request context (the
    # managed-network proxy a process starts with: netproxy.ceiling).
    directory: TenantDirectory | None = None

    def profile(self) -> TenantProfile:
        """The principal's current profile; raises TenantGone once a reload removed
        it, or RpcError when the seat has no table (fail closed)."""
        if self.directory is None:
            raise RpcError.internal("this session's principal has no tenants table")
        return self.directory.profile(self.name)

    async def aclose(self) -> None:
        """Nothing to release: the seat only names the principal."""


def tenant_of(ctx: RequestContext) -> TenantProfile | None:
    """The profile of the request's principal; None on a daemon without --tenants."""
    directory = ctx.server.resources.get(TenantDirectory)
    if directory is None:
        return None
    session = ctx.peer.session
    seat = session.state.peek(TenantSeat) if session is not None else None
    if seat is None:
        raise RpcError.internal("this request has no principal")
    try:
        return directory.profile(seat.name)
    except TenantGone:
        raise RpcError.invalid_request(f"tenant {seat.name} no longer exists") from None
