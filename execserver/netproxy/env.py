"""The proxy variables injected into the child's environment.

The list is the one the reference 0.169.0 sets (dumped with ``env`` from a
child): every common spelling, so curl, pip, npm, yarn, bundler, docker, node
and electron all pick the proxy up. They override the request's own values.
"""

from __future__ import annotations

__all__ = ["LOCAL_NO_PROXY", "proxy_environment"]

HTTP_NAMES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "WS_PROXY",
    "WSS_PROXY",
    "ws_proxy",
    "wss_proxy",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
    "npm_config_http_proxy",
    "npm_config_https_proxy",
    "npm_config_proxy",
    "NPM_CONFIG_HTTP_PROXY",
    "NPM_CONFIG_HTTPS_PROXY",
    "NPM_CONFIG_PROXY",
    "BUNDLE_HTTP_PROXY",
    "BUNDLE_HTTPS_PROXY",
    "PIP_PROXY",
    "DOCKER_HTTP_PROXY",
    "DOCKER_HTTPS_PROXY",
)
# Point at SOCKS (socks5h: names resolved by the proxy) when SOCKS5 is enabled.
ALL_NAMES = ("ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy")
NO_PROXY_NAMES = (
    "NO_PROXY",
    "no_proxy",
    "NPM_CONFIG_NOPROXY",
    "npm_config_noproxy",
    "BUNDLE_NO_PROXY",
)
# With allowLocalBinding the child talks to local services directly.
LOCAL_NO_PROXY = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"


def proxy_environment(
    http_port: int, socks_port: int | None, *, allow_local_binding: bool, host: str = "127.0.0.1"
) -> dict[str, str]:
    http_url = f"http://{host}:{http_port}"
    all_url = f"socks5h://{host}:{socks_port}" if socks_port is not None else http_url
    no_proxy = LOCAL_NO_PROXY if allow_local_binding else ""
    env = dict.fromkeys(HTTP_NAMES, http_url)
    env.update(dict.fromkeys(ALL_NAMES, all_url))
    env.update(dict.fromkeys(NO_PROXY_NAMES, no_proxy))
    env["NODE_USE_ENV_PROXY"] = "1"
    env["ELECTRON_GET_USE_PROXY"] = "true"
    env["CODEX_NETWORK_PROXY_ACTIVE"] = "1"
    env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] = "1" if allow_local_binding else "0"
    return env
