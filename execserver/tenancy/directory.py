"""The live tenant table: credential -> principal, replaced whole on reload.

The websocket upgrade asks ``identify_token`` / ``identify_subject``; services ask
``profile(name)`` on every request, so a reload's new ceilings apply at once and a
removed tenant is refused even on a session that still exists. A reload that fails
keeps the old table (the caller logs why).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from execserver.config import LimitsConfig
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.shares import Shares, shares_of
from execserver.tenancy.tenants_file import TenantTable, load_tenants

__all__ = ["TenantDirectory", "TenantGone"]

log = logging.getLogger(__name__)


class TenantGone(LookupError):
    """The principal is no longer in the tenants file (removed by a reload)."""


class TenantDirectory:
    def __init__(
        self, table: TenantTable, *, jwt: bool, limits: LimitsConfig | None = None
    ) -> None:
        self._table = table
        self._jwt = jwt
        # The daemon-wide limits each tenant has a share of (tenancy.shares).
        self._limits = LimitsConfig() if limits is None else limits
        # Live processes per principal (max_processes): counted here, across sessions.
        self.live_processes: Counter[str] = Counter()
        # http/request calls in flight per principal (its max_http_requests share).
        self.http_in_flight: Counter[str] = Counter()

    def count_process(self, principal: str, close_hooks: list[Callable[[Any], None]]) -> None:
        """One more live process of ``principal`` (its max_processes, across its
        sessions, and its live gauge) until ``close_hooks`` run: a process started
        here, or one a previous daemon started and this one re-adopted."""
        live = self.live_processes
        live[principal] += 1
        close_hooks.append(lambda closed: live.subtract((principal,)))

    @classmethod
    def load(cls, path: str, *, jwt: bool, limits: LimitsConfig | None = None) -> TenantDirectory:
        return cls(load_tenants(path, jwt=jwt), jwt=jwt, limits=limits)

    @property
    def table(self) -> TenantTable:
        return self._table

    @property
    def jwt(self) -> bool:
        return self._jwt

    def reload(self, admit: Callable[[TenantTable], None] | None = None) -> TenantTable:
        """Read the file again; raises TenantsFileError, or what ``admit`` (the last
        check before the new table goes live, e.g. its cgroup quotas) raises: the
        old table stays."""
        table = load_tenants(self._table.path, jwt=self._jwt)
        if admit is not None:
            admit(table)
        self._table = table
        return table

    def names(self) -> frozenset[str]:
        return frozenset(self._table.tenants)

    def profile(self, name: str) -> TenantProfile:
        found = self._table.tenants.get(name)
        if found is None:
            raise TenantGone(name)
        return found

    def shares(self, profile: TenantProfile) -> Shares:
        """``profile``'s share of the daemon-wide limits, from the current table (a
        reload that adds or removes a tenant changes the even split)."""
        return shares_of(profile, self._table, self._limits)

    def identify_token(self, token: str) -> str | None:
        """The principal whose token this is, or None. Every tenant's digest is
        compared (constant time each), so timing tells nothing of which matched."""
        presented = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: str | None = None
        for digest, name in self._table.by_token.items():
            if hmac.compare_digest(presented, digest):
                found = name
        return found

    def identify_subject(self, sub: str) -> str | None:
        return self._table.by_sub.get(sub)
