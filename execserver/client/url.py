"""Which URLs the websocket client accepts, checked before anything is imported
for connecting (the command-line tools answer a bad URL at interpreter speed)."""

from __future__ import annotations

from typing import Final

__all__ = ["WEBSOCKET_SCHEMES", "check_url"]

WEBSOCKET_SCHEMES: Final = ("ws://", "wss://")


def check_url(url: str) -> None:
    """Refuse what is not a websocket URL before trying to connect to it."""
    if not url.startswith(WEBSOCKET_SCHEMES):
        hint = f"; did you mean ws://{url}" if "://" not in url else ""
        raise ValueError(f"exec-server URL must start with ws:// or wss://, got {url!r}{hint}")
