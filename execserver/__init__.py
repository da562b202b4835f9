"""execserver: a wire-compatible Codex exec-server daemon and its core-side client."""

from __future__ import annotations

# No typing at run time: the sandboxed fs helper imports this package first
# (execserver/fs/sandboxed/program.py), and typing is ~2 MB of every helper.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from execserver.client.local import serve_local as serve_local

__all__ = ["REFERENCE_VERSION", "serve_local"]

__version__ = "0.1.0"

# The protocol version we are wire-compatible with (reported as executorVersion).
REFERENCE_VERSION = "0.169.0"


def __getattr__(name: str) -> Any:
    # Imported on first use: ``import execserver`` (the daemon) must not load the client.
    if name == "serve_local":
        from execserver.client.local import serve_local

        return serve_local
    raise AttributeError(f"module 'execserver' has no attribute {name!r}")
