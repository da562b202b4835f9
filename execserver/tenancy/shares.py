"""Each tenant's share of the daemon-wide limits (``--max-connections``,
``--max-concurrent-http-requests``), so that no tenant can take another's room.

A profile may set its share (``max_connections``, ``max_http_requests``); without
it the tenant gets an even split of the daemon-wide limit among the tenants of the
current table: ``floor(limit / tenants)``, at least 1 (no limit: no share). With
the default shares the tenants together never reach the daemon-wide limit, which
stays as a backstop for shares the operator set above the split. A reload
recomputes the shares; they apply to the connections and requests that come
after it.

A refusal names the tenant's own ceiling (``tenant bob: max_connections 8
reached``), never the daemon's count: it tells the tenant nothing of the others.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from execserver.config import LimitsConfig
from execserver.kernel.limits import PolicyRefusal
from execserver.tenancy.ceiling import refused
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.tenants_file import TenantTable

__all__ = ["Shares", "connection_refusal", "even_share", "hold_share", "shares_of"]


@dataclass(frozen=True)
class Shares:
    """A tenant's ceilings on the daemon-wide limits (None: unlimited)."""

    connections: int | None
    http_requests: int | None
    # Whether each is the even split (not set by the profile), for doctor.
    connections_split: bool
    http_requests_split: bool


def even_share(limit: int | None, tenants: int) -> int | None:
    if limit is None:
        return None
    return max(1, limit // max(1, tenants))


def shares_of(profile: TenantProfile, table: TenantTable, limits: LimitsConfig) -> Shares:
    count = len(table.tenants)
    connections = profile.max_connections
    http = profile.max_http_requests
    return Shares(
        connections=even_share(limits.max_connections, count)
        if connections is None
        else connections,
        http_requests=(
            even_share(limits.max_concurrent_http_requests, count) if http is None else http
        ),
        connections_split=connections is None,
        http_requests_split=http is None,
    )


def connection_refusal(
    profile: TenantProfile, share: int | None, open_connections: int
) -> PolicyRefusal | None:
    """The refusal of one more websocket of ``profile``'s tenant, which has
    ``open_connections`` open (None: it may connect)."""
    if share is None or open_connections < share:
        return None
    return refused(profile, f"max_connections {share} reached")


@contextlib.contextmanager
def hold_share(
    in_use: Counter[str], profile: TenantProfile, share: int | None, key: str
) -> Iterator[None]:
    """One of ``profile``'s ``share`` slots (counted in ``in_use``) for the block, or
    the refusal naming ``key`` (the profile's key). Single-threaded asyncio: no lock
    between the check and the increment."""
    name = profile.name
    if share is not None and in_use[name] >= share:
        raise refused(profile, f"{key} {share} reached")
    in_use[name] += 1
    try:
        yield
    finally:
        in_use[name] -= 1
        if in_use[name] <= 0:
            del in_use[name]
