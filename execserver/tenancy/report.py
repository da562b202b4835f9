"""The table of principals and what each may do, for ``execserver doctor --tenants``:
an operator reads the ceilings as the daemon will enforce them (accounts resolved,
roots canonical), before a tenant finds out by a refusal."""

from __future__ import annotations

import os
import tomllib

from execserver.config import LimitsConfig
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.shares import Shares, shares_of
from execserver.tenancy.tenants_file import TenantsFileError, TenantTable, load_tenants

__all__ = ["TenantsFileError", "load_for_report", "principal_lines"]


def load_for_report(path: str) -> TenantTable:
    """Load ``path`` as ``serve`` would: with signed bearer tokens when its tenants
    name JWT subjects (the doctor has no --ws-auth to tell)."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError):
        document = {}  # load_tenants says what is wrong with it
    section = document.get("tenants")
    jwt = isinstance(section, dict) and any(
        isinstance(entry, dict) and "jwt_sub" in entry for entry in section.values()
    )
    return load_tenants(path, jwt=jwt)


def _network(profile: TenantProfile) -> str:
    if profile.network_allow is None:
        return profile.network
    return f"{profile.network} (only hosts {', '.join(profile.network_allow)})"


def _http(profile: TenantProfile) -> str:
    allowed = profile.http_request
    if allowed is True:
        return "any host"
    if allowed is False:
        return "no"
    return ", ".join(allowed)


def _quota(profile: TenantProfile) -> str:
    quota = profile.quota
    parts = []
    if quota.memory_max_bytes is not None:
        parts.append(f"memory {quota.memory_max_bytes} bytes")
    if quota.pids_max is not None:
        parts.append(f"pids {quota.pids_max}")
    if quota.cpu_max_cores is not None:
        parts.append(f"cpu {quota.cpu_max_cores:g} cores")
    return ", ".join(parts) or "no quota"


def _shares(shares: Shares, limits: LimitsConfig) -> str:
    def one(value: int | None, split: bool, flag: str, limit: int | None) -> str:
        if value is None:
            return "unlimited"
        return f"{value} (an even share of {flag}={limit})" if split else str(value)

    connections = one(
        shares.connections, shares.connections_split, "--max-connections", limits.max_connections
    )
    http = one(
        shares.http_requests,
        shares.http_requests_split,
        "--max-concurrent-http-requests",
        limits.max_concurrent_http_requests,
    )
    return f"    max connections {connections}, max http/requests {http}"


def principal_lines(table: TenantTable, limits: LimitsConfig | None = None) -> list[str]:
    """``limits``: the daemon-wide limits ``serve`` would have (each tenant's share)."""
    limits = LimitsConfig() if limits is None else limits
    lines: list[str] = []
    privileged = os.geteuid() == 0
    for profile in table.tenants.values():
        account = profile.credentials
        via = f"jwt sub {profile.jwt_sub}" if profile.jwt_sub is not None else "token sha256"
        readable = profile.readable_roots
        lines += [
            f"  {profile.name} ({via}): runs as {account.user} "
            f"(uid {account.uid}, gid {account.gid}, groups {list(account.groups)})",
            f"    sandbox {profile.sandbox}; network {_network(profile)}; "
            f"http/request {_http(profile)}",
            f"    writes: {', '.join(profile.writable_roots) or 'nowhere'}; reads: "
            + ("anything its account can read" if readable is None else ", ".join(readable)),
            f"    max processes {profile.max_processes or 'unlimited'}, "
            f"max sessions {profile.max_sessions or 'unlimited'}; forced env: "
            + (", ".join(sorted(profile.env)) or "none"),
            _shares(shares_of(profile, table, limits), limits),
            f"    its cgroup over all it runs: {_quota(profile)}",
        ]
    lines.append(
        "  the daemon runs as root: it can run each tenant as its account"
        if privileged
        else "  the daemon is not root: only tenants of its own uid can be served"
    )
    return lines
