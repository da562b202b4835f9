"""What a tenant is: its name, how it authenticates, the account it runs as and the
ceiling of what it may ask for. Plain frozen data: the tenants file builds it
(``tenants_file``), everything else only reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from execserver.config import ProcessLimitsConfig
from execserver.sandbox.plan import Credentials

__all__ = ["NETWORK_LEVELS", "NetworkCeiling", "SandboxRule", "TenantProfile"]

NetworkCeiling = Literal["none", "managed", "full"]
SandboxRule = Literal["required", "optional"]
# Ordered from narrowest to widest: a request's level must not rank above the ceiling's.
NETWORK_LEVELS: Final[tuple[NetworkCeiling, ...]] = ("none", "managed", "full")


@dataclass(frozen=True)
class TenantProfile:
    name: str
    # Exactly one of the two is set: the SHA-256 of its capability token (raw bytes),
    # or the JWT ``sub`` that names it (with --ws-auth signed-bearer-token).
    token_sha256: bytes | None
    jwt_sub: str | None
    credentials: Credentials
    sandbox: SandboxRule
    # Canonical absolute paths (realpath at load time).
    writable_roots: tuple[str, ...]
    # None: reads are not confined by the ceiling (the account's permissions still
    # apply); else the only roots it may read, besides its writable roots.
    readable_roots: tuple[str, ...] | None
    network: NetworkCeiling
    # With network "managed": the hosts its processes' managed-network proxies may
    # ever allow (the proxy's pattern forms: host, *.domain, **.domain, *); None:
    # a request's own allow-list, bounded only by ``network``.
    network_allow: tuple[str, ...] | None
    # False: no http/request; True: any host; a tuple: only these host names.
    http_request: bool | tuple[str, ...]
    max_processes: int | None
    max_sessions: int | None
    # Its share of the daemon-wide --max-connections / --max-concurrent-http-requests
    # as the file sets it; None: an even split among the tenants (tenancy.shares).
    max_connections: int | None
    max_http_requests: int | None
    env: Mapping[str, str]
    # memory_max / pids_max / cpu_max: one cgroup over everything it runs
    # (execserver.containment); every field None when the profile sets none.
    quota: ProcessLimitsConfig

    def may_read_roots(self) -> tuple[str, ...] | None:
        """The roots reads are confined to (None: not confined by the ceiling)."""
        if self.readable_roots is None:
            return None
        return (*self.readable_roots, *self.writable_roots)
