"""Which upstream proxy an allowed connection uses (netproxy.upstream)."""

from __future__ import annotations

import pytest

from execserver.netproxy.upstream import UpstreamProxies, UpstreamProxy


def test_tunnels_prefer_https_proxy_and_plain_http_prefers_http_proxy() -> None:
    proxies = UpstreamProxies.from_environment(
        {"HTTPS_PROXY": "http://s:1", "HTTP_PROXY": "http://h:2", "ALL_PROXY": "http://a:3"}
    )
    assert proxies.tunnel_proxy("x.com", 443) == UpstreamProxy("s", 1)
    assert proxies.http_proxy("x.com", 80) == UpstreamProxy("h", 2)


def test_lower_case_and_all_proxy_are_fallbacks() -> None:
    proxies = UpstreamProxies.from_environment({"https_proxy": "s:8080", "all_proxy": "a:3"})
    assert proxies.tunnel_proxy("x.com", 443) == UpstreamProxy("s", 8080)
    assert proxies.http_proxy("x.com", 80) == UpstreamProxy("a", 3)


@pytest.mark.parametrize("value", ["socks5://s:1", "https://s:1", "", "http://"])
def test_only_http_proxies_are_used(value: str) -> None:
    proxies = UpstreamProxies.from_environment({"HTTPS_PROXY": value, "HTTP_PROXY": value})
    assert proxies.tunnel_proxy("x.com", 443) is None
    assert proxies.http_proxy("x.com", 80) is None


def test_credentials_become_a_basic_proxy_authorization() -> None:
    proxy = UpstreamProxy.parse("http://al%40ice:p%3Aw@p:1")
    assert proxy is not None and proxy.authorization == "Basic YWxAaWNlOnA6dw=="


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "bypassed"),
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "api.example.com", 443, True),
        (".example.com", "example.com", 443, True),
        ("*.example.com", "api.example.com", 443, True),
        ("example.com", "badexample.com", 443, False),
        ("example.com:8443", "example.com", 443, False),
        ("example.com:8443", "example.com", 8443, True),
        ("10.0.0.0/8", "10.1.2.3", 80, True),
        ("10.0.0.0/8", "11.1.2.3", 80, False),
        ("::1", "::1", 80, True),
        ("[::1]:80", "::1", 80, True),
        ("*", "anything.test", 1, True),
        (" a.test , b.test ", "b.test", 1, True),
        ("", "a.test", 1, False),
    ],
)
def test_no_proxy(no_proxy: str, host: str, port: int, bypassed: bool) -> None:
    proxies = UpstreamProxies.from_environment({"HTTPS_PROXY": "p:1", "NO_PROXY": no_proxy})
    assert (proxies.tunnel_proxy(host, port) is None) == bypassed
