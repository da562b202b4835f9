"""``DomainPattern.covers``: a request's allow pattern is within a tenant's
``network_allow`` exactly when every host it matches is matched by the ceiling
(netproxy/ceiling.py refuses the others at process/start)."""

from __future__ import annotations

import pytest

from execserver.netproxy.policy import DomainPattern

HOSTS = ["example.com", "a.example.com", "b.a.example.com", "other.com", "xexample.com"]


@pytest.mark.parametrize(
    ("ceiling", "asked", "covered"),
    [
        ("*", "*", True),
        ("*", "**.example.com", True),
        ("example.com", "*", False),
        ("example.com", "example.com", True),
        ("example.com", "a.example.com", False),
        ("*.example.com", "a.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "*.example.com", True),
        ("*.example.com", "*.a.example.com", True),
        ("*.example.com", "**.a.example.com", True),
        ("*.example.com", "**.example.com", False),
        ("**.example.com", "**.example.com", True),
        ("**.example.com", "example.com", True),
        ("**.example.com", "*.example.com", True),
        ("**.example.com", "*.xexample.com", False),
        ("a.example.com", "*.example.com", False),
    ],
)
def test_covers_is_inclusion_of_the_matched_hosts(ceiling: str, asked: str, covered: bool) -> None:
    bound, pattern = DomainPattern(ceiling), DomainPattern(asked)
    assert bound.covers(pattern) is covered
    if covered:
        # Never wider than the ceiling on any host of the sample.
        for host in HOSTS:
            assert not pattern.matches(host) or bound.matches(host), host
