"""A tenant's ceiling on its managed network (``network_allow`` in the tenants file).

With ``--tenants``, a tenant whose profile has ``network = "managed"`` and a
``network_allow`` list gets managed networks only within that list, whatever its
request says:

* a ``networkProxy`` whose ``domains`` allow a pattern the ceiling does not cover
  is refused at ``process/start`` with a JSON-RPC error naming the ceiling;
* one that allows nothing is given the ceiling's patterns as its allow-list;
* the proxy itself denies every host outside the ceiling before its baseline or
  the client's decider is consulted (``NetworkPolicy.ceiling``), so neither a
  ``reviewDomains`` entry nor an ``allow`` answer to ``network/policyRequest``
  reaches past it;
* ``enforceManagedNetwork`` without the daemon's proxy (a sandbox bridged to a
  proxy on the executor's loopback that the client names) is refused: the daemon
  cannot hold such a proxy to the ceiling.

The ceiling is read when the proxy starts: a reload applies to the processes
started after it. (Ours: the reference has no tenants.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from execserver.kernel.limits import PolicyRefusal
from execserver.kernel.peer import SessionHandle
from execserver.tenancy.directory import TenantGone
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.seat import TenantSeat
from execserver.wire.errors import PARSE_OR_INVALID_REQUEST, RpcError
from execserver.wire.process import RemoteNetworkProxyLaunchConfig

__all__ = ["DomainCeiling", "socket_owner", "tenant_ceiling"]


@dataclass(frozen=True)
class DomainCeiling:
    principal: str
    patterns: tuple[str, ...]

    def refused(self, reason: str) -> PolicyRefusal:
        return PolicyRefusal(PARSE_OR_INVALID_REQUEST, self.principal, reason)

    def bound(self, config: RemoteNetworkProxyLaunchConfig) -> RemoteNetworkProxyLaunchConfig:
        """``config`` held to the ceiling: refused when it allows a host pattern the
        ceiling does not cover; the ceiling's patterns as its allow-list when it
        allows none (its deny entries kept)."""
        # Imported here: the policy module (ipaddress) loads with the first proxy.
        from execserver.netproxy.policy import DomainPattern, normalize_host

        domains = config.proxy.domains or {}
        ceiling = [DomainPattern(normalize_host(p)) for p in self.patterns]
        allowed = [p for p, verdict in domains.items() if verdict == "allow"]
        for pattern in allowed:
            asked = DomainPattern(normalize_host(pattern))
            if not any(bound.covers(asked) for bound in ceiling):
                raise self.refused(
                    f"network allow {pattern} is outside the tenant's ceiling "
                    f"(network_allow {', '.join(self.patterns)})"
                )
        if allowed:
            return config
        merged: dict[str, Literal["none", "allow", "deny"]] = dict.fromkeys(self.patterns, "allow")
        merged.update(domains)  # the request's own deny entries still narrow it
        proxy = msgspec.structs.replace(config.proxy, domains=merged)
        return msgspec.structs.replace(config, proxy=proxy)


def _tenant_profile(session: SessionHandle) -> TenantProfile | None:
    """The profile of the session's tenant (None: not a tenant's session)."""
    seat = session.state.peek(TenantSeat)
    if seat is None:
        return None
    try:
        return seat.profile()
    except TenantGone:
        raise RpcError.invalid_request(f"tenant {seat.name} no longer exists") from None


def tenant_ceiling(session: SessionHandle) -> DomainCeiling | None:
    """The ceiling of the session's tenant (None: no tenant, or no network_allow)."""
    profile = _tenant_profile(session)
    if profile is None or profile.network_allow is None:
        return None
    return DomainCeiling(profile.name, profile.network_allow)


def socket_owner(session: SessionHandle) -> tuple[int, int] | None:
    """The uid and gid a proxy's (or loopback bridge's) socket directory and sockets
    are given for a tenant's process: its account's, whose sandboxed bridge must
    connect to them (the directory stays 0700: no other account reaches it).
    None: not a tenant's session (the daemon's own, as made)."""
    profile = _tenant_profile(session)
    if profile is None:
        return None
    return profile.credentials.uid, profile.credentials.gid
