"""The baseline policy of one proxy: domain patterns, local addresses, mode.

Pattern forms (case-insensitive, a trailing dot ignored), as codex's proxy:

* ``example.com``   the host itself only;
* ``*.example.com`` its subdomains, not the apex;
* ``**.example.com`` the apex and its subdomains;
* ``*``             every host.

A ``deny`` match wins over an ``allow`` match; ``none`` entries are ignored.
Only an exact (non-wildcard) ``allow`` entry lifts the local-address block when
``allowLocalBinding`` is false (observed on the reference: ``localhost``
allowed by name is reachable, ``127.0.0.1`` not listed is ``not_allowed_local``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from execserver.wire.process import RemoteNetworkProxyConfig

__all__ = [
    "LOCAL_NAMES",
    "DomainPattern",
    "NetworkPolicy",
    "is_ip_literal",
    "is_local_address",
    "normalize_host",
]

Mode = Literal["limited", "full"]

# Methods limited mode lets through (read-only HTTP); everything else is
# ``method_not_allowed``, CONNECT is ``mitm_required`` (the reference cannot
# inspect a tunnel, so it refuses to open one in limited mode).
LIMITED_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain"})


def normalize_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


@dataclass(frozen=True)
class DomainPattern:
    text: str

    def matches(self, host: str) -> bool:
        pattern = self.text
        if pattern == "*":
            return True
        if pattern.startswith("**."):
            apex = pattern[3:]
            return host == apex or host.endswith("." + apex)
        if pattern.startswith("*."):
            return host.endswith(pattern[1:]) and host != pattern[2:]
        return host == pattern

    @property
    def exact(self) -> bool:
        return "*" not in self.text

    def covers(self, other: DomainPattern) -> bool:
        """Whether every host ``other`` matches is matched by this pattern too (a
        request's allow entry within a tenant's ceiling)."""
        pattern = other.text
        if self.text == "*":
            return True
        if pattern == "*":
            return False
        if pattern.startswith("**."):
            apex = pattern[3:]
            return self.matches(apex) and self._covers_subdomains_of(apex)
        if pattern.startswith("*."):
            return self._covers_subdomains_of(pattern[2:])
        return self.matches(pattern)

    def _covers_subdomains_of(self, apex: str) -> bool:
        """Whether this pattern matches every strict subdomain of ``apex``."""
        text = self.text
        if text.startswith("**."):
            base = text[3:]
        elif text.startswith("*."):
            base = text[2:]
        else:
            return False
        return apex == base or apex.endswith("." + base)


def _patterns(domains: Mapping[str, str] | None, verdict: str) -> tuple[DomainPattern, ...]:
    if not domains:
        return ()
    return tuple(DomainPattern(normalize_host(p)) for p, v in domains.items() if v == verdict)


def is_local_address(text: str) -> bool:
    """Loopback, private, link-local, unspecified... anything not globally routable."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class NetworkPolicy:
    mode: Mode = "full"
    allow: tuple[DomainPattern, ...] = ()
    deny: tuple[DomainPattern, ...] = ()
    # reviewDomains: allowed or not, these always go to the decider (a deny still wins).
    review: tuple[DomainPattern, ...] = ()
    allow_local_binding: bool = False
    unix_sockets: Mapping[str, str] = field(default_factory=dict)
    allow_all_unix_sockets: bool = False
    # A tenant's network_allow (netproxy.ceiling): no host outside it is ever
    # allowed, whatever the request's patterns or its decider say. None: no ceiling.
    ceiling: tuple[DomainPattern, ...] | None = None

    @classmethod
    def from_config(
        cls, config: RemoteNetworkProxyConfig, ceiling: Sequence[str] | None = None
    ) -> NetworkPolicy:
        return cls(
            ceiling=(
                None
                if ceiling is None
                else tuple(DomainPattern(normalize_host(p)) for p in ceiling)
            ),
            mode=config.mode,
            allow=_patterns(config.domains, "allow"),
            deny=_patterns(config.domains, "deny"),
            review=tuple(DomainPattern(normalize_host(p)) for p in config.review_domains or ()),
            allow_local_binding=config.allow_local_binding,
            unix_sockets=dict(config.unix_sockets or {}),
            allow_all_unix_sockets=config.dangerously_allow_all_unix_sockets,
        )

    def outside_ceiling(self, host: str) -> bool:
        return self.ceiling is not None and not any(p.matches(host) for p in self.ceiling)

    def denied(self, host: str) -> bool:
        return any(p.matches(host) for p in self.deny)

    def allowed(self, host: str) -> bool:
        return any(p.matches(host) for p in self.allow)

    def needs_review(self, host: str) -> bool:
        return any(p.matches(host) for p in self.review)

    def explicitly_allowed(self, host: str) -> bool:
        return any(p.exact and p.matches(host) for p in self.allow)

    def method_allowed(self, method: str) -> bool:
        return self.mode == "full" or method.upper() in LIMITED_METHODS

    def unix_socket_allowed(self, path: str) -> bool:
        """``unixSockets`` is an allow-list of paths; ``deny`` entries win. Both
        sides are compared resolved (``realpath``), so ``/a/../b.sock``, a
        doubled slash or a symlink name the socket they lead to; relative paths
        are never allowed."""
        if not os.path.isabs(path):
            return False
        real = os.path.realpath(path)
        verdicts = {v for k, v in self.unix_sockets.items() if os.path.realpath(k) == real}
        if "deny" in verdicts:
            return False
        return self.allow_all_unix_sockets or "allow" in verdicts
