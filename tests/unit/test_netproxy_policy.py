"""netproxy building blocks: patterns, policy, resolver, environment, decisions."""

from __future__ import annotations

import re

import pytest

from execserver.netproxy import decision as d
from execserver.netproxy.env import LOCAL_NO_PROXY, proxy_environment
from execserver.netproxy.loopback import loopback_proxy_ports
from execserver.netproxy.policy import (
    DomainPattern,
    NetworkPolicy,
    is_local_address,
    normalize_host,
)
from execserver.netproxy.resolver import Resolution, ResolveError, Resolver, parse_hosts
from execserver.wire.process import RemoteNetworkProxyConfig


def config(**overrides: object) -> RemoteNetworkProxyConfig:
    values: dict[str, object] = {
        "enabled": True,
        "mode": "full",
        "enable_socks5": False,
        "enable_socks5_udp": False,
        "allow_upstream_proxy": False,
        "dangerously_allow_all_unix_sockets": False,
        "allow_local_binding": False,
    }
    values.update(overrides)
    return RemoteNetworkProxyConfig(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("example.com", "example.com", True),
        ("example.com", "api.example.com", False),
        ("*.example.com", "api.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "badexample.com", False),
        ("**.example.com", "example.com", True),
        ("**.example.com", "api.example.com", True),
        ("**.example.com", "notexample.com", False),
        ("*", "anything.at.all", True),
    ],
)
def test_domain_patterns(pattern: str, host: str, matches: bool) -> None:
    assert DomainPattern(pattern).matches(host) is matches


def test_hosts_are_normalized() -> None:
    assert normalize_host(" Example.COM. ") == "example.com"
    assert normalize_host("[::1]") == "::1"


def test_deny_wins_and_none_is_ignored() -> None:
    policy = NetworkPolicy.from_config(
        config(domains={"**.example.com": "allow", "bad.example.com": "deny", "x.com": "none"})
    )
    assert policy.allowed("ok.example.com") and not policy.denied("ok.example.com")
    assert policy.denied("bad.example.com")
    assert not policy.allowed("x.com") and not policy.denied("x.com")
    assert policy.explicitly_allowed("example.com") is False  # only by wildcard
    assert NetworkPolicy.from_config(config(domains={"Host.Test": "allow"})).explicitly_allowed(
        "host.test"
    )


def test_review_and_mode() -> None:
    policy = NetworkPolicy.from_config(config(mode="limited", review_domains=["*.test"]))
    assert policy.needs_review("a.test") and not policy.needs_review("test")
    assert policy.method_allowed("get") and policy.method_allowed("OPTIONS")
    assert not policy.method_allowed("POST")
    assert NetworkPolicy.from_config(config()).method_allowed("DELETE")


def test_unix_socket_policy() -> None:
    listed = NetworkPolicy.from_config(config(unix_sockets={"/a.sock": "allow", "/b.sock": "deny"}))
    assert listed.unix_socket_allowed("/a.sock")
    assert not listed.unix_socket_allowed("/b.sock")
    assert not listed.unix_socket_allowed("/c.sock")
    everything = NetworkPolicy.from_config(
        config(dangerously_allow_all_unix_sockets=True, unix_sockets={"/b.sock": "deny"})
    )
    assert everything.unix_socket_allowed("/c.sock")
    assert not everything.unix_socket_allowed("/b.sock")


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("192.168.0.1", True),
        ("169.254.1.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", True),
        ("8.8.8.8", False),
        ("2001:4860:4860::8888", False),
        ("example.com", False),
    ],
)
def test_local_addresses(address: str, local: bool) -> None:
    assert is_local_address(address) is local


def test_parse_hosts_ignores_malformed_pairs() -> None:
    assert parse_hosts("a.test=127.0.0.1, B.Test=::1 bad c.test=notanip") == {
        "a.test": "127.0.0.1",
        "b.test": "::1",
    }


async def test_resolver_hook_is_exclusive_and_marks_its_answers() -> None:
    resolver = Resolver({"up.test": "127.0.0.1"})
    assert await resolver.resolve("UP.test", 80) == Resolution(("127.0.0.1",), from_hook=True)
    assert await resolver.resolve("10.0.0.1", 80) == Resolution(("10.0.0.1",))
    assert await resolver.resolve("localhost", 80) == Resolution(("127.0.0.1",))
    with pytest.raises(ResolveError):
        await resolver.resolve("unlisted.test", 80)  # never a DNS query


