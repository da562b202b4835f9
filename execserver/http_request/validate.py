"""http/request params checks with the reference's -32602 texts.

URL errors are those of the Rust ``url`` crate, method and header checks those
of the ``http`` crate; the executor environment variable rules are the
reference's (valueEnvVar, deny-listed credentials).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from execserver.wire.errors import RpcError
from execserver.wire.http import HttpHeader
from execserver.wire.rust import url as url_texts

__all__ = [
    "PreparedRequest",
    "TargetUrl",
    "check_method",
    "grouped",
    "parse_url",
    "resolve_headers",
    "send_failed",
]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_DEFAULT_PORTS = {"http": 80, "https": 443}

# Credentials of the executor host that a header may never carry (observed on
# 0.169.0; matched case-insensitively).
DENIED_ENV_VARS = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "CODEX_ACCESS_TOKEN",
        "CODEX_API_KEY",
        "CODEX_CONNECTORS_TOKEN",
        "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "OPENAI_API_KEY",
    }
)


@dataclass(frozen=True)
class TargetUrl:
    scheme: str
    host: str
    port: int | None  # None: the scheme's default
    rest: str  # path (at least "/"), query

    def __str__(self) -> str:
        """The URL as the reference prints it (lower-case scheme/host, default port dropped)."""
        port = "" if self.port is None else f":{self.port}"
        return f"{self.scheme}://{self.host}{port}{self.rest}"

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port or _DEFAULT_PORTS[self.scheme]


def _invalid_url(reason: str) -> RpcError:
    return RpcError.invalid_params(f"http/request url is invalid: {reason}")


def parse_url(url: str) -> TargetUrl:
    text = url.strip()
    match = _SCHEME_RE.match(text)
    if match is None:
        raise _invalid_url(url_texts.RELATIVE_URL_WITHOUT_BASE)
    scheme = match.group(1).lower()
    if scheme not in _DEFAULT_PORTS:
        raise RpcError.invalid_params(
            f"http/request only supports http and https URLs, got {scheme}"
        )
    rest = text[match.end() :].lstrip("/\\")
    cut = min((i for i in (rest.find(c) for c in "/?#\\") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    host_port = authority.rsplit("@", 1)[-1]
    host, port = _split_port(host_port)
    if not host:
        raise _invalid_url(url_texts.EMPTY_HOST)
    tail = tail.split("#", 1)[0]
    path, query = tail.split("?", 1) if "?" in tail else (tail, None)
    rest = _normalize_path(path.replace("\\", "/"))
    if query is not None:
        rest += "?" + _percent_encode(query, _QUERY_ESCAPES)
    return TargetUrl(scheme, host.lower(), None if port == _DEFAULT_PORTS[scheme] else port, rest)


# What the url crate percent-encodes in a path and in a (special-scheme) query;
# existing %XX escapes are kept as written.
_PATH_ESCAPES = frozenset(' "#<>?`{}')
_QUERY_ESCAPES = frozenset(" \"#<>'")


def _percent_encode(text: str, escapes: frozenset[str]) -> str:
    out = []
    for ch in text:
        if ch in escapes or ord(ch) < 0x20 or ord(ch) == 0x7F or not ch.isascii():
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def _normalize_path(path: str) -> str:
    """Resolve ``.``/``..`` segments like URL parsing does; always absolute."""
    segments: list[str] = []
    parts = path.split("/")[1:] if path.startswith("/") else path.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        lowered = part.lower()
        if lowered in (".", "%2e"):
            if last:
                segments.append("")
        elif lowered in ("..", ".%2e", "%2e.", "%2e%2e"):
            if segments:
                segments.pop()
            if last:
                segments.append("")
        else:
            segments.append(_percent_encode(part, _PATH_ESCAPES))
    return "/" + "/".join(segments)


def _split_port(host_port: str) -> tuple[str, int | None]:
    if host_port.startswith("["):
        end = host_port.find("]")
        if end < 0:
            raise _invalid_url("invalid IPv6 address")
        host, after = host_port[: end + 1], host_port[end + 1 :]
        port_text = after[1:] if after.startswith(":") else None
        if after and port_text is None:
            raise _invalid_url("invalid port number")
    elif ":" in host_port:
        host, port_text = host_port.rsplit(":", 1)
    else:
        host, port_text = host_port, None
    if not port_text:
        return host, None
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise _invalid_url("invalid port number")
    return host, int(port_text)


def check_method(method: str) -> None:
    if not _TOKEN_RE.match(method):
        raise RpcError.invalid_params("http/request method is invalid: invalid HTTP method")


def _valid_value(value: str) -> bool:
    # http::HeaderValue: visible ASCII, space, tab and any non-ASCII byte.
    return all(c == "\t" or (" " <= c and c != "\x7f") for c in value)


def resolve_headers(
    headers: list[HttpHeader] | None, environ: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """``(lower-case name, value)`` pairs with ``valueEnvVar`` values appended."""
    env = os.environ if environ is None else environ
    out: list[tuple[str, str]] = []
    for header in headers or ():
        if not _TOKEN_RE.match(header.name):
            raise RpcError.invalid_params(
                "http/request header name is invalid: invalid HTTP header name"
            )
        value = header.value
        var = header.value_env_var
        if var is not None:
            if var.upper() in DENIED_ENV_VARS:
                raise RpcError.invalid_params(
                    f"http/request header {header.name} cannot use executor "
                    f"environment variable {var}"
                )
            secret = env.get(var) if var else None
            if secret is None:
                raise RpcError.invalid_params(
                    f"http/request header {header.name} requires executor "
                    f"environment variable {var}"
                )
            value += secret
        if not _valid_value(value):
            raise RpcError.invalid_params(
                f"http/request header value is invalid for {header.name}: "
                "failed to parse header value"
            )
        out.append((header.name.lower(), value))
    return out


def grouped(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Repeated names sent together, in order of first appearance (an
    ``http::HeaderMap`` iterates that way, so the reference sends them so)."""
    order: dict[str, list[str]] = {}
    for name, value in headers:
        order.setdefault(name, []).append(value)
    return [(name, value) for name, values in order.items() for value in values]


@dataclass(frozen=True)
class PreparedRequest:
    """One checked request, ready for the client (http_request/client.py)."""

    method: str
    url: TargetUrl
    headers: list[tuple[str, str]]  # lower-case names, already grouped
    body: bytes | None
    follow_redirects: bool


def send_failed(url: TargetUrl) -> RpcError:
    return RpcError.internal(f"http/request failed: error sending request for url ({url})")
