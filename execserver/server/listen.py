"""Parsing of ``--listen`` values exactly as the reference accepts them."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["ListenAddress", "parse_listen"]


class ListenError(ValueError):
    pass


@dataclass(frozen=True)
class ListenAddress:
    kind: str  # "ws" | "stdio"
    host: str = ""
    port: int = 0

    def url(self, port: int | None = None) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{shown}:{self.port if port is None else port}"


def parse_listen(value: str) -> ListenAddress:
    if value in ("stdio", "stdio://"):
        return ListenAddress("stdio")
    if not value.startswith("ws://"):
        raise ListenError(f"unsupported --listen URL `{value}`; expected `ws://IP:PORT` or `stdio`")
    rest = value[len("ws://") :]
    bad = ListenError(f"invalid websocket --listen URL `{value}`; expected `ws://IP:PORT`")
    if "/" in rest.rstrip("/") or (rest.endswith("/") and rest != rest.rstrip("/")):
        raise bad
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0 or rest[close + 1 : close + 2] != ":":
            raise bad
        host, port_text = rest[1:close], rest[close + 2 :]
    else:
        host, _, port_text = rest.rpartition(":")
    try:
        ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise bad from None
    if not 0 <= port <= 65535 or not port_text.isdigit():
        raise bad
    return ListenAddress("ws", host, port)
