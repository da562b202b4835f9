"""The client's defaults, shared by the async client (``connection.py``) and the
blocking session of the one-shot commands (``blocking_rpc.py``), which must not
import the async client to read them."""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_CLIENT_NAME",
    "INITIALIZE_TIMEOUT",
    "REQUEST_TIMEOUT",
]

# The name a client gives in initialize.
DEFAULT_CLIENT_NAME: Final = "execserver-client"
CONNECT_TIMEOUT: Final = 10.0
INITIALIZE_TIMEOUT: Final = 10.0
REQUEST_TIMEOUT: Final = 60.0