async def test_a_resolver_without_overrides_does_not_use_the_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The old environment hook must be inert: only a constructor argument maps names.
    monkeypatch.setenv("EXECSERVER_NETPROXY_HOSTS", "localhost=192.0.2.1")
    resolution = await Resolver().resolve("localhost", 80)
    assert not resolution.from_hook and "192.0.2.1" not in resolution.addresses
    assert Resolver({"x.test": "127.0.0.1"})._exclusive and not Resolver()._exclusive


def test_proxy_environment_shapes() -> None:
    plain = proxy_environment(1000, None, allow_local_binding=False)
    assert (
        plain["HTTP_PROXY"]
        == plain["ALL_PROXY"]
        == plain["npm_config_proxy"]
        == ("http://127.0.0.1:1000")
    )
    assert plain["NO_PROXY"] == "" and plain["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] == "0"
    socks = proxy_environment(1000, 2000, allow_local_binding=True)
    assert socks["ALL_PROXY"] == socks["ftp_proxy"] == "socks5h://127.0.0.1:2000"
    assert socks["HTTPS_PROXY"] == "http://127.0.0.1:1000"
    assert socks["no_proxy"] == LOCAL_NO_PROXY and socks["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] == "1"
    assert len(plain) == 34  # the reference's 34 variables


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"type": "allow"}, d.DECIDER_ALLOW),
        ({"type": "allow", "reason": "fine"}, d.DECIDER_ALLOW),
        ({"type": "deny"}, d.DECIDER_UNANSWERED),
        ({"type": "ask", "reason": 3}, d.DECIDER_UNANSWERED),
        ({"type": "maybe", "reason": "x"}, d.DECIDER_UNANSWERED),
        ("allow", d.DECIDER_UNANSWERED),
        (None, d.DECIDER_UNANSWERED),
    ],
)
def test_decider_answers(answer: object, expected: d.Decision) -> None:
    assert d.decider_answer(answer) == expected


def test_decider_deny_and_ask_keep_their_reason() -> None:
    deny = d.decider_answer({"type": "deny", "reason": "no"})
    ask = d.decider_answer({"type": "ask", "reason": "hmm"})
    assert (deny.decision, deny.reason, deny.header) == ("deny", "no", "blocked-by-policy")
    assert (ask.decision, ask.reason, ask.allowed) == ("ask", "hmm", False)


def test_timestamp_is_rfc3339_with_milliseconds() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d.timestamp())


def test_blocked_response_is_the_reference_403() -> None:
    target = d.Target("http", "x.test", 80, "GET", "127.0.0.1:5")
    raw = d.blocked_response(target, d.DENYLIST)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"x-proxy-error: blocked-by-denylist" in head
    assert f"content-length: {len(body)}".encode() in head
    assert body.startswith(b'{"status":"blocked","host":"x.test","reason":"denied"')


def test_notification_carries_the_target_and_decision() -> None:
    target = d.Target("socks5_tcp", "x.test", 443, None, "127.0.0.1:5")
    note = d.notification("p", target, d.METHOD_NOT_ALLOWED)
    assert (note.scope, note.decision, note.source, note.reason) == (
        "non_domain",
        "deny",
        "mode_guard",
        "method_not_allowed",
    )
    assert (note.protocol, note.host, note.port, note.method) == ("socks5_tcp", "x.test", 443, None)


def test_loopback_proxy_ports() -> None:
    assert loopback_proxy_ports({"HTTP_PROXY": "http://127.0.0.1:8080"}) == ([8080], False)
    assert loopback_proxy_ports(
        {"http_proxy": "http://localhost:1", "ALL_PROXY": "socks5h://127.0.0.1:2", "PATH": "/x"}
    ) == ([1, 2], False)
    assert loopback_proxy_ports({"HTTPS_PROXY": "http://proxy.corp:3128"}) == ([], True)
    assert loopback_proxy_ports({"NO_PROXY": "localhost"}) == ([], False)
